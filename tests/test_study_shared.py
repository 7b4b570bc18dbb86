"""ldpfed study's shared runner (simulations/study_worker.py): one worker process runs a study's runs, each with the
results of the run alone; a run that raises, or whose worker dies, fails alone, and a rerun resumes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from ldpfed.simulations.benchmarks.run_hashes import run_directory_hash, summary_hash
from ldpfed.simulations.study import MARKER, execute, load_study, run_state, run_study, shares_worker
from ldpfed.simulations.study_worker import SharedRunner

STUDY = """
seeds = [0]

[base]
users = 2
rounds = 1

[axes.case.a]
data = "generated:120"
epsilon = 1.0

[axes.case.b]
data = "generated:120"
epsilon = 8.0
mechanism = "laplace"

[axes.case.broken]
data = "./no-such-folder"

[axes.case.c]
data = "generated:120"
epsilon = 4.0
mechanism = "sue"
"""


class KillingRunner(SharedRunner):
    """A SharedRunner that kills its worker (SIGKILL, as a crash or the OOM killer would) once run ``victim`` started."""

    victim = "case=c__seed=0"
    killed = 0

    def run(self, options, out, log, env):  # type: ignore[no-untyped-def]
        if out.name == self.victim and not KillingRunner.killed:
            process = self._worker(dict(env))
            threading.Thread(target=self._kill_when_started, args=(process, log), daemon=True).start()
        return super().run(options, out, log, env)

    @staticmethod
    def _kill_when_started(process, log: Path) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "ldpfed: run directory" not in log.read_text(errors="replace"):
            time.sleep(0.01)
        process.kill()
        KillingRunner.killed += 1


def test_a_shared_study_gives_each_run_its_results_alone_and_a_failure_stops_no_other_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "study.toml"
    config.write_text(STUDY)
    study = load_study(config)
    assert shares_worker(study) and not shares_worker(study, "alone")
    runs = {run.name: run for run in study.runs()}
    out = tmp_path / "out"
    monkeypatch.setattr("ldpfed.simulations.study.SharedRunner", KillingRunner)
    done: list[tuple[str, str]] = []
    failures = run_study(study, out, lambda run: None, lambda run, result: done.append((run.name, result)))
    assert [name for name, result in done if result == "FAILED"] == ["case=broken__seed=0", "case=c__seed=0"]
    assert KillingRunner.killed == 1
    assert "run case=broken__seed=0 failed: " in failures[0] and "no-such-folder" in failures[0]
    assert "run case=c__seed=0 failed: the shared worker died (exit -9)" in failures[1]
    assert "Traceback" in (out / "case=broken__seed=0" / "simulate.log").read_text()  # the run's log has the error
    states = {name: run_state(out / name, run) for name, run in runs.items()}
    assert states == {"case=a__seed=0": "complete", "case=b__seed=0": "complete",
                      "case=broken__seed=0": "incomplete", "case=c__seed=0": "incomplete"}

    done.clear()  # a rerun skips the complete runs; c runs in the new worker after the broken run raised there
    failures = run_study(study, out, lambda run: None, lambda run, result: done.append((run.name, result)))
    assert [result.split(" ")[0] for _, result in done] == ["done", "done", "FAILED", "accuracy"] and len(failures) == 1
    marker = json.loads((out / "case=c__seed=0" / MARKER).read_text())
    assert marker["options"] == runs["case=c__seed=0"].options and marker["seconds"] > 0
    for name in ("summary.json", "ledgers.json", "metrics.jsonl", "users.csv", "config.json"):
        assert (out / "case=c__seed=0" / name).is_file()

    # Each run alone: b (the second run of its worker) as `ldpfed simulate` (Flower + Ray), a and c in a fresh worker.
    alone = tmp_path / "alone"
    execute(runs["case=b__seed=0"], alone / "b")
    with SharedRunner() as fresh:
        for name, folder in (("case=a__seed=0", "a"), ("case=c__seed=0", "c")):
            execute(runs[name], alone / folder, fresh)
            fresh.close()
    for name, folder in (("case=a__seed=0", "a"), ("case=b__seed=0", "b"), ("case=c__seed=0", "c")):
        assert run_directory_hash(out / name) == run_directory_hash(alone / folder), name
        assert summary_hash(out / name) == summary_hash(alone / folder), name


def test_an_unknown_runner_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "study.toml"
    config.write_text(STUDY)
    with pytest.raises(ValueError, match="runner 'fast': expected one of auto, shared, alone"):
        shares_worker(load_study(config), "fast")
