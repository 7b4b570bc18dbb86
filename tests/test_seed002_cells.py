"""Seed 002's reproduction keeps the MLP cells recorded before the mixed-report classifier was added."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ldpfed.simulations.reproductions._cells import cell_key
from ldpfed.simulations.reproductions.seed002_dpie import EPSILONS, settings

REPORT = Path(__file__).resolve().parents[1] / "simulations" / "reports" / "reproductions" / "seed002_dpie" / "sst2_full"


def _args(classifiers: list[str]) -> argparse.Namespace:
    return argparse.Namespace(classifiers=classifiers, datasets=["sst2"], train_records=[0], epochs=3, epsilons=list(EPSILONS))


def test_recorded_mlp_cells_are_the_settings_of_their_command() -> None:
    recorded = set(json.loads((REPORT / "results.json").read_text())["cells"])
    wanted = {cell_key(s, seed) for s in settings(_args(["mlp"])) for seed in range(3)}
    assert wanted == recorded


def test_lda_cells_are_keyed_apart_from_mlp_cells() -> None:
    mlp = {cell_key(s, 0) for s in settings(_args(["mlp"]))}
    lda = settings(_args(["mixed-lda"]))
    assert all(s["classifier"] == "mixed-lda" and "epochs" not in s for s in lda)
    assert not mlp & {cell_key(s, 0) for s in lda}
    assert len(settings(_args(["mlp", "mixed-lda"]))) == len(mlp) + len(lda)
