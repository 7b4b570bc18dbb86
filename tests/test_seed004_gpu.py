"""Seed 004's device path: the stored strict calibration and the stacked MLP trainer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfed.simulations.reproductions import _seed004_gpu, seed004_bits


def test_the_stored_strict_rows_are_what_ldpfed_calibrates_now() -> None:
    stored = json.loads(_seed004_gpu.STRICT_FILE.read_text())
    assert stored == json.loads(json.dumps(_seed004_gpu.strict_table(seed004_bits.all_rows(), 384, seed004_bits.DELTA)))


def test_a_strict_row_rebuilt_from_the_file_has_the_calibrated_true_epsilon_and_refusals_stay_refusals() -> None:
    strict = json.loads(_seed004_gpu.STRICT_FILE.read_text())
    mean, std = np.zeros(384), np.ones(384)
    rebuilt = _seed004_gpu.build_from_table("ome", "strict", 1.0, 1.0, 384, mean, std, strict, "ome eps 1 lambda 1")
    calibrated = seed004_bits.build("ome", "strict", 1.0, 1.0, 384, mean, std)
    assert rebuilt.params() == calibrated.params()
    assert rebuilt.true_epsilon <= 1.0
    with pytest.raises(ValueError, match="true epsilon of at least"):
        _seed004_gpu.build_from_table("ome", "strict", 1.0, 100.0, 384, mean, std, strict, "ome eps 1 lambda 100")
    with pytest.raises(ValueError, match="dim 384"):
        _seed004_gpu.build_from_table("ome", "strict", 1.0, 1.0, 50, mean[:50], std[:50], strict, "ome eps 1 lambda 1")


def test_stacked_mlps_learn_each_from_its_own_rows() -> None:
    import torch

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    y = (x[:, 0] > 0).astype(np.int64)
    flipped = x.copy()
    flipped[:, 0] *= -1  # the same labels mean the opposite sign in slot 1
    data = torch.as_tensor(np.stack([x, flipped]), dtype=torch.float32)
    weights = _seed004_gpu.train_stacked(
        data, torch.tensor([0, 1]), torch.as_tensor(y), 2, 16, 20, 32, 0.05, 0.9, 1e-6, 0.0, torch.Generator().manual_seed(0),
    )
    on_x = _seed004_gpu.accuracies(weights, torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y))
    assert on_x[0] > 0.95 and on_x[1] < 0.05


def test_stacked_mlps_learn_each_from_its_own_labels_and_are_tested_on_their_own_rows() -> None:
    import torch

    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(1, 400, 6)), dtype=torch.float32)
    y = (x[0, :, 0] > 0).long()
    labels, slot = torch.stack([y, 1 - y]), torch.tensor([0, 1])  # slot 1: the opposite labels on the same rows
    weights = _seed004_gpu.train_stacked(
        x, torch.tensor([0, 0]), labels, 2, 16, 20, 32, 0.05, 0.9, 1e-6, 0.0, torch.Generator().manual_seed(0), y_slot=slot,
    )
    assert min(_seed004_gpu.accuracies(weights, x.expand(2, -1, -1), labels, slot)) > 0.95
    assert max(_seed004_gpu.accuracies(weights, x[0], y)[1:]) < 0.05


@pytest.mark.parametrize("row", seed004_bits.rows_for("imdb")[1:], ids=lambda r: r[0])
@pytest.mark.parametrize("accounting", ["paper", "strict"])
def test_the_device_path_builds_the_randomizer_the_cpu_path_builds(row: tuple, accounting: str) -> None:
    name, protocol, epsilon, lam = row
    strict = json.loads(_seed004_gpu.STRICT_FILE.read_text())
    rng = np.random.default_rng(1)
    mean, std = rng.normal(size=384), rng.uniform(0.5, 2.0, size=384)
    try:
        expected = seed004_bits.build(protocol, accounting, epsilon, lam, 384, mean, std)
    except ValueError as err:
        with pytest.raises(ValueError, match="true epsilon of at least"):
            _seed004_gpu.build_from_table(protocol, accounting, seed004_bits.paper_epsilon(protocol, epsilon), lam, 384,
                                          mean, std, strict, name)
        assert "true epsilon of at least" in str(err)
        return
    rebuilt = _seed004_gpu.build_from_table(protocol, accounting, seed004_bits.paper_epsilon(protocol, epsilon), lam, 384,
                                            mean, std, strict, name)
    assert rebuilt.params() == expected.params()
    assert rebuilt.true_epsilon == pytest.approx(expected.true_epsilon, rel=1e-9)


def test_a_device_run_of_a_sentiment_set_splits_each_seed_as_the_cpu_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 384))
    y = (x[:, 0] > 0).astype(np.int64)
    monkeypatch.setattr(_seed004_gpu, "encodings", lambda *a: (x, y, np.empty((0, 384)), np.empty(0, dtype=np.int64)))
    seen: list[tuple[int, int]] = []
    real = seed004_bits.split_rows

    def split_rows(dataset: str, encoded: tuple, seed: int) -> tuple:
        parts = real(dataset, encoded, seed)
        seen.append((seed, len(parts[2])))
        return parts

    monkeypatch.setattr(seed004_bits, "split_rows", split_rows)
    args = argparse.Namespace(datasets=["imdb"], seeds=2, epochs=1, model=tmp_path, data=tmp_path, out=tmp_path / "out",
                              device="cpu", time_budget=600.0, chunk=1, threads=1, train_limit=0, test_limit=0)
    _seed004_gpu.run(args, seed004_bits)
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"].values()
    assert {s for s, _ in seen} == {0, 1} and {n for _, n in seen} == {12}  # 8:2 of 60, per seed
    rows = seed004_bits.rows_for("imdb")
    assert len(cells) == 2 * (1 + 2 * (len(rows) - 1))
    sue = [c for c in cells if c["setting"]["row"] == "sue eps 1" and c["setting"]["accounting"] == "paper"]
    assert [c["true_epsilon"] for c in sue] == [seed004_bits.build("sue", "paper", 1.0, None, 384, x.mean(0), x.std(0)).true_epsilon] * 2


def _cell(results: Any, dataset: str, epochs: int, seed: int, accuracy: float) -> None:
    results.put({"dataset": dataset, "row": "clean", "accounting": "clean", "epochs": epochs}, seed, {"accuracy": accuracy})


def test_merging_a_device_run_replaces_every_cpu_cell_of_its_datasets(tmp_path: Path) -> None:
    from ldpfed.simulations.reproductions._cells import Results

    report, device = tmp_path / "report", tmp_path / "device"
    cpu = Results(report, seed004_bits.SETUP)
    for seed in range(3):
        _cell(cpu, "imdb", 10, seed, 0.1)  # the reduced CPU run
        _cell(cpu, "intent", 50, seed, 0.9)
    _cell(cpu, "imdb", 50, 2, 0.1)  # a CPU cell at the device's epochs the device run did not make
    (report / seed004_bits.DEVICE_RUNS).write_text(json.dumps([
        {"datasets": ["intent"], "command": "INTENT RUN", "gpu": "g", "elapsed_s": 1, "skipped": []}]))
    gpu = Results(device, seed004_bits.SETUP)
    for seed in range(2):
        _cell(gpu, "imdb", 50, seed, 0.8)
    assert seed004_bits.main(["report", "--results", str(device), "--out", str(report), "--command", "IMDB RUN"]) == 0
    merged = Results(report, seed004_bits.SETUP).cells.values()
    assert sorted((c["setting"]["dataset"], c["setting"]["epochs"], c["seed"]) for c in merged) == [
        ("imdb", 50, 0), ("imdb", 50, 1), ("intent", 50, 0), ("intent", 50, 1), ("intent", 50, 2)]
    readme = (report / "README.md").read_text()
    imdb = readme.split("## imdb")[1].split("##")[0]
    assert "REDUCED: 2 of the paper's 20 runs." in imdb and "epochs" not in imdb
    assert "80.00 [80.00, 80.00] (n=2)" in imdb
    assert "INTENT RUN" in readme and "IMDB RUN" in readme
