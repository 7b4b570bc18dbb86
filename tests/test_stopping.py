"""Issue 42 item 9, i and j: a command stopped by Ctrl-C (SIGINT) or SIGTERM stops its children and exits 128 + the
signal's number with one line, no traceback.

Ctrl-C printed a traceback; SIGTERM ended ``ldpfed study`` at once, leaving its run's ``ldpfed simulate`` (and that
one's flower-superlink and superexec) running. A study here runs a stand-in for ``ldpfed simulate`` (a sleeping
Python child that notes the signal it gets), so stopping it costs two Python start-ups; the Flower processes' part
(every process group they started is stopped) on a stand-in SuperLink whose child leads a session of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ldpfed.simulations.flower_runner import _stop

STUDY = """title = "stopped"
seeds = [0]
[base]
users = 300
[axes]
epsilon = [1]
"""
"""One run; more than 200 users, so the study runs it in an ``ldpfed simulate`` process of its own."""

STAND_IN = """
import signal, sys, time
from pathlib import Path

folder = Path(sys.argv[1])

def stopped(signum, frame):
    (folder / "stopped").write_text(str(signum))
    sys.exit(0)

signal.signal(signal.SIGTERM, stopped)
(folder / "ready").write_text("")
time.sleep(120)
"""

STUDY_WITH_STAND_IN = """
import sys
import ldpfed.simulations.study as study
from ldpfed.simulations.cli import main

config, out, notes, stand_in = sys.argv[1:]
study.simulate_command = lambda options, directory: [sys.executable, "-c", stand_in, notes]
sys.exit(main(["study", config, "--out", out]))
"""


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_study_stops_its_run_and_says_so_in_one_line(tmp_path: Path, signum: int) -> None:
    (tmp_path / "study.toml").write_text(STUDY)
    notes = tmp_path / "notes"
    notes.mkdir()
    study = subprocess.Popen(
        [sys.executable, "-c", STUDY_WITH_STAND_IN, str(tmp_path / "study.toml"), str(tmp_path / "runs"), str(notes),
         STAND_IN],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(notes / "ready")
        study.send_signal(signum)  # to the study alone, as kill (or a job scheduler) sends it
        _, err = study.communicate(timeout=60)
    finally:
        study.kill()
    assert study.returncode == 128 + signum, err
    assert err.strip().splitlines() == [f"ldpfed study: stopped ({signal.Signals(signum).name})"], err
    assert (notes / "stopped").read_text() == str(int(signal.SIGTERM))  # the run was asked to stop, and did


LEADER = """
import subprocess, sys, time
shell = subprocess.Popen(["sh", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE, text=True, start_new_session=True)
print(shell.pid, shell.stdout.readline().strip(), flush=True)
time.sleep(120)
"""
"""A stand-in SuperLink: its child (the SuperExec) leads a session of its own, where that one's child runs (the
simulation, Ray); it prints both pids on one line (two writers on one pipe interleaved: '12351234', then '')."""


def test_stopping_the_flower_processes_ends_every_process_group_they_started() -> None:
    """SIGTERM to the SuperLink alone (or to its group) left the SuperExec's session running: the simulation, Ray."""
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert leader.stdout is not None
    started = [int(pid) for pid in leader.stdout.readline().split()]
    assert len(started) == 2, started
    _stop([leader], timeout=10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started):
        assert time.monotonic() < deadline, f"{[pid for pid in started if _alive(pid)]} outlived the stopped processes"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[-1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False
