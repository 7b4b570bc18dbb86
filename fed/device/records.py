"""A device's record store: its hosted users' clean records, encoded once at setup.

On a real SuperNode Flower starts a new ``flwr-clientapp`` process for every message. Setup
is the one message that loads the data and runs the encoder (torch, transformers); it writes
the clean records (features, labels, record ids, per user) to ``<state-dir>/records/``, and
every later message reads them back with numpy alone: no data loading, no partitioning, no
tokenizing, no model. The store is the device's own: owner-only files in its state folder,
never sent.

A stored set is filed under :func:`records_key`, a digest of everything that shapes it, so a
setup with another bundle, other data or another hosted user id encodes anew, and a message
whose key has no stored set is refused as not set up rather than rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ldpfed.fed.device.state import owner_only_dir
from ldpfed.fed.runtime.user import UserRecords

RECORDS_FOLDER = "records"
"""The store's folder inside the device's state folder."""
_FIELDS = ("train", "train_labels", "query", "query_labels", "ids")

StoredRecords = tuple[dict[int, UserRecords], int, int]
"""The hosted users' records by user id, the number of labels, and the largest query count of the run."""


def records_key(bundle: str, data: str, user: int, secret: bytes) -> str:
    """Digest of what shapes a device's records.

    ``bundle`` is the digest of the unpacked bundle's files (encoder and projection); then the
    device's ``data`` (its spec and, for a folder, each file's name, size and modification time, so
    that data edited in place is encoded anew), its hosted ``user`` id, and the record-id key
    (through its own digest). Nothing of the run config: a device's records are its own.
    """
    shape = {
        "bundle": bundle,
        "data": data,
        "data_files": _data_files(data),
        "user": user,
        "record_id_key": hashlib.sha256(secret).hexdigest(),
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()


def _data_files(spec: str) -> list[tuple[str, int, int]]:
    """Name, size and modification time of each file of a data folder (none for other specs)."""
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        return []
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())


def save_records(state_dir: Path, key: str, stored: StoredRecords) -> None:
    """File the records under ``key`` (owner-only, replaced atomically; the state folder must exist)."""
    records, num_labels, max_queries = stored
    folder = owner_only_dir(Path(state_dir) / RECORDS_FOLDER)
    users = sorted(records)
    arrays: dict[str, np.ndarray] = {
        "key": np.array(key),
        "users": np.array(users, dtype=np.int64),
        "counts": np.array([num_labels, max_queries], dtype=np.int64),
    }
    for u in users:
        user = records[u]
        for name in _FIELDS:
            value = user.record_ids if name == "ids" else getattr(user, name)
            arrays[f"{u}/{name}"] = value.astype(str) if name == "ids" else value
    fd, temp = tempfile.mkstemp(dir=folder, prefix=".records-", suffix=".npz")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, folder / f"{key}.npz")
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def load_records(state_dir: Path, key: str) -> StoredRecords | None:
    """The records filed under ``key``, or None when none are (or the file is unreadable)."""
    path = Path(state_dir) / RECORDS_FOLDER / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            if str(stored["key"]) != key:
                return None
            num_labels, max_queries = (int(n) for n in stored["counts"])
            records = {
                int(u): UserRecords(
                    *(stored[f"{u}/{name}"] for name in _FIELDS[:-1]), ids=stored[f"{u}/ids"].astype(object)
                )
                for u in stored["users"]
            }
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    try:  # used now: the device keeps the record sets used last (fed.device.retention)
        os.utime(path)
    except OSError:
        pass
    return records, num_labels, max_queries
