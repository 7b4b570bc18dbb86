"""Run the ldpfed Flower app on a private SuperLink: a Ray simulation or real SuperNodes.

Everything is isolated in a work folder: its own FLWR_HOME (connection config and
installed app bundles), free ports, and processes started in their own session and
stopped by pid, so nothing outlives the run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
APP_DIR = Path(__file__).resolve().parents[1]
CONNECTION = "ldpfed"


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_env(flwr_home: Path) -> dict[str, str]:
    """Environment for Flower's processes: isolated home, no dependency install, no telemetry."""
    env = os.environ.copy()
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        HF_HUB_OFFLINE=env.get("HF_HUB_OFFLINE", "1"),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def run_config_string(values: Mapping[str, Any]) -> str:
    """``key=value`` pairs as `flwr run --run-config` reads them (strings quoted)."""
    parts = []
    for key, value in values.items():
        if isinstance(value, bool):
            parts.append(f"{key}={str(value).lower()}")
        elif isinstance(value, str):
            if "'" in value or " " in value:
                raise ValueError(f"run option {key}={value!r} may not contain quotes or spaces")
            parts.append(f"{key}='{value}'")
        else:
            parts.append(f"{key}={value!r}")
    return " ".join(parts)


@dataclass
class Cluster:
    """A running SuperLink (and SuperNodes, in deployment mode)."""

    env: dict[str, str]
    logs: Path
    processes: list[subprocess.Popen]


@contextmanager
def cluster(workdir: Path, simulation: bool, node_configs: list[str] | None = None) -> Iterator[Cluster]:
    """Start a SuperLink (with the Ray simulation runtime, or with one SuperNode per node config)."""
    flwr_home, logs = workdir / "flwr_home", workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    flwr_home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (flwr_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = flower_env(flwr_home)
    processes: list[subprocess.Popen] = []

    def spawn(name: str, command: list[str]) -> None:
        log = open(logs / f"{name}.log", "wb")
        processes.append(
            subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )

    try:
        spawn("superlink", [str(BIN / "flower-superlink"), "--insecure", "--port", str(port)] + (["--simulation"] if simulation else []))
        _wait_healthy(port, timeout=90)
        for i, node_config in enumerate(node_configs or []):
            spawn(
                f"supernode{i}",
                [
                    str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                    "--port", str(free_port()), "--node-config", node_config,
                ],
            )
        yield Cluster(env, logs, processes)
    finally:
        _stop(processes)


def start_run(cluster: Cluster, run_config: Mapping[str, Any], federation_config: str | None, log: Path) -> subprocess.Popen:
    """`flwr run <app> --stream` in the background, its output going to ``log``."""
    command = [str(BIN / "flwr"), "run", str(APP_DIR), CONNECTION, "--stream", "--run-config", run_config_string(run_config)]
    if federation_config:
        command += ["--federation-config", federation_config]
    return subprocess.Popen(command, env=cluster.env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def run_status(cluster: Cluster, log: Path) -> str:
    """Final status of the run started in ``log`` (e.g. 'finished:completed'); `--stream` exits 0 even on failure."""
    text = log.read_text(errors="replace")
    run_ids = [line.split()[-1] for line in text.splitlines() if "Successfully started run" in line]
    if not run_ids:
        return "not started"
    out = subprocess.run(
        [str(BIN / "flwr"), "ls", CONNECTION, "--run-id", run_ids[-1], "--format", "json"],
        env=cluster.env, capture_output=True, text=True, timeout=120,
    )
    try:
        return str(json.loads(out.stdout)["runs"][0]["status"])
    except (ValueError, KeyError, IndexError):
        return f"unknown ({out.stdout.strip()[:200]} {out.stderr.strip()[:200]})"


def _wait_healthy(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"the SuperLink on port {port} did not become healthy within {timeout}s")


def _stop(processes: list[subprocess.Popen], timeout: float = 15.0) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in reversed(processes):
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
