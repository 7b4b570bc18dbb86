"""A device's accounting figures on disk (fed.privacy.figure_cache): the same figures as computed, and
never one the device did not compute itself with this code.

A figure read back must equal the one computed without the store, bit for bit; an entry edited to a
smaller epsilon, copied from another device, torn by a crash, or written by other accounting code is
not trusted: the figure is computed again.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldpfed.fed.privacy import composition, figure_cache
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, RandomizedResponseEvent
from ldpfed.fed.privacy.figure_cache import FIGURES_FILE, FigureStore

DELTA = 1e-5
MIXED = {GaussianEvent(6.0, 3.6): 3, RandomizedResponseEvent(1.0, 2): 3}
"""A Gaussian training release with randomized-response labels, three times: a PLD composition."""
KEY = bytes(range(32))


@pytest.fixture()
def fresh() -> Iterator[None]:
    """No store and no figure of this process's caches before or after the test."""
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    yield
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()


def _with_store(path: Path, key: bytes = KEY) -> float:
    """The mixed figure as a new process on the device computes it: a new store, nothing in memory."""
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    figure_cache.use_store(path, key)
    return compose_epsilon(MIXED, DELTA)


def _entries(path: Path) -> dict[str, list[str]]:
    return json.loads(path.read_text())["entries"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many PLD compositions run from now on."""
    calls: list[int] = []
    real = composition._compose

    def counted(multiset: composition.Multiset, delta: float) -> float:
        calls.append(1)
        return real(multiset, delta)

    monkeypatch.setattr(composition, "_compose", counted)
    return calls


def test_a_stored_figure_is_the_figure_computed_without_the_store(tmp_path: Path, fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = compose_epsilon(MIXED, DELTA)
    sigma = calibrate_gaussian_sigma(4.0, DELTA, 3, 6.0, {RandomizedResponseEvent(1.0, 2): 3})
    path = tmp_path / FIGURES_FILE
    assert _with_store(path) == plain  # computed and stored
    calls = _counting(monkeypatch)
    assert _with_store(path) == plain  # read back
    assert calls == [], "the stored figure was computed again"
    figure_cache.stop_store()
    figure_cache.use_store(path, KEY)
    assert calibrate_gaussian_sigma(4.0, DELTA, 3, 6.0, {RandomizedResponseEvent(1.0, 2): 3}) == sigma  # computed and stored
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    calls.clear()
    figure_cache.use_store(path, KEY)
    assert calibrate_gaussian_sigma(4.0, DELTA, 3, 6.0, {RandomizedResponseEvent(1.0, 2): 3}) == sigma
    assert calls == [], "the stored calibration was computed again"


@pytest.mark.parametrize("tamper", ["smaller value", "foreign mac", "torn file", "not json"])
def test_a_tampered_figure_is_not_trusted(tmp_path: Path, fresh: None, tamper: str) -> None:
    path = tmp_path / FIGURES_FILE
    true = _with_store(path)
    entries = _entries(path)
    (key,) = [k for k, (value, _) in entries.items() if float.fromhex(value) == true]
    if tamper == "smaller value":  # the entry's figure halved, its MAC kept
        entries[key][0] = (true / 2).hex()
        path.write_text(json.dumps({"entries": entries}))
    elif tamper == "foreign mac":  # a MAC made under another key (another device's file, or a forger's)
        other = FigureStore(path, b"another device's key")
        entries[key] = [(true / 2).hex(), other._mac(key, (true / 2).hex())]
        path.write_text(json.dumps({"entries": entries}))
    elif tamper == "torn file":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    else:
        path.write_bytes(b"\x00" * 64)
    assert _with_store(path) == true
    assert _entries(path)[key][0] == true.hex(), "the recomputed figure was not stored again"


def test_figures_of_another_device_or_other_accounting_code_are_not_read(
    tmp_path: Path, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / FIGURES_FILE
    _with_store(path)
    calls = _counting(monkeypatch)
    _with_store(path, key=b"another device's record-id key")
    assert calls, "a figure stored under another device's key was read"
    calls.clear()
    monkeypatch.setattr(figure_cache, "accounting_fingerprint", lambda: "other accounting code")
    _with_store(path)
    assert calls, "a figure stored by other accounting code was read"


def test_the_figure_file_is_the_owners_only_whatever_the_umask(tmp_path: Path, fresh: None) -> None:
    before = os.umask(0)
    try:
        path = tmp_path / FIGURES_FILE
        _with_store(path)
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [FIGURES_FILE], "a temporary file was left behind"


def test_a_gaussian_figure_brings_the_next_steps_and_each_equals_its_own_computation(tmp_path: Path, fresh: None) -> None:
    gaussian = GaussianEvent(6.0, 3.6)
    plain = [compose_epsilon({gaussian: n}, DELTA) for n in range(1, 3 + composition.GDP_LOOKAHEAD)]
    composition._compose_cached.cache_clear()
    figure_cache.use_store(tmp_path / FIGURES_FILE, KEY)
    compose_epsilon({gaussian: 1}, DELTA)
    assert len(_entries(tmp_path / FIGURES_FILE)) == 1 + composition.GDP_LOOKAHEAD
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    figure_cache.use_store(tmp_path / FIGURES_FILE, KEY)
    assert [compose_epsilon({gaussian: n}, DELTA) for n in range(1, 3 + composition.GDP_LOOKAHEAD)] == plain


def test_figures_of_a_batch_reach_the_file_once_at_its_end(tmp_path: Path, fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # clients.app wraps every message in a batch, which opens before the device's store is set.
    writes: list[int] = []
    real = FigureStore._write
    monkeypatch.setattr(FigureStore, "_write", lambda self, entries: (writes.append(len(entries)), real(self, entries)))
    with figure_cache.batch():
        figure_cache.use_store(tmp_path / FIGURES_FILE, KEY)
        compose_epsilon({GaussianEvent(6.0, 3.6): 2}, DELTA)
        compose_epsilon({GaussianEvent(6.0, 1.0): 2}, DELTA)
        assert writes == [] and not (tmp_path / FIGURES_FILE).exists()
    assert writes == [2 * (1 + composition.GDP_LOOKAHEAD)]
