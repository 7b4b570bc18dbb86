"""`ldpfed attack RUN --kind K`: every attack beats chance when reports are nearly clean (or on
TextHide), falls to chance as epsilon goes to 0, and refuses runs it cannot attack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.cli import main
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local

RECORDS = 300
"""Training and public records of every run. Encoding is most of what the file costs (about 650
sentences: 300 training, 60 dev, 288 public); the records are a prefix of generated:600's, which
later test files encode into the same session cache."""
ADDITIVE = "laplace"
"""The mechanism of the nearly clean and the very noisy runs. Laplace noise is pure epsilon-DP, so
those runs compute no amplified (PLD) bound; for Gaussian reports that bound is what a nearly
clean run costs (on 2 shared cores: 160 s at epsilon 1000; 13 s at epsilon 100, where inversion
beats chance by less than 0.1). The attacks on Gaussian reports have their own tests
(test_inversion_attack.py, test_membership_attack.py, ...); DP instance encoding here adds Gaussian noise."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small generated runs (4 writing styles, 12 users, 300 records, clip 1): nearly clean and very
    noisy Laplace reports projected to 64 dimensions (natural partition, reports saved); on MiniLM's
    384 dimensions, which reconstruction needs, TextHide (no epsilon; iid partition, reports saved)
    and DP instance encoding at a small epsilon (natural partition, no reports saved). The last two
    are also the runs the attribute attack must refuse."""
    folder = tmp_path_factory.mktemp("attack-runs")
    settings = {
        "clean": {"mechanism": ADDITIVE, "epsilon": 1000.0, "dim": 64},
        "private": {"mechanism": ADDITIVE, "epsilon": 0.05, "dim": 64},
        "texthide": {"mechanism": "texthide", "partition": "iid"},
        "dpie": {"mechanism": "dpie-gaussian", "epsilon": 0.05, "save_reports": False},
    }
    out = {}
    for name, options in settings.items():
        config = RunSpec.of(
            **{
                "data": f"generated:{RECORDS}", "public": f"generated:{RECORDS}", "users": 12, "nodes": 1,
                "partition": "natural", "save_reports": True, "dim": 0, "clip": 1.0, "nonprivate_baseline": False,
                "out": str(folder / name), **options,
            }
        )
        run_local(server_app, client_app, 1, config.to_mapping())
        out[name] = folder / name
    return out


def _attack(run: Path, kind: str, *extra: str) -> dict:
    assert main(["attack", str(run), "--kind", kind, *extra]) == 0
    return json.loads((run / f"attack_{kind}.json").read_text())


def test_the_attribute_attack_beats_chance_on_nearly_clean_reports_and_not_at_small_epsilon(runs: dict[str, Path]) -> None:
    clean, private = _attack(runs["clean"], "attribute"), _attack(runs["private"], "attribute")
    assert clean["reports"] == private["reports"] >= RECORDS - 5 and clean["chance"] == private["chance"] < 0.35
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
    "run,args,problem",
    [
        ("clean", ["--kind", "reconstruction"], "does not mix records"),
        ("texthide", ["--kind", "inversion"], "mixes records"),
        ("texthide", ["--kind", "mutual-information"], "additive-noise randomizers only"),
        ("texthide", ["--kind", "attribute"], "--partition natural"),  # the attribute attack on an iid partition
        ("dpie", ["--kind", "attribute"], "run ldpfed simulate with --save-reports"),  # ... on a run that saved none
    ],
    ids=["reconstruction-unmixed", "inversion-mixed", "mutual-information-texthide", "attribute-iid", "attribute-no-reports"],
)
def test_attacks_that_do_not_apply_are_refused_by_name(
    runs: dict[str, Path], run: str, args: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["attack", str(runs[run]), *args])
    assert exit_info.value.code == 2 and problem in capsys.readouterr().err
