"""A simulated node's clean user records, built once per run and read by every engine process.

Ray hands each message to any free actor, and each actor would otherwise build the node's
users itself: generating or loading the dataset, partitioning it and reading the encodings
took 17 s per actor for 2,500 users of 16 records (issue 10's 16 x 384 profile), paid again
the first time each further actor served the node. The first builder writes the records to
the run's cache folder (arrays only, no pickle; written to a temporary name and renamed into
place, so a reader sees a whole file or none); the others read them in a fraction of a second.

Files are scoped to one run (their name hashes the run id with everything that shapes the
records), so a new run or a new version of the code never reads stale records, and files
older than :data:`KEEP_SECONDS` are removed when a new one is written. Simulation only: a
device never writes its records anywhere.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ldpfed.fed.runtime.user import UserRecords

Built = tuple[dict[int, UserRecords], int, int]
"""Records by user id, the number of labels, the largest query count of the run."""

KEEP_SECONDS = 24 * 3600
"""Age after which a run's records file is removed (by the next run that writes one)."""


def shared_records(folder: Path, key: str, build: Callable[[], Built]) -> Built:
    """The records of ``key`` (a run id and what shapes the records) from ``folder``, else ``build()`` them and store them there."""
    path = folder / f"{hashlib.sha256(key.encode()).hexdigest()}.npz"
    if path.is_file():
        return _read(path)
    built = build()
    folder.mkdir(parents=True, exist_ok=True)
    _prune(folder)
    _write(path, *built)
    return built


def _write(path: Path, records: dict[int, UserRecords], num_labels: int, max_queries: int) -> None:
    users = sorted(records)
    parts = [records[u] for u in users]
    dim = next((p.train.shape[1] for p in parts if p.train.ndim == 2), 0)

    def stack(name: str, rows: bool = False) -> np.ndarray:
        arrays = [np.asarray(getattr(p, name)) for p in parts]
        arrays = [a.reshape(-1, dim) for a in arrays] if rows else arrays
        return np.concatenate(arrays) if arrays else np.zeros((0, dim) if rows else 0)

    def starts(lengths: list[int]) -> np.ndarray:
        return np.cumsum([0, *lengths]).astype(np.int64)

    ids = [np.asarray(p.record_ids).astype(str) for p in parts]
    arrays = {
        "users": np.asarray(users, dtype=np.int64),
        "train": stack("train", rows=True),
        "train_labels": stack("train_labels"),
        "train_start": starts([len(p.train) for p in parts]),
        "query": stack("query", rows=True),
        "query_labels": stack("query_labels"),
        "query_start": starts([len(p.query) for p in parts]),
        "ids": np.concatenate(ids) if ids else np.zeros(0, dtype=str),
        "ids_start": starts([len(i) for i in ids]),
        "counts": np.array([num_labels, max_queries], dtype=np.int64),
    }
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> Built:
    with np.load(path, allow_pickle=False) as data:
        a = {name: data[name] for name in data.files}
    t, q, i = a["train_start"], a["query_start"], a["ids_start"]
    ids = a["ids"].astype(object)
    records = {
        int(u): UserRecords(
            train=a["train"][t[n] : t[n + 1]],
            train_labels=a["train_labels"][t[n] : t[n + 1]],
            query=a["query"][q[n] : q[n + 1]],
            query_labels=a["query_labels"][q[n] : q[n + 1]],
            ids=ids[i[n] : i[n + 1]],
        )
        for n, u in enumerate(a["users"].tolist())
    }
    num_labels, max_queries = (int(c) for c in a["counts"])
    return records, num_labels, max_queries


def _prune(folder: Path) -> None:
    cutoff = time.time() - KEEP_SECONDS
    for old in folder.glob("*.npz"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except FileNotFoundError:  # another process removed it first
            pass
