"""The partition cache: a stored cut is the cut partition() makes without a cache, is read instead of cut again, and is taken only
when it has the shape of one (every record once, sorted shares, one per user)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.data import partition as partition_module
from ldpfed.fed.data.partition import partition

LABELS = np.random.default_rng(3).integers(0, 3, 300)
GROUPS = np.random.default_rng(4).integers(0, 2, 300)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    cut = partition_module._cut

    def counted(*args, **kwargs):
        calls.append(1)
        return cut(*args, **kwargs)

    monkeypatch.setattr(partition_module, "_cut", counted)
    return calls


@pytest.mark.parametrize("scheme", ["iid", "dirichlet:0.3", "size:lognormal:1"])
def test_a_stored_cut_is_the_cut_and_is_read_not_cut_again(scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    fresh = partition(LABELS, 7, scheme, 11, GROUPS)
    calls.clear()
    first = partition(LABELS, 7, scheme, 11, GROUPS, cache_dir=tmp_path)
    again = partition(LABELS, 7, scheme, 11, GROUPS, cache_dir=tmp_path)
    assert len(calls) == 1
    for shares in (first, again):
        assert len(shares) == 7 and all(np.array_equal(a, b) and b.dtype == np.int64 for a, b in zip(fresh, shares))


@pytest.mark.parametrize(
    "other", [dict(seed=12), dict(num_users=8), dict(scheme="iid"), dict(groups=None), dict(labels=LABELS[::-1].copy())]
)
def test_any_other_argument_is_another_cut(other: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    base = dict(labels=LABELS, num_users=7, scheme="dirichlet:0.3", seed=11, groups=GROUPS)
    partition(**base, cache_dir=tmp_path)
    changed = {**base, **other}
    shares = partition(**changed, cache_dir=tmp_path)
    assert len(calls) == 2
    calls.clear()
    expected = partition(changed["labels"], changed["num_users"], changed["scheme"], changed["seed"], changed["groups"])
    assert all(np.array_equal(a, b) for a, b in zip(expected, shares))


def _damage(path: Path, how: str) -> None:
    with np.load(path) as stored:
        flat, ends = stored["indices"].copy(), stored["ends"].copy()
    if how == "overlap":
        flat[0] = flat[-1]
    elif how == "unsorted":
        flat[:2] = flat[:2][::-1]
    elif how == "users":
        ends = ends[:-1]
    elif how == "dtype":
        flat = flat.astype(np.int32)
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:40])
        return
    np.savez(path, indices=flat, ends=ends)


@pytest.mark.parametrize("how", ["overlap", "unsorted", "users", "dtype", "truncated"])
def test_a_stored_file_that_is_not_a_cut_is_cut_again(how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    fresh = partition(LABELS, 7, "iid", 11, cache_dir=tmp_path)
    [path] = (tmp_path / "partitions").iterdir()
    _damage(path, how)
    shares = partition(LABELS, 7, "iid", 11, cache_dir=tmp_path)
    assert len(calls) == 2 and all(np.array_equal(a, b) for a, b in zip(fresh, shares))
    assert partition(LABELS, 7, "iid", 11, cache_dir=tmp_path) and len(calls) == 2  # the good cut was written back


def test_no_cache_folder_cuts_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    partition(LABELS, 7, "iid", 11, cache_dir=None)
    partition(LABELS, 7, "iid", 11, cache_dir=None)
    assert len(calls) == 2


def test_a_bad_scheme_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown scheme"):
        partition(LABELS, 7, "zipf", 11, cache_dir=tmp_path)
    assert not (tmp_path / "partitions").exists() or not any((tmp_path / "partitions").iterdir())
