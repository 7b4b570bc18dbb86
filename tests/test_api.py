"""Issue 28 item 1: the Python API. ``ldpfed.simulate`` refuses what ``ldpfed simulate`` refuses, with
the same text, before anything runs; a Run reads back its run directory; study, audit, attack and
privacy return their objects, with the figures the command line prints. (A real simulate() run is
checked against its run directory in tests/test_examples.py, which runs simulations/examples/.)"""

from __future__ import annotations

import csv
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import ldpfed
from ldpfed.clients.app import app as client_app
from ldpfed.simulations.cli import main
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "flags,options",
    [
        (["--epsilon", "nan"], {"epsilon": math.nan}),
        (["--sigma", "inf"], {"sigma": math.inf}),
        (["--users", "0"], {"users": 0}),
        (["--mechanism", "no-such-randomizer"], {"mechanism": "no-such-randomizer"}),
        (["--cpus-per-client", "0"], {"cpus_per_client": 0}),
    ],
    ids=["epsilon-nan", "sigma-inf", "no-users", "unknown-mechanism", "no-cpus"],
)
def test_bad_options_raise_the_command_lines_error_and_nothing_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], options: dict
) -> None:
    out = tmp_path / "run"
    base = ["simulate", "--data", "generated:200", "--users", "4", "--out", str(out), "--quiet"]
    cli = _cli_error(capsys, *base, *flags)
    with pytest.raises(ValueError) as error:
        ldpfed.simulate(**{"data": "generated:200", "users": 4, "out": str(out), **options}, progress=False)
    assert cli == f"ldpfed simulate: error: {error.value}"
    assert not (out / "flower.log").exists() and not (out / "ledgers.json").exists()  # Flower never started


