"""`ldpfed simulate` on an existing Ray cluster (docs/scale.md, "Past one machine: a Ray cluster").

A head and one worker node are started on this machine with `ray start --block`, each with one
CPU, in a temporary folder of their own (so neither touches /tmp/ray, where `ray.init()` looks
for a cluster to join), on free ports, and are stopped by pid (never `ray stop`, which stops
every Ray on the machine). With one CPU per Ray node and one per ClientApp, Flower's actor pool
holds exactly one actor per node, so placement cannot put every user on one node.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.cli import main
from ldpfed.simulations.flower_runner import free_port

RAY = Path(sys.executable).parent / "ray"
WORKER_RESOURCE = "ldpfed_worker"
PROBE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="error", log_to_driver=False)
print(json.dumps({n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}))
"""


@dataclass(frozen=True)
class RayCluster:
    """A running two-node Ray cluster: the head's address and the environment its nodes run in."""

    address: str
    env: dict[str, str]

    def nodes(self) -> tuple[str, str]:
        """Node ids (head, worker), from ray.nodes() in a driver of its own (this process never joins)."""
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, self.address], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert probe.returncode == 0, probe.stderr[-3000:]
        nodes = json.loads(probe.stdout.strip().splitlines()[-1])
        assert len(nodes) == 2 and all(r.get("CPU") == 1.0 for r in nodes.values()), nodes
        worker = next(n for n, r in nodes.items() if WORKER_RESOURCE in r)
        return next(n for n in nodes if n != worker), worker


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the test process dies, so no Ray node outlives it."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _ray_start(name: str, root: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`ray start --block` for one node, in its own session, its output in ``root/<name>.log``."""
    command = [
        str(RAY), "start", "--block", "--num-cpus", "1", "--temp-dir", str(root / name), "--disable-usage-stats",
        "--object-store-memory", str(100 * 2**20), "--dashboard-agent-listen-port", str(free_port()), *args,
    ]
    log = open(root / f"{name}.log", "wb")
    return subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
    )


def _wait(ready: Callable[[], bool], process: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Until ``ready()``; fail with the node's log if `ray start` exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"`ray start` did not start: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def _started(log: Path) -> Callable[[], bool]:
    """Whether the node of this `ray start` log has registered with the cluster."""
    return lambda: "Ray runtime started" in log.read_text(errors="replace")


def _listening(address: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            socket.create_connection((address.split(":")[0], int(address.split(":")[1])), timeout=1).close()
            return True
        except OSError:
            return False

    return ready


def _stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each `ray start --block` (it stops its node's processes), then kill what is left of its group."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


@pytest.fixture
def two_node_ray() -> Iterator[RayCluster]:
    """A head and a worker (with its own custom resource) on this machine, one CPU each."""
    root = Path(tempfile.mkdtemp(prefix="ldpray-", dir="/tmp"))  # short: Ray's sockets live below it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    address = f"127.0.0.1:{free_port()}"
    processes: list[subprocess.Popen] = []
    try:
        head_args = ["--head", "--port", address.split(":")[1], "--include-dashboard", "false"]
        head_args += ["--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port())]
        processes.append(_ray_start("head", root, head_args, env))
        _wait(_listening(address), processes[0], root / "head.log")  # the worker may join while the head starts
        worker_args = ["--address", address, "--resources", json.dumps({WORKER_RESOURCE: 1})]
        processes.append(_ray_start("worker", root, worker_args, env))
        for process, name in zip(processes, ("head", "worker")):
            _wait(_started(root / f"{name}.log"), process, root / f"{name}.log")
        yield RayCluster(address, env)
    finally:
        _stop(processes)
        shutil.rmtree(root, ignore_errors=True)


def test_simulate_joins_a_two_node_ray_cluster(two_node_ray: RayCluster, tmp_path: Path) -> None:
    """`ldpfed simulate` end to end (its own SuperLink, Ray simulation): RAY_ADDRESS alone makes it run
    on the cluster; users are served on both nodes, and every release is in the ledgers (one cache
    folder, hence one ledger per Flower node)."""
    out = tmp_path / "run"
    args = ["--data=generated:240", "--public=generated:120", "--partition=iid", "--users=8", "--nodes=2"]
    args += ["--rounds=2", "--releases-per-record=2", "--users-per-round=0", "--dim=16", "--cpus-per-client=1"]
    run = subprocess.Popen(
        [sys.executable, "-m", "ldpfed.simulations.cli", "simulate", *args, f"--out={out}", "--quiet"],
        env={**os.environ, "RAY_ADDRESS": two_node_ray.address}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        head, worker = two_node_ray.nodes()  # meanwhile
        output, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:  # stop it as Ctrl-C does, so that it stops its SuperLink
            run.send_signal(signal.SIGINT)
            run.communicate(timeout=60)
    assert run.returncode == 0, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["errors"] == [] and summary["releases"] == 2 * 240
    assert summary["accuracy_nonprivate"] > 0.5 and summary["epsilon_sentence_max"] <= RunSpec().privacy.epsilon + 1e-9
    assert "accuracy_local" in output  # the run's table, printed even with --quiet
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [sum(r["users_by_host"].values()) for r in rounds] == [8, 8], rounds  # every user released each round
    served = {host for r in rounds for host, users in r["users_by_host"].items() if users}
    assert served == {head, worker}, rounds
    print(f"users served per Ray node and round (head {head}, worker {worker}):", [r["users_by_host"] for r in rounds])


@pytest.mark.parametrize("address", ["ray://10.0.0.5:10001", "10.0.0.5", "head:port", "head:70000"])
def test_ray_address_must_be_auto_or_host_port(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--ray-address", address])
    assert exit_info.value.code == 2
    assert "expected 'auto' or HOST:PORT" in capsys.readouterr().err


def test_ray_address_without_a_head_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--ray-address", f"127.0.0.1:{free_port()}"])
    assert "no Ray head answers there" in capsys.readouterr().err
