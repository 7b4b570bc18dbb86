"""Issue 28 item 1: every script in simulations/examples runs, as a user runs it (``__main__``, from a
fresh working folder), and what it gets back is what its run directories hold: a Run returned by
``ldpfed.simulate`` has the ledgers, users, summary and metrics of its files; a Study finished every run."""

from __future__ import annotations

import csv
import json
import runpy
from pathlib import Path

import pytest

import ldpfed

EXAMPLES = Path(__file__).resolve().parents[1] / "simulations" / "examples"


def _check_run(run: ldpfed.Run) -> None:
    assert run == ldpfed.Run.load(run.path)  # config, summary, metrics: as the files hold them
    ledgers = json.loads((run.path / "ledgers.json").read_text())["users"]
    assert run.ledgers == {int(user): ledger for user, ledger in ledgers.items()}
    assert len(run.ledgers) == run.config.data.users == len(run.users) == run.summary["users"]
    with open(run.path / "users.csv", newline="") as handle:
        spent = [float(row["epsilon_sentence"]) for row in csv.DictReader(handle)]
    assert [row["epsilon_sentence"] for row in run.users] == pytest.approx(spent)
    assert max(spent) == pytest.approx(run.summary["epsilon_sentence_max"], rel=1e-5)
    assert len(run.metrics) == run.config.schedule.rounds == run.summary["rounds"]


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda path: path.stem)
def test_the_example_runs(script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip()  # it shows its figures
    for value in namespace.values():
        if isinstance(value, ldpfed.Run):
            _check_run(value)
        if isinstance(value, ldpfed.Study):
            assert value.failures == () and value.report is not None and value.report.is_file()
            assert {entry.state for entry in value.runs} == {"complete"}


def test_there_are_examples_and_each_says_how_to_run_it() -> None:
    scripts = sorted(EXAMPLES.glob("*.py"))
    assert len(scripts) >= 3
    for script in scripts:
        assert f"python simulations/examples/{script.name}" in script.read_text(), script.name
