"""Run the ldpfed Flower app on a private SuperLink: a Ray simulation or real SuperNodes.

Everything is isolated in a work folder: its own FLWR_HOME (connection config and
installed app bundles), free ports, and processes started in their own session and
stopped by pid, so nothing outlives the run. The Ray simulation starts its own private Ray
instance, or joins a running Ray cluster (``ray_address``, docs/scale.md).

The default is insecure (loopback, the Ray simulation or a quick local test). With
``secure=Secure(...)`` the cluster is the documented deployment: TLS with the SuperLink's
own CA, SuperNode authentication with registered node keys, and nodes that run only app
bundles signed by a key in their trusted entities, served by the app registry of
``ldpfed superlink apps`` (docs/device.md, "Deployment: TLS, authentication, signed app").
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpfed.simulations.commands.device import DeviceFiles, staged_app, supernode_command
from ldpfed.simulations.processes import stop_tree
from ldpfed.simulations.commands.superlink import SuperLinkFiles, connection_toml, serve_apps_in_background, superlink_command

BIN = Path(sys.executable).parent
APP_DIR = Path(__file__).resolve().parents[1]
CONNECTION = "ldpfed"


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def resolve_ray_address(value: str | None = None) -> str | None:
    """The Ray cluster a simulation joins: ``value``, else $RAY_ADDRESS; None for a private instance.

    Raises ValueError unless the address is 'auto' (the cluster ``ray start`` last started on
    this machine) or HOST:PORT of a Ray head that accepts connections.
    """
    source = "--ray-address" if value else "$RAY_ADDRESS"
    address = (value or os.environ.get("RAY_ADDRESS") or "").strip()
    if not address:
        return None
    if address == "auto":
        return address
    host, _, port = address.rpartition(":")
    if not host or "/" in host or any(c.isspace() for c in host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{source} {address!r}: expected 'auto' or HOST:PORT of a Ray head (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as error:
        raise ValueError(f"{source} {address!r}: no Ray head answers there ({error}); start one with `ray start --head`") from None
    return address


RAY_NO_PRESTART = ("RAY_enable_worker_prestart", "RAY_prestart_worker_first_driver")
"""Ray settings (environment variables, unless already set) for a private Ray instance of a simulation: prestart no
idle task workers. Flower's backend runs only actors, each started in a worker of its own, so the idle workers Ray
prestarted (two in a small run on 2 CPUs) were never used: 0.6 CPU s of a small run, the run hashes the same."""


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
        NO_PROXY=",".join(filter(None, [env.get("NO_PROXY", ""), "127.0.0.1,localhost"])),
        no_proxy=",".join(filter(None, [env.get("no_proxy", ""), "127.0.0.1,localhost"])),
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


@dataclass(frozen=True)
class Secure:
    """A secure deployment: the SuperLink folder (``ldpfed superlink init``) and one device
    folder (``ldpfed device init``) per node config. A device folder without ``node-key``
    starts a node without authentication."""

    superlink: SuperLinkFiles
    devices: Sequence[DeviceFiles]


@dataclass
class Cluster:
    """A running SuperLink (and SuperNodes, in deployment mode)."""

    env: dict[str, str]
    logs: Path
    processes: list[subprocess.Popen]


@contextmanager
def cluster(
    workdir: Path,
    simulation: bool,
    node_configs: list[str] | None = None,
    secure: Secure | None = None,
    ray_address: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Cluster]:
    """Start a SuperLink (with the Ray simulation runtime, or with one SuperNode per node config).

    With ``secure``, the SuperLink serves TLS and authenticates nodes (the authorised keys in
    the SuperLink folder are registered before any node starts), fetches apps from the app
    registry of that folder, and each node runs with its device's keys and trusted entities.
    The Ray simulation joins the cluster at ``ray_address`` (see :func:`resolve_ray_address`;
    Flower's ray.init reads $RAY_ADDRESS), else it starts a private Ray instance, whatever
    $RAY_ADDRESS or a cluster that ``ray start`` left on this machine say. ``env`` adds variables to the environment
    of every process started (e.g. the plugins registered in this process, fed.plugins.entry_points.environment).
    """
    node_configs = node_configs or []
    if secure is not None and (simulation or len(secure.devices) != len(node_configs)):
        raise ValueError("a secure cluster is a deployment with one device folder per node config")
    flwr_home, logs = workdir / "flwr_home", workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    flwr_home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    connection = (
        connection_toml(CONNECTION, address, secure.superlink.ca_cert) if secure
        else f'[superlink.{CONNECTION}]\naddress = "{address}"\ninsecure = true\n'
    )
    (flwr_home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n{connection}')
    extra = dict(env or {})
    env = flower_env(flwr_home)
    env.update(extra)
    if simulation:
        env["RAY_ADDRESS"] = ray_address or "local"
        for name in RAY_NO_PRESTART:
            env.setdefault(name, "0")
    processes: list[subprocess.Popen] = []
    registry = None

    def spawn(name: str, command: list[str]) -> None:
        log = open(logs / f"{name}.log", "wb")
        processes.append(
            subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )

    try:
        if secure is None:
            spawn("superlink", [str(BIN / "flower-superlink"), "--insecure", "--port", str(port)] + (["--simulation"] if simulation else []))
        else:
            registry = serve_apps_in_background(secure.superlink, free_port())
            env["FLWR_SUPERGRID_API_URL"] = f"http://127.0.0.1:{registry.server_address[1]}"
            command = superlink_command(secure.superlink, port)
            spawn("superlink", [str(BIN / command[0]), *command[1:]])
        _wait_healthy(port, timeout=90, ca_cert=secure.superlink.ca_cert if secure else None)
        if secure is not None:
            for key in secure.superlink.node_keys():
                _flwr(env, ["supernode", "register", str(key), CONNECTION])
        for i, node_config in enumerate(node_configs):
            if secure is None:
                command = [str(BIN / "flower-supernode"), "--insecure", "--superlink", address, "--node-config", node_config]
            else:
                command = supernode_command(secure.devices[i], address, secure.superlink.ca_cert, node_config)
                command[0] = str(BIN / command[0])
            spawn(f"supernode{i}", command + ["--port", str(free_port())])
        yield Cluster(env, logs, processes)
    finally:
        _stop(processes)
        if registry is not None:
            registry.shutdown()
            registry.server_close()


def start_run(
    cluster: Cluster, run_config: Mapping[str, Any], federation_config: str | None, log: Path, app: str = str(APP_DIR)
) -> subprocess.Popen:
    """`flwr run <app> --stream` in the background, its output going to ``log``; ``app`` is an app
    folder or, on a secure cluster, a registry app spec ``@publisher/name==x.y.z``."""
    if not app.startswith("@"):
        app = str(staged_app(Path(app), cluster.logs.parent / "app"))
    command = [str(BIN / "flwr"), "run", app, CONNECTION, "--stream", "--run-config", run_config_string(run_config)]
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


def _flwr(env: dict[str, str], args: list[str]) -> str:
    done = subprocess.run([str(BIN / "flwr"), *args], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"flwr {' '.join(args)} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return done.stdout


def _wait_healthy(port: int, timeout: float, ca_cert: Path | None = None) -> None:
    context = ssl.create_default_context(cafile=str(ca_cert)) if ca_cert else None
    url = f"{'https' if ca_cert else 'http'}://127.0.0.1:{port}/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=0.5, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"the SuperLink on port {port} did not become healthy within {timeout}s")


def _stop(processes: list[subprocess.Popen], timeout: float = 15.0) -> None:
    """Stop the Flower processes and everything they started, group by group (the SuperExec's session, with the
    simulation and Ray, too); SIGKILL to what is left after ``timeout`` seconds."""
    stop_tree(processes, timeout)


def restart_supernode(running: Cluster, index: int) -> subprocess.Popen:
    """Start SuperNode ``index`` again (after it died, e.g. kill -9) with its original command line and node config."""
    log = open(running.logs / f"supernode{index}-restart.log", "wb")
    process = subprocess.Popen(
        running.processes[1 + index].args, env=running.env, cwd=running.logs.parent,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    running.processes[1 + index] = process
    return process
