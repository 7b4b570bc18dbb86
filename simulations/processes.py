"""Child processes stopped cleanly when the command is stopped (Ctrl-C, SIGTERM): asked first, killed after a grace.

A child asked with SIGTERM runs its own cleanup: an ``ldpfed simulate`` child stops its Flower processes with
:func:`stop_tree` (Flower's SuperExec starts a session of its own, and the simulation it starts keeps Ray in that
session's group: each group of the tree is stopped).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

STOP_GRACE = 30.0
"""Seconds a child asked to stop has for its cleanup before it is killed."""


def stop(process: subprocess.Popen, grace: float = STOP_GRACE) -> None:
    """SIGTERM to ``process`` (to its whole process group when it leads one), SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:
        return
    group = os.getpgid(process.pid) == process.pid
    send = (lambda signum: os.killpg(process.pid, signum)) if group else process.send_signal
    send(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait(timeout=5)


def run(command: Sequence[str], **popen: Any) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` without capture, except that an interrupted wait (KeyboardInterrupt, also what
    ``ldpfed`` makes of SIGTERM) stops the child with :func:`stop` (subprocess.run kills it at once, which leaves
    what the child started running)."""
    process = subprocess.Popen(command, **popen)
    try:
        return subprocess.CompletedProcess(command, process.wait())
    except BaseException:
        stop(process)
        raise


def tree_groups(pids: Sequence[int]) -> list[int]:
    """The process groups of ``pids`` and of all their descendants, this process's own group excepted."""
    rows = _processes()
    tree, grown = set(pids), True
    while grown:
        found = {pid for pid, parent, _, _ in rows if parent in tree} - tree
        tree |= found
        grown = bool(found)
    return sorted({group for pid, _, group, _ in rows if pid in tree} - {os.getpgrp()})


def stop_tree(processes: Sequence[subprocess.Popen], grace: float) -> None:
    """SIGTERM to every process group of ``processes``' trees (:func:`tree_groups`), SIGKILL to the groups still
    running after ``grace`` seconds; reaps ``processes``."""
    groups = tree_groups([process.pid for process in processes if process.poll() is None])
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (_running(groups) or any(p.poll() is None for p in processes)):
        time.sleep(0.2)
    _signal_groups(_running(groups), signal.SIGKILL)
    for process in processes:
        process.wait(timeout=5)


def _processes() -> list[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state) of every process: from /proc where there is one (a slim container
    has no ``ps``), else from ``ps``."""
    if not os.path.isdir("/proc/self"):
        table = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid=,stat="], capture_output=True, text=True, check=True)
        lines = map(str.split, table.stdout.splitlines())
        return [(int(pid), int(ppid), int(group), state) for pid, ppid, group, state in lines]
    rows = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as handle:
                state, ppid, group = handle.read().rsplit(") ", 1)[1].split()[:3]  # after "pid (command) "
        except (OSError, ValueError):  # not a process, or one that just ended
            continue
        rows.append((int(name), int(ppid), int(group), state))
    return rows


def _running(groups: Sequence[int]) -> list[int]:
    """Those of ``groups`` with a process still running (an exited one not yet reaped, a zombie, is not)."""
    return sorted({group for _, _, group, state in _processes() if group in groups and not state.startswith("Z")})


def _signal_groups(groups: Sequence[int], signum: int) -> None:
    for group in groups:
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass
