"""A simulated node's records are built once per run and read back by the engine's other processes (fed.device.shared_records)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ldpfed.fed.device.shared_records import KEEP_SECONDS, shared_records
from ldpfed.fed.runtime.user import UserRecords


def _records() -> dict[int, UserRecords]:
    rng = np.random.default_rng(0)
    return {
        3: UserRecords(rng.normal(size=(4, 5)), rng.integers(0, 3, 4), rng.normal(size=(2, 5)), rng.integers(0, 3, 2),
                       np.array(["a", "b", "b", "c", "a", "d"], dtype=object)),
        7: UserRecords(rng.normal(size=(1, 5)), rng.integers(0, 3, 1), np.zeros((0, 5)), np.zeros(0, np.int64)),
        9: UserRecords(np.zeros((0, 5)), np.zeros(0, np.int64), rng.normal(size=(3, 5)), rng.integers(0, 3, 3)),
    }


def test_the_first_process_builds_and_the_others_read_the_same_records(tmp_path: Path) -> None:
    calls = []

    def build() -> tuple[dict[int, UserRecords], int, int]:
        calls.append(1)
        return _records(), 3, 2

    built = shared_records(tmp_path, "run 1, node 0", build)
    read = shared_records(tmp_path, "run 1, node 0", build)
    assert len(calls) == 1 and read[1:] == (3, 2) and sorted(read[0]) == [3, 7, 9]
    for uid, user in built[0].items():
        other = read[0][uid]
        for name in ("train", "train_labels", "query", "query_labels"):
            np.testing.assert_array_equal(getattr(other, name), getattr(user, name))
            assert getattr(other, name).dtype == np.asarray(getattr(user, name)).dtype
        assert other.record_ids.tolist() == user.record_ids.tolist()  # ids given, or the positions
    shared_records(tmp_path, "run 2, node 0", build)  # another run (or node) never reads these
    assert len(calls) == 2


def test_old_files_are_removed_when_a_new_one_is_written(tmp_path: Path) -> None:
    shared_records(tmp_path, "old run", lambda: (_records(), 3, 2))
    (old,) = tmp_path.glob("*.npz")
    stale = time.time() - KEEP_SECONDS - 60
    os.utime(old, (stale, stale))
    shared_records(tmp_path, "new run", lambda: (_records(), 3, 2))
    assert not old.exists() and len(list(tmp_path.glob("*.npz"))) == 1
