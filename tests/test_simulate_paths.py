"""Issue 42 item 1: every path option of ``ldpfed simulate`` and ``ldpfed.simulate`` is relative to where the user
runs it, and a run that fails inside Flower reaches the terminal as one line naming why and where its log is.

Only ``out`` and existing trace files used to be made absolute; a relative ``--data`` passed validation and the
encoding (which run here) and failed inside Flower, whose processes run in a folder of their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from ldpfed._simulate import absolute_paths, flower_failure, resolve
from ldpfed.simulations.cli import main
from tests.conftest import write_review_folder


def test_every_path_option_is_made_absolute_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, data = tmp_path / "here", tmp_path / "task"
    here.mkdir()
    data.mkdir()
    write_review_folder(data, {"train": 12, "dev": 4}, "r", seed=0)
    (data / "other.tsv").write_text((data / "dev.tsv").read_text())
    (tmp_path / "public").mkdir()
    (tmp_path / "model").mkdir()
    (here / "trace.json").write_text("{}")
    monkeypatch.chdir(here)
    spec = resolve(None, {"data": "../task", "public": "../public", "out": "run", "cache_dir": "cache", "users": 2})
    assert (spec.data.data, spec.data.public) == (str(data), str(tmp_path / "public"))
    assert (spec.output.out, spec.output.cache_dir) == (str(here / "run"), str(here / "cache"))
    paths = absolute_paths({
        "data": "../task:train=train,dev=../task/other.tsv,test=../task/other.csv",  # a named split's file too
        "public": "generated:60", "encoder": "bilstm:../model", "behavior_trace": "trace.json", "device_speed": "lognormal:1:1:1",
    })
    assert paths["data"] == f"{data}:train=train,dev={data / 'other.tsv'},test={data / 'other.csv'}"
    assert (paths["public"], paths["device_speed"]) == ("generated:60", "lognormal:1:1:1")  # not paths
    assert (paths["encoder"], paths["behavior_trace"]) == (f"bilstm:{tmp_path / 'model'}", str(here / "trace.json"))
    assert absolute_paths({"encoder": "tokens:8:../model"})["encoder"] == f"tokens:8:{tmp_path / 'model'}"
    for kept in ({"encoder": "minilm"}, {"encoder": "sentence-transformers/all-MiniLM-L6-v2"}, {"data": "glue:sst2"},
                 {"public": "none"}, {"data": "generated:200:3"}):
        assert absolute_paths(kept) == kept  # names, not paths
    assert absolute_paths({"data": "../missing"})["data"] == str(tmp_path / "missing")  # written as a path: its error names it


LOG = """Using SuperLink: ldpfed (127.0.0.1:45165)
Successfully started run 12610758932593549675
\x1b[92mINFO \x1b[0m:      Starting Flower Simulation
ldpfed: run directory /tmp/run1
\x1b[91mERROR \x1b[0m:     Simulation raised an exception
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/flwr/simulation/app.py", line 337, in run_simulation_process
    simulation_result = _run_simulation(
RuntimeError: 0 of 1 connected nodes (expected 1) answered the setup, fewer than --min-nodes 1: query.setup: node 153 refused (malformed): dataset folder ../a/data does not exist
\x1b[91mERROR \x1b[0m:     Exit Code: 700

An unhandled exception occurred when running the simulation.
"""


def test_the_reason_is_read_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "flower.log"
    log.write_text(LOG)
    assert flower_failure(log) == (
        "RuntimeError: 0 of 1 connected nodes (expected 1) answered the setup, fewer than --min-nodes 1: query.setup: "
        "node 153 refused (malformed): dataset folder ../a/data does not exist"
    )
    log.write_text("Using SuperLink\nERROR: something\n")
    assert flower_failure(log) is None and flower_failure(tmp_path / "missing.log") is None


def test_a_run_that_fails_inside_flower_prints_one_line_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The data folder disappears after the encoding (which ran here), so the nodes refuse the setup inside Flower."""
    import ldpfed._simulate as simulate

    (tmp_path / "task").mkdir()
    data = write_review_folder(tmp_path / "task", {"train": 8, "dev": 4}, "r", seed=0)
    encode = simulate._warm_cache

    def encode_then_remove(config, progress, plugins=None):  # type: ignore[no-untyped-def]
        warnings = encode(config, progress, plugins)
        shutil.rmtree(data)
        return warnings

    monkeypatch.setattr(simulate, "_warm_cache", encode_then_remove)
    out = tmp_path / "run"
    status = main(["simulate", "--data", str(data), "--public", "none", "--users", "2", "--nodes", "1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1
    assert len(err) == 1, err
    assert err[0].startswith("ldpfed simulate: error: the Flower run failed: RuntimeError: ")
    assert f"refused (malformed): dataset folder {data} does not exist (its log: {out / 'flower.log'})" in err[0], err


def test_each_warning_prints_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 9f: ldpfed simulate printed its warnings before the run and again after the summary. Flower is
    stood in for: the run's summary repeats the warning shown before it and adds one of its own."""
    import contextlib
    import subprocess
    import sys

    import ldpfed._simulate as simulate
    import ldpfed.simulations.flower_runner as runner

    out = tmp_path / "run"
    before, during = "the public data is of another domain", "a warning only the run found"

    def start_run(running, config, federation, log):  # type: ignore[no-untyped-def]
        log.write_text("")
        (out / "summary.json").write_text(json.dumps({"warnings": [before, during], "errors": []}))
        return subprocess.Popen([sys.executable, "-c", ""])

    monkeypatch.setattr(simulate, "_warm_cache", lambda config, progress, plugins=None: [before])
    monkeypatch.setattr(runner, "cluster", lambda *args, **kwargs: contextlib.nullcontext(None))
    monkeypatch.setattr(runner, "start_run", start_run)
    monkeypatch.setattr(runner, "run_status", lambda running, log: "finished:completed")
    monkeypatch.setattr(simulate.Run, "load", classmethod(lambda cls, path, seconds=0.0: SimpleNamespace(
        summary=json.loads((path / "summary.json").read_text()), path=path, seconds=seconds)))
    assert main(["simulate", "--data", "generated:20", "--users", "2", "--out", str(out), "--quiet"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert err.count(before) == 1 and err.count(during) == 1, err