def test_a_script_without_a_main_guard_runs_and_the_encoding_steps_error_comes_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a notebook cell would: no ``if __name__ == "__main__"``. The encoding step runs in a child
    interpreter that never imports the caller again (multiprocessing's spawn did, and failed), and the
    child's refusal (a dimension above the encoder's) is the command line's."""
    out = tmp_path / "run"
    script = tmp_path / "cell.py"
    script.write_text(
        "import ldpfed\n"
        "try:\n"
        f"    ldpfed.simulate(data='generated:200', users=4, dim=1000, out={str(out)!r}, progress=False)\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("refused: ")]
    assert "--dim 1000 exceeds the encoder's 384 dimensions" in line
    cli = _cli_error(capsys, "simulate", "--data", "generated:200", "--users", "4", "--dim", "1000", "--out", str(out), "--quiet")
    assert cli == "ldpfed simulate: error: " + line.removeprefix("refused: ")
    assert not (out / "flower.log").exists()


def test_an_unknown_option_is_named_and_a_spec_takes_changes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown run option 'epsilons'"):
        ldpfed.simulate(epsilons=3, progress=False)
    spec = ldpfed.RunSpec.of(data="generated:200", users=4)
    with pytest.raises(ValueError, match="--epsilon must be a finite non-negative number"):
        ldpfed.simulate(spec, epsilon=math.inf, out=str(tmp_path / "run"), progress=False)
    assert not (tmp_path / "run" / "flower.log").exists()


def test_a_randomizer_object_is_no_way_around_the_nodes_calibration_and_ledgers(tmp_path: Path) -> None:
    """A run names its mechanism; the nodes build, calibrate and charge it. An object is refused."""
    from ldpfed.fed.randomizers import RANDOMIZERS

    with pytest.raises(ValueError, match="mechanism"):
        ldpfed.simulate(data="generated:200", mechanism=RANDOMIZERS["gaussian"], out=str(tmp_path / "run"), progress=False)
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small run written by the same ServerApp and ClientApp in one process (tests.local_grid)."""
    out = tmp_path_factory.mktemp("api") / "run"
    config = ldpfed.RunSpec.of(data="generated:200", users=4, epsilon=3.0, out=str(out), nonprivate_baseline=False)
    run_local(server_app, client_app, 1, config.to_mapping())
    return out


def test_a_runs_mappings_are_read_only_and_equal_to_its_files(tmp_path: Path) -> None:
    """Issue 42 item 9h: run.summary (and the rest) could be changed, though the objects are frozen."""
    (tmp_path / "config.json").write_text(json.dumps(ldpfed.RunSpec.of(users=2).to_mapping()))
    summary = {"accuracy_local": 0.5, "errors": [], "groups": {"all": [{"users": 2}]}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"round": 1, "sizes": [1, 2]}) + "\n")
    (tmp_path / "ledgers.json").write_text(json.dumps({"users": {"0": {"budget": 3.0, "steps": [{"kind": "train"}]}}}))
    (tmp_path / "users.csv").write_text("user,epsilon_sentence\n0,1.5\n")
    run = ldpfed.Run.load(tmp_path)
    assert run.summary == summary and run == ldpfed.Run.load(tmp_path) and run.metrics == ({"round": 1, "sizes": [1, 2]},)
    assert run.ledgers == {0: {"budget": 3.0, "steps": [{"kind": "train"}]}} and run.users == ({"user": 0, "epsilon_sentence": 1.5},)
    changes = [
        lambda: run.summary.__setitem__("accuracy_local", 1.0), lambda: run.summary["errors"].append("x"),
        lambda: run.summary["groups"]["all"][0].update(users=3), lambda: run.metrics[0]["sizes"].append(3),
        lambda: run.ledgers[0]["steps"][0].pop("kind"), lambda: run.ledgers.clear(), lambda: run.users[0].clear(),
    ]
    for change in changes:
        with pytest.raises((TypeError, AttributeError)):
            change()
    assert json.loads(json.dumps(run.summary)) == summary and pickle.loads(pickle.dumps(run)) == run


def test_a_run_reads_back_its_directory(run_dir: Path) -> None:
    run = ldpfed.Run.load(run_dir)
    assert run.config == ldpfed.RunSpec.from_mapping(json.loads((run_dir / "config.json").read_text()))
    assert run.summary == json.loads((run_dir / "summary.json").read_text())
    assert [m["round"] for m in run.metrics] == [1]
    ledgers = json.loads((run_dir / "ledgers.json").read_text())["users"]
    assert run.ledgers == {int(user): ledger for user, ledger in ledgers.items()} and sorted(run.ledgers) == [0, 1, 2, 3]
    with open(run_dir / "users.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["user"] for r in run.users] == [int(r["user"]) for r in rows]
    assert max(r["epsilon_sentence"] for r in run.users) == pytest.approx(run.summary["epsilon_sentence_max"], rel=1e-5)
    assert run.files["ledgers.json"] == run_dir / "ledgers.json"
    with pytest.raises(ValueError, match="not a finished run directory"):
        ldpfed.Run.load(run_dir.parent)


def test_attack_returns_what_it_writes_and_the_command_prints(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = ldpfed.attack(ldpfed.Run.load(run_dir), "mutual-information", seed=1)
    written = json.loads(result.path.read_text())
    assert written == {"kind": result.kind, "measure": result.measure, "success": result.success, "chance": result.chance,
                       **result.details, "mechanism": result.mechanism, "epsilon_sentence_max": result.epsilon_sentence_max}
    assert main(["attack", str(run_dir), "--kind", "mutual-information", "--seed", "1"]) == 0
    assert f"{result.measure} {result.success:.3f}; chance {result.chance:.3f}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="has no reports.npz"):
        ldpfed.attack(run_dir, "attribute")


def test_an_attack_without_a_kind_applies_to_a_default_run(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 9d: the default kind was attribute, which needs --partition natural and --save-reports."""
    assert main(["attack", str(run_dir)]) == 0
    assert capsys.readouterr().out.startswith("inversion attack (gaussian")


def test_audit_returns_the_row_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    result = ldpfed.audit("gaussian", 3.0, samples=2000, seed=4, progress=False)
    assert isinstance(result, ldpfed.AuditResult) and result.verdict == "pass" and result.dim == 384
    assert main(["audit", "--mechanism", "gaussian", "--epsilon", "3", "--samples", "2000", "--seed", "4", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert {**row, "seconds": None} == {**result.to_json(), "seconds": None}
    with pytest.raises(ValueError, match="unknown mechanism option 'lamda'"):
        ldpfed.audit("ome", 1.0, options={"lamda": 2})


def test_privacy_returns_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    result = ldpfed.privacy(noise_multiplier=1.0, p=0.01, steps=10)
    assert result.schedule is not None and result.figures and result.calibrations == ()
    assert main(["privacy", "--noise-multiplier", "1.0", "--p", "0.01", "--steps", "10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(result.to_json()))
    with pytest.raises(ValueError, match="not both"):
        ldpfed.privacy(noise_multiplier=1.0, sigma=2.0, sensitivity=2.0, p=0.01, steps=10)


def test_study_validates_first_and_a_dry_run_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "grid.toml"
    config.write_text('seeds = [0, 1]\n[base]\ndata = "generated:200"\nusers = 4\n[axes]\nepsilon = [1.0, 8.0]\n')
    result = ldpfed.study(config, out=tmp_path / "runs", dry_run=True, progress=False)
    assert isinstance(result, ldpfed.Study) and result.report is None and result.failures == ()
    assert [(e.cell, e.seed, e.state) for e in result.runs] == [
        ({"epsilon": 1.0}, 0, "missing"), ({"epsilon": 1.0}, 1, "missing"), ({"epsilon": 8.0}, 0, "missing"), ({"epsilon": 8.0}, 1, "missing")
    ]
    assert capsys.readouterr().out == "" and not (tmp_path / "runs").exists()
    config.write_text('[base]\ndata = "generated:200"\nepsilon = -1.0\n')
    with pytest.raises(ValueError) as error:
        ldpfed.study(config, progress=False)
    assert _cli_error(capsys, "study", str(config)) == f"ldpfed study: error: {error.value}"
