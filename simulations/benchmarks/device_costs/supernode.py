"""Job 3 of the device-cost benchmark: a real flower-supernode hosting one user, its memory and time to first report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from ldpfed.simulations.benchmarks.device_costs.device import POLICY, REPO
from ldpfed.simulations.benchmarks.device_costs.progress import Progress, stats
from ldpfed.simulations.benchmarks.processes import TreeMemory, cmdline, cpu_seconds, descendants


class NodeWatch:
    """Samples the memory of a SuperNode's process tree and timestamps the lines of its log."""

    STAGES = {
        "connected": "SuperNode ID:",
        "setup_received": "Receiving: query.setup message",
        "setup_answered": "Sending: query.setup message",
        "train_received": "Receiving: train message",
    }

    def __init__(self, pid: int, log: Path, started: float) -> None:
        self.pid, self.log, self.started = pid, log, started
        self.offset = 0
        self.partial = b""
        self.lines: list[tuple[float, str]] = []
        self.memory = TreeMemory(pid, label=_kind)
        self.processes: dict[int, dict[str, Any]] = {}
        self.last_received = "start"

    def poll(self) -> None:
        """Read the log's new lines and sample the memory of every process of the tree."""
        now = time.perf_counter() - self.started
        self._read_log(now)
        for sample in self.memory.sample():
            if sample["pid"] not in self.processes:
                self.processes[sample["pid"]] = {"kind": sample["process"], "first_seen_s": now, "message": self.last_received}
            entry = self.processes[sample["pid"]]
            entry["VmHWM_kB"] = max(entry.get("VmHWM_kB", 0), sample["hwm_kb"])
            entry["Pss_peak_kB"] = max(entry.get("Pss_peak_kB", 0), sample.get("pss_kb", 0))
            entry["cpu_s"] = max(entry.get("cpu_s", 0.0), _safe_cpu(sample["pid"]))  # user + system, up to the last sample
            entry["last_seen_s"] = now

    def _read_log(self, now: float) -> None:
        try:
            with open(self.log, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        self.offset += len(chunk)
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            self.lines.append((now, line))
            if "Receiving:" in line:
                self.last_received = line.split("Receiving:", 1)[1].split("(")[0].strip()

    def stage_times(self) -> dict[str, float | None]:
        """When each stage's log line appeared (seconds after launch), and the first report sent."""
        found: dict[str, float | None] = {}
        for stage, marker in self.STAGES.items():
            found[stage] = next((t for t, line in self.lines if marker in line), None)
        found["first_report_sent"] = self._sent_after("Sending: train message")
        return found

    def _sent_after(self, marker: str, start: int = 0) -> float | None:
        sending = False
        for t, line in self.lines[start:]:
            if marker in line:
                sending = True
            elif sending and "Sent successfully" in line:
                return t
        return None

    def answered(self) -> int:
        """Replies the SuperNode has sent so far."""
        return sum("Sending:" in line for _, line in self.lines)

    def message_walls(self, message_type: str) -> list[float]:
        """Seconds from 'Received successfully' of each ``message_type`` message to its reply being sent."""
        walls, received = [], None
        current = None
        for t, line in self.lines:
            if "Receiving:" in line:
                current = line.split("Receiving:", 1)[1].split("(")[0].strip()
            elif "Received successfully" in line and current == f"{message_type} message":
                received = t
            elif f"Sending: {message_type} message" in line and received is not None:
                walls.append(t - received)
                received = None
        return walls


def measure_supernode(
    work: Path, data: str, public: str, rounds: int, secure: bool, timeout: float, progress: Progress, encode: bool = True,
    noop: bool = False,
) -> dict[str, Any]:
    """Launch one flower-supernode against a run that waits for it; measure memory and time to first report.

    With ``encode`` the owner first encodes the device's data, as the documented procedure does before
    any run (``ldpfed device encode``, timed on its own): setup then runs no encoder. With ``noop``
    the same flower-supernode command (device folder, node config, keys, trusted signers, Flower
    settings) first serves the no-op app (simulations.benchmarks.noop_flower: the same message
    sequence, each message answered at once), then ldpfed's app, each launched fresh against a fresh
    SuperLink; ``result["noop"]`` holds the no-op's figures and ``result["comparison"]`` what ldpfed adds.
    """
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.simulations.benchmarks.device_costs.compare import compare
    from ldpfed.simulations.benchmarks.noop_flower import APP_DIR as NOOP_DIR
    from ldpfed.simulations.commands.device import build_fab, init_device, node_config_string, sign_fab
    from ldpfed.simulations.commands.superlink import init_superlink, publish_app
    from ldpfed.simulations.flower_runner import APP_DIR, Secure

    work.mkdir(parents=True, exist_ok=True)
    device = init_device(work / "device")
    device.policy.write_text(POLICY)
    node_config = node_config_string(device, data)
    app, noop_app, secure_cluster = str(APP_DIR), str(NOOP_DIR), None
    if secure:
        link = init_superlink(work / "superlink", node_keys=[device.node_public_key])
        fab = build_fab(APP_DIR)
        app = publish_app(link, fab, [sign_fab(fab, device.signing_key)])
        if noop:
            noop_fab = build_fab(NOOP_DIR)  # approved by the same owner key, served by the same registry
            noop_app = publish_app(link, noop_fab, [sign_fab(noop_fab, device.signing_key)])
        secure_cluster = Secure(link, [])
    config = RunSpec.of(
        data=data, public=public, users=1, nodes=1, rounds=rounds, users_per_round=0, records_per_user_round=1,
        nonprivate_baseline=False, cache_dir=str(work / "server-cache"), out=str(work / "run"),
    )
    result: dict[str, Any] = {"secure": secure, "rounds": rounds, "data": data, "device_encode_s": None}
    if encode:
        progress.say("the owner encodes the device's data once, before the run (ldpfed device encode)")
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-P", "-m", "ldpfed.simulations.cli", "device", "encode", str(device.root), "--data", data],
            cwd=REPO, check=True, capture_output=True, timeout=timeout,
        )
        result["device_encode_s"] = time.perf_counter() - started
    progress.say("importing the ClientApp once to write its bytecode, as a device's Python does (pip at install)")
    _time_fresh_import()
    result["bytecode"] = BYTECODE
    progress.say("importing the ClientApp in fresh interpreters (what every flwr-clientapp process pays first)")
    result["fresh_process_import_s"] = [_time_fresh_import() for _ in range(3)]
    served = Served(work, device, node_config, secure_cluster, rounds, timeout, progress)
    if noop:
        noop_config = {"nodes": 1, "rounds": rounds, "dim": 16, "out": str(work / "noop-run"), "round-timeout": 600.0}
        result["noop"] = served.serve("no-op", noop_app, noop_config, work / "noop-run")
    result.update(served.serve("ldpfed", app, config.to_mapping(), work / "run"))
    if noop:
        result["comparison"] = compare(result["noop"], result)
    return result


