"""The attribute attack (`ldpfed attack RUN --kind attribute`): beats chance when reports are nearly
clean, falls to chance as epsilon goes to 0, and refuses runs it cannot attack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.app import app as client_app
from fed.config import RunConfig
from simulations.cli import main
from strategies.app import app as server_app
from tests.local_grid import run_local


def _attacked(tmp_path: Path, epsilon: float) -> dict:
    out = tmp_path / f"run-{epsilon:g}"
    config = RunConfig(
        data="generated:1200", public="generated:2000", users=12, nodes=1, partition="natural", epsilon=epsilon,
        save_reports=True, nonprivate_baseline=False, out=str(out),
    )
    run_local(server_app, client_app, 1, config.to_mapping())
    assert main(["attack", str(out), "--kind", "attribute"]) == 0
    return json.loads((out / "attack_attribute.json").read_text())


def test_the_attack_beats_chance_on_nearly_clean_reports_and_not_at_small_epsilon(tmp_path: Path) -> None:
    clean, private = _attacked(tmp_path, 50.0), _attacked(tmp_path, 0.05)
    assert clean["reports"] == private["reports"] > 1000 and clean["chance"] == private["chance"] < 0.35
    assert clean["success"] > clean["chance"] + 0.1  # four writing styles, told apart from the reports
    assert private["success"] < private["chance"] + 0.05
    assert clean["epsilon_sentence_max"] == pytest.approx(50.0) and private["epsilon_sentence_max"] == pytest.approx(0.05)


@pytest.mark.parametrize(
    "options,problem",
    [
        ({"partition": "iid", "save_reports": True}, "--partition natural"),
        ({"partition": "natural", "save_reports": False}, "run ldpfed simulate with --save-reports"),
    ],
)
def test_runs_it_cannot_attack_are_refused_by_name(
    tmp_path: Path, options: dict, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    config = RunConfig(data="generated:600", public="generated:600", users=4, nodes=1, nonprivate_baseline=False, out=str(out), **options)
    run_local(server_app, client_app, 1, config.to_mapping())
    with pytest.raises(SystemExit) as exit_info:
        main(["attack", str(out)])
    assert exit_info.value.code == 2 and problem in capsys.readouterr().err
