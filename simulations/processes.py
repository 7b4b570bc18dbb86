"""Child processes stopped cleanly when the command is stopped (Ctrl-C, SIGTERM): asked first, killed after a grace.

A child asked with SIGTERM runs its own cleanup: an ``ldpfed simulate`` child stops its Flower processes (whose
process groups :func:`stop` ends whole).
"""

from __future__ import annotations

import os
import signal
import subprocess
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
