"""Partitions kept on disk, keyed by everything that decides them.

A simulation builds its population in several processes (the encoding child, the ServerApp, a node's actor), and
each would import Flower Datasets (about 2.8 CPU s: it brings ``datasets``, pandas, seaborn and matplotlib) to
cut the same records the same way. ``partition`` (fed.data.partition) is deterministic in its arguments, so the first process
stores the cut under ``<cache_dir>/partitions/<digest>.npz`` and the others read it. A stored cut is taken only if
it is one of the shapes ``partition`` returns (``num_users`` sorted shares covering every record once);
anything else is cut again and overwritten. Devices never partition (one user holds every record).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

VERSION = b"partition-cache 1"
"""Changes whenever ``partition`` would cut the same arguments differently."""


def path_of(cache_dir: str | Path, labels: np.ndarray, num_users: int, scheme: str, seed: int, groups: np.ndarray | None) -> Path:
    """Where the cut of these arguments of :func:`~ldpfed.fed.data.partition.partition` is stored."""
    digest = hashlib.sha256(VERSION)
    digest.update(f"{num_users}|{scheme}|{seed}|{len(labels)}".encode())
    digest.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    if groups is not None:
        digest.update(b"groups")
        digest.update(np.ascontiguousarray(groups, dtype=np.int64).tobytes())
    return Path(cache_dir) / "partitions" / f"{digest.hexdigest()[:40]}.npz"


def read(path: Path, records: int, num_users: int) -> list[np.ndarray] | None:
    """The stored cut at ``path``, or None if there is none or it is not one (``num_users`` sorted shares covering
    each of ``records`` records once)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            flat, ends = stored["indices"], stored["ends"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if (
        flat.dtype != np.int64 or ends.dtype != np.int64 or flat.shape != (records,) or ends.shape != (num_users,)
        or (num_users and ends[-1] != records) or np.any(np.diff(ends, prepend=0) < 0)
    ):
        return None
    shares = np.split(flat, ends[:-1])
    if any(np.any(np.diff(share) <= 0) for share in shares):
        return None
    if records and (flat.min() < 0 or flat.max() >= records or np.any(np.bincount(flat, minlength=records) != 1)):
        return None
    return shares


def write(path: Path, shares: list[np.ndarray]) -> None:
    """Store ``shares`` at ``path``: written under a temporary name and rename into place: readers never see a partial file, concurrent writers
    write the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ends = np.cumsum([len(share) for share in shares], dtype=np.int64)
    flat = np.concatenate(shares).astype(np.int64) if shares else np.zeros(0, np.int64)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, indices=flat, ends=ends)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
