"""``ldpfed audit``: the three configurations the project must audit, and the events' infinity."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fed.config import RunConfig
from fed.plan import make_plan
from fed.randomizers.auditing import build_for_audit
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["audit", *argv, "--json", "--samples", "20000"]) == 0
    return json.loads(capsys.readouterr().out)


def test_unknown_mechanism_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "--mechanism", "identity", "--epsilon", "1"])
    assert exit_info.value.code == 2
    assert "auditable: gaussian" in capsys.readouterr().err


def test_calibrated_gaussian_passes(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _run(capsys, "--mechanism", "gaussian", "--epsilon", "3", "--delta", "1e-5")
    assert row["claimed_epsilon"] == 3.0
    assert row["accounted_epsilon"] == pytest.approx(3.0, rel=1e-6)
    assert 0.5 < row["audited_lower_bound"] <= 3.0 and row["verdict"] == "pass"


def test_the_audit_covers_the_device_sampler_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--mechanism", "laplace", "--epsilon", "1", "--dim", "2", "--samples", "5000", "--sampler", "device", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["sampler"] == "opendp+chacha20" and row["verdict"] == "pass"
    assert 0.3 < row["audited_lower_bound"] <= 1.0


def test_published_ome_violates_its_claim(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _run(capsys, "--mechanism", "ome", "--epsilon", "1", "--dim", "32")
    assert row["audited_lower_bound"] > 1.0 and row["verdict"] == "claim violated"
    assert row["accounted_epsilon"] > 1000  # true epsilon of OME with lambda = 100
    assert row["params"]["claimed_epsilon"] == 1.0


def test_seed002_laplace_violates_its_claim(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = _run(capsys, "--mechanism", "laplace-seed002", "--epsilon", "1", "--dim", "64")
    assert row["accounted_epsilon"] == pytest.approx(8.0, rel=1e-4)
    assert 1.0 < row["audited_lower_bound"] <= 8.0 and row["verdict"] == "claim violated"


def test_classical_gaussian_beyond_one_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "--mechanism", "gaussian-classical", "--epsilon", "3"])
    assert exit_info.value.code == 2
    assert "epsilon < 1" in capsys.readouterr().err


def test_command_line_entry_point_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "audit", "--mechanism", "ome", "--epsilon", "1", "--dim", "16", "--samples", "5000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "claim violated" in out and "ome" in out


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace", "dchi", "sue", "oue", "ome", "dpie-gaussian", "dpie-laplace", "texthide"])
def test_the_audit_builds_what_a_run_builds(mechanism: str) -> None:
    # One release per record, same clip, dim and (default) options: the plan's randomizer is the audited one.
    config = RunConfig(mechanism=mechanism, epsilon=1.0, clip=1.0, dim=16)
    plan = make_plan(config, 2)
    case = build_for_audit(mechanism, 1.0, config.delta, 16, {"clip": 1.0})
    assert case.randomizer.params() == plan.train.params()
    claimed = plan.calibrations["train"].get("claimed_epsilon") or plan.calibrations["train"]["target_epsilon"]
    assert case.claimed_epsilon == (math.inf if claimed is None else claimed)
    if mechanism == "dpie-gaussian":  # TextHide's published k and masks; no assumption on the coefficients
        assert {k: case.randomizer.params()[k] for k in ("k", "masks", "max_coefficient")} == {
            "k": 4, "masks": 16, "max_coefficient": 1.0
        }
