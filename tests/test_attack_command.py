"""`ldpfed attack RUN --kind K`: every attack beats chance when reports are nearly clean (or on
TextHide), falls to chance as epsilon goes to 0, and refuses runs it cannot attack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clients.app import app as client_app
from fed.config import RunConfig
from simulations.cli import main
from strategies.app import app as server_app
from tests.local_grid import run_local


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small generated runs (4 writing styles, natural partition, reports saved, MiniLM's 384 dims):
    nearly clean, very noisy, TextHide (no epsilon) and DP instance encoding at a small epsilon."""
    folder = tmp_path_factory.mktemp("attack-runs")
    settings = {
        "clean": {"epsilon": 1000.0},
        "private": {"epsilon": 0.05},
        "texthide": {"mechanism": "texthide"},
        "dpie": {"mechanism": "dpie-gaussian", "epsilon": 0.05},
    }
    out = {}
    for name, options in settings.items():
        config = RunConfig(
            data="generated:600", public="generated:600", users=12, nodes=1, partition="natural", save_reports=True,
            dim=0, clip=1.0, nonprivate_baseline=False, out=str(folder / name), **options,
        )
        run_local(server_app, client_app, 1, config.to_mapping())
        out[name] = folder / name
    return out


def _attack(run: Path, kind: str, *extra: str) -> dict:
    assert main(["attack", str(run), "--kind", kind, *extra]) == 0
    return json.loads((run / f"attack_{kind}.json").read_text())


def test_the_attribute_attack_beats_chance_on_nearly_clean_reports_and_not_at_small_epsilon(runs: dict[str, Path]) -> None:
    clean, private = _attack(runs["clean"], "attribute"), _attack(runs["private"], "attribute")
    assert clean["reports"] == private["reports"] >= 500 and clean["chance"] == private["chance"] < 0.35
    assert clean["success"] > clean["chance"] + 0.1  # four writing styles, told apart from the reports
    assert private["success"] < private["chance"] + 0.05
    assert clean["epsilon_sentence_max"] == pytest.approx(1000.0) and private["epsilon_sentence_max"] == pytest.approx(0.05)


def test_inversion_names_words_from_nearly_clean_reports_only(runs: dict[str, Path]) -> None:
    clean, private = _attack(runs["clean"], "inversion"), _attack(runs["private"], "inversion")
    assert clean["success"] > clean["chance"] + 0.05
    assert private["success"] < private["chance"] + 0.02


def test_membership_leaks_from_a_nearly_clean_classifier_only(runs: dict[str, Path]) -> None:
    clean, private = _attack(runs["clean"], "membership"), _attack(runs["private"], "membership")
    assert clean["chance"] == 0.5 and clean["success"] > 0.56
    assert abs(private["success"] - 0.5) < 0.06  # (0.05, 1e-5)-DP reports: no test beats 0.5 by much


def test_texthide_reports_give_their_records_away_and_dp_instance_encoding_does_not(runs: dict[str, Path]) -> None:
    texthide, dpie = _attack(runs["texthide"], "reconstruction"), _attack(runs["dpie"], "reconstruction")
    assert float(texthide["epsilon_sentence_max"]) == float("inf")  # TextHide states no epsilon at all
    assert texthide["success"] > 10 * texthide["chance"]
    assert dpie["success"] < dpie["chance"] + 0.03


def test_mutual_information_falls_with_epsilon_and_the_privacy_report_takes_the_outcome(runs: dict[str, Path]) -> None:
    clean, private = _attack(runs["clean"], "mutual-information", "--report"), _attack(runs["private"], "mutual-information")
    assert clean["success"] > 1.0 > 0.2 > private["success"]
    _attack(runs["clean"], "mutual-information", "--report")  # asked twice: one section, replaced
    report = (runs["clean"] / "privacy_report.md").read_text()
    assert report.count("## Attack: mutual-information") == 1 and f"**{clean['success']:.3f}**" in report


@pytest.mark.parametrize(
    "run,kind,problem",
    [
        ("clean", "reconstruction", "does not mix records"),
        ("texthide", "inversion", "mixes records"),
        ("texthide", "mutual-information", "additive-noise randomizers only"),
    ],
)
def test_attacks_that_do_not_apply_are_refused_by_name(
    runs: dict[str, Path], run: str, kind: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["attack", str(runs[run]), "--kind", kind])
    assert exit_info.value.code == 2 and problem in capsys.readouterr().err


@pytest.mark.parametrize(
    "options,problem",
    [
        ({"partition": "iid", "save_reports": True}, "--partition natural"),
        ({"partition": "natural", "save_reports": False}, "run ldpfed simulate with --save-reports"),
    ],
)
def test_runs_the_attribute_attack_cannot_attack_are_refused_by_name(
    tmp_path: Path, options: dict, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    config = RunConfig(data="generated:600", public="generated:600", users=4, nodes=1, nonprivate_baseline=False, out=str(out), **options)
    run_local(server_app, client_app, 1, config.to_mapping())
    with pytest.raises(SystemExit) as exit_info:
        main(["attack", str(out)])
    assert exit_info.value.code == 2 and problem in capsys.readouterr().err