BYTECODE = (
    "written and read (Python's default; PYTHONDONTWRITEBYTECODE dropped for the SuperNode), the ClientApp's written first"
)
"""How the SuperNode's processes treat bytecode. A device's Python writes the bytecode of what it imports (``pip
install`` compiles a package's at install), so a message's process reads ldpfed's modules compiled. This machine
sets PYTHONDONTWRITEBYTECODE=1, with which every message's process compiled ldpfed's modules from source again
(importing the ClientApp took 0.22 CPU s instead of 0.10: simulations/reports/device_costs/message_parts5.json;
pairs 1 to 4 of docs/device_costs.md ran so); Flower's own, compiled at install, were read."""


def device_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` as a device's SuperNode has it: Python's own bytecode default (see BYTECODE)."""
    return {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}


MESSAGES = ("query.setup", "train", "evaluate", "query.ledger")
"""The message types of the benchmark's run, in its order: setup, train and evaluate per round, the ledger."""


class Served:
    """Serves one app's run on a fresh SuperLink with the device's flower-supernode command, and measures it."""

    def __init__(
        self, work: Path, device: Any, node_config: str, secure: Any, rounds: int, timeout: float, progress: Progress,
    ) -> None:
        self.work, self.device, self.node_config, self.secure = work, device, node_config, secure
        self.rounds, self.timeout, self.progress = rounds, timeout, progress

    def command(self, address: str) -> list[str]:
        """The flower-supernode command line, the same for every app served."""
        from ldpfed.simulations.commands.device import supernode_command
        from ldpfed.simulations.flower_runner import BIN

        if self.secure is not None:
            command = supernode_command(self.device, address, self.secure.superlink.ca_cert, self.node_config)
            command[0] = str(BIN / command[0])
            return command
        return [str(BIN / "flower-supernode"), "--insecure", "--superlink", address, "--node-config", self.node_config]

    def serve(self, name: str, app: str, run_config: dict[str, Any], out: Path) -> dict[str, Any]:
        """Start ``app``'s run, launch the SuperNode when its ServerApp waits, watch until the run ends."""
        from ldpfed.simulations.commands.device import SUPERNODE_ENV
        from ldpfed.simulations.flower_runner import cluster, free_port, run_status, start_run

        result: dict[str, Any] = {"app": app}
        folder = "flower" if name == "ldpfed" else f"flower-{name}"
        total = 2 + 2 * self.rounds  # setup, train and evaluate per round, the ledger
        with cluster(self.work / folder, simulation=False, node_configs=[], secure=self.secure) as running:
            address = _superlink_address(running.env)
            log = self.work / f"{folder}-run.log"
            self.progress.say(f"{name}: SuperLink up; starting a run and waiting for its ServerApp to wait for nodes")
            run = start_run(running, run_config, None, log, app=app)
            _wait_for_idle_serverapp(running.processes[0].pid, run, self.timeout)
            node_log = running.logs / "supernode-bench.log"
            self.progress.say(f"{name}: launching flower-supernode (one user)")
            result["load_average"] = {"before": _load_average()}
            started = time.perf_counter()
            process = subprocess.Popen(
                self.command(address) + ["--port", str(free_port())], env=device_env({**running.env, **SUPERNODE_ENV}),
                cwd=self.work,
                stdout=open(node_log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
            )
            running.processes.append(process)  # stopped with the cluster
            watch = NodeWatch(process.pid, node_log, started)
            deadline = time.monotonic() + self.timeout
            first_report, answered = None, 0
            while run.poll() is None and time.monotonic() < deadline:
                watch.poll()
                if first_report is None and watch.stage_times()["first_report_sent"] is not None:
                    first_report = watch.stage_times()["first_report_sent"]
                    self.progress.say(f"{name}: first report after {first_report:.1f}s; the run goes on ({self.rounds} rounds)")
                now = watch.answered()
                if now > answered:
                    answered = now
                    self.progress.count(f"{name}: messages answered", min(answered, total), total)
                if process.poll() is not None:
                    raise RuntimeError(f"flower-supernode exited with {process.returncode}: {node_log.read_text()[-3000:]}")
                time.sleep(0.05)
            watch.poll()
            result["load_average"]["after"] = _load_average()
            if run.poll() is None:
                raise TimeoutError(f"the {name} run did not finish within {self.timeout}s; see {log}")
            status = run_status(running, log)
            result["run_status"] = status
            if status != "finished:completed":
                raise RuntimeError(f"the {name} run ended {status}: {log.read_text(errors='replace')[-3000:]}")
        result["time_to_first_report"] = watch.stage_times()
        result["train_message_walls_s"] = watch.message_walls("train")
        result["train_message_wall"] = stats(result["train_message_walls_s"])
        result["message_walls_s"] = {kind: watch.message_walls(kind) for kind in MESSAGES}
        result["memory"] = _memory_summary(watch)
        metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        result["reports_received"] = [m.get("reports_received") for m in metrics]
        return result


def _load_average() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def _time_fresh_import() -> float:
    """Seconds a new Python process takes to import the ClientApp module (flwr, the app), as the SuperNode's would."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-P", "-c", "import ldpfed.clients.app"], cwd=REPO, check=True, capture_output=True, timeout=300,
        env=device_env(dict(os.environ)),
    )
    return time.perf_counter() - started


def _memory_summary(watch: NodeWatch) -> dict[str, Any]:
    processes = [
        {"pid": pid, **{k: v for k, v in entry.items()}} for pid, entry in sorted(watch.processes.items(), key=lambda e: e[1]["first_seen_s"])
    ]
    peak = {}
    for entry in processes:
        kind = entry["kind"]
        if entry.get("VmHWM_kB", 0) > peak.get(kind, {}).get("VmHWM_kB", -1):
            peak[kind] = {"VmHWM_kB": entry.get("VmHWM_kB", 0), "message": entry["message"], "pid": entry["pid"]}
    return {
        "processes": processes,
        "peak_by_kind": peak,
        "sum_of_peaks_kB": int(sum(p["VmHWM_kB"] for p in peak.values())),
        "peak_concurrent_rss_kB": int(watch.memory.peak_rss_kb),
        "peak_concurrent_pss_kB": int(watch.memory.peak_pss_kb),
        "clientapp_processes": sum(p["kind"] == "flwr-clientapp" for p in processes),
    }


def _superlink_address(env: dict[str, str]) -> str:
    config = tomllib.loads((Path(env["FLWR_HOME"]) / "config.toml").read_text())
    return str(config["superlink"]["ldpfed"]["address"])


def _wait_for_idle_serverapp(superlink_pid: int, run: subprocess.Popen, timeout: float, quiet_for: float = 3.0) -> None:
    """Until the run's flwr-serverapp has built its bundle and only polls for nodes (CPU-idle for ``quiet_for`` s)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise RuntimeError("the run ended before any node connected")
        apps = [pid for pid in descendants(superlink_pid) if _is_serverapp(pid)]
        cpu = sum(_safe_cpu(pid) for pid in apps) if apps else None
        now = time.monotonic()
        if cpu is None or last is None or cpu - last > 0.05 * (now - since):
            last, since = cpu, now
        elif now - since >= quiet_for:
            return
        time.sleep(0.5)
    raise TimeoutError("the ServerApp did not start waiting for nodes in time")


def _kind(pid: int) -> str:
    """What a process of the SuperNode's tree runs: its Flower program, else the start of its command."""
    command = " ".join(cmdline(pid))
    for name in ("flwr-clientapp", "flower-superexec", "flower-supernode"):
        if name in command:
            return name
    return command.split(" ", 1)[0][-40:] or "?"


def _is_serverapp(pid: int) -> bool:
    try:
        return "flwr-serverapp" in " ".join(cmdline(pid))
    except OSError:
        return False


def _safe_cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return 0.0
