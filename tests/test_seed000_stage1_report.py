"""The seed000_stage1 report is written from the runner's results.json, cell by cell."""

from __future__ import annotations

import json
from pathlib import Path

from ldpfed.simulations.reproductions import seed000_stage1 as repro


def _row(public: float, private: float, combined: float) -> dict:
    eps = {"1": private, "3": private + 0.01, "8": private + 0.02}
    return {
        "clip": 2.5, "train_clipped": 0.3, "public_only": public, "nonprivate": 0.81,
        "private": eps, "combined": {k: combined for k in eps}, "shift": {k: [0.0, 0.0] for k in eps},
        "train": 100, "dev": 50, "public": 40,
    }


def test_report_from_results(tmp_path: Path) -> None:
    config = repro.make_input("full")
    results = {
        "config": config, "device": "test", "elapsed_s": 1.0, "complete": False, "skipped": ["mr/stage1/1"],
        "stage1": {"0": {"bytes": 123, "fingerprint": "ab" * 32, "seconds": 2.0}},
        "cells": {
            "sst2/base/0": _row(0.70, 0.60, 0.65),
            "sst2/stage1/0": _row(0.75, 0.77, 0.78),
            "sst2/stage1/1": _row(0.76, 0.79, 0.80),
        },
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert repro.main(["--report", str(path), "--out", str(tmp_path / "report"), "--command", "CMD"]) == 0
    text = (tmp_path / "report" / "README.md").read_text()
    assert "INCOMPLETE: cells mr/stage1/1 not run" in text
    assert "| stage 1 (shipped) | 0.755 [0.750, 0.760] | 0.810 [0.810, 0.810] | 0.780 [0.770, 0.790] |" in text
    assert "| MiniLM (no stage 1) | 0.700 | 0.810 | 0.600 |" in text
    assert "Combined above both public-only and private-only (stage 1): 2 of 6" in text  # eps 1 of each seed only
    assert "Movie Review" not in text  # no cells, no section
    assert "ab" * 32 in text and "CMD" in text
    assert json.loads((tmp_path / "report" / "results.json").read_text()) == results


def test_noise_multipliers_are_ldpfed_calibrations() -> None:
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.randomizers.gaussian import GaussianRandomizer

    for eps, z in repro.noise_multipliers().items():
        randomizer = GaussianRandomizer(1.0, z * 2.0)  # clip 1: sensitivity 2
        assert abs(compose_epsilon({randomizer.event: 1}, repro.DELTA) - float(eps)) < 1e-6
