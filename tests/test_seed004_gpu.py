"""Seed 004's device path: the stored strict calibration and the stacked MLP trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulations.reproductions import _seed004_gpu, seed004_bits


def test_the_stored_strict_rows_are_what_ldpfed_calibrates_now() -> None:
    stored = json.loads(_seed004_gpu.STRICT_FILE.read_text())
    assert stored == json.loads(json.dumps(_seed004_gpu.strict_table(seed004_bits.rows_for("intent"), 384, seed004_bits.DELTA)))


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
