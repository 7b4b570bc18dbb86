"""Job 3 of the device-cost benchmark: a real flower-supernode hosting one user, its memory and time to first report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from simulations.benchmarks.device_costs.device import POLICY, REPO
from simulations.benchmarks.device_costs.progress import Progress, stats
from simulations.benchmarks.processes import TreeMemory, cmdline, cpu_seconds, descendants


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
    work: Path, data: str, public: str, rounds: int, secure: bool, timeout: float, progress: Progress, encode: bool = True
) -> dict[str, Any]:
    """Launch one flower-supernode against a run that waits for it; measure memory and time to first report.

    With ``encode`` the owner first encodes the device's data, as the documented procedure does before
    any run (``ldpfed device encode``, timed on its own): setup then runs no encoder.
    """
    from fed.spec.run_spec import RunSpec
    from simulations.commands.device import SUPERNODE_ENV, build_fab, init_device, node_config_string, sign_fab, supernode_command
    from simulations.commands.superlink import init_superlink, publish_app
    from simulations.flower_runner import APP_DIR, BIN, Secure, cluster, free_port, run_status, start_run

    work.mkdir(parents=True, exist_ok=True)
    device = init_device(work / "device")
    device.policy.write_text(POLICY)
    node_config = node_config_string(device, data)
    app, secure_cluster = str(APP_DIR), None
    if secure:
        link = init_superlink(work / "superlink", node_keys=[device.node_public_key])
        fab = build_fab(APP_DIR)
        app = publish_app(link, fab, [sign_fab(fab, device.signing_key)])
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
            [sys.executable, "-m", "simulations.cli", "device", "encode", str(device.root), "--data", data],
            cwd=REPO, check=True, capture_output=True, timeout=timeout,
        )
        result["device_encode_s"] = time.perf_counter() - started
    progress.say("importing the ClientApp in fresh interpreters (what every flwr-clientapp process pays first)")
    result["fresh_process_import_s"] = [_time_fresh_import() for _ in range(3)]
    with cluster(work / "flower", simulation=False, node_configs=[], secure=secure_cluster) as running:
        address = _superlink_address(running.env)
        log = work / "flwr-run.log"
        progress.say("SuperLink up; starting a run and waiting for its ServerApp to wait for nodes")
        run = start_run(running, config.to_mapping(), None, log, app=app)
        _wait_for_idle_serverapp(running.processes[0].pid, run, timeout)
        if secure:
            command = supernode_command(device, address, link.ca_cert, node_config)
            command[0] = str(BIN / command[0])
        else:
            command = [str(BIN / "flower-supernode"), "--insecure", "--superlink", address, "--node-config", node_config]
        node_log = running.logs / "supernode-bench.log"
        progress.say("launching flower-supernode (MiniLM, one user)")
        started = time.perf_counter()
        process = subprocess.Popen(
            command + ["--port", str(free_port())], env={**running.env, **SUPERNODE_ENV}, cwd=work, stdout=open(node_log, "wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        running.processes.append(process)  # stopped with the cluster
        watch = NodeWatch(process.pid, node_log, started)
        deadline = time.monotonic() + timeout
        first_report = None
        while run.poll() is None and time.monotonic() < deadline:
            watch.poll()
            if first_report is None and watch.stage_times()["first_report_sent"] is not None:
                first_report = watch.stage_times()["first_report_sent"]
                progress.say(f"first report after {first_report:.1f}s; the run goes on ({rounds} rounds)")
            if process.poll() is not None:
                raise RuntimeError(f"flower-supernode exited with {process.returncode}: {node_log.read_text()[-3000:]}")
            time.sleep(0.05)
        watch.poll()
        if run.poll() is None:
            raise TimeoutError(f"the run did not finish within {timeout}s; see {log}")
        status = run_status(running, log)
        result["run_status"] = status
        if status != "finished:completed":
            raise RuntimeError(f"the run ended {status}: {log.read_text(errors='replace')[-3000:]}")
    result["time_to_first_report"] = watch.stage_times()
    result["train_message_walls_s"] = watch.message_walls("train")
    result["train_message_wall"] = stats(result["train_message_walls_s"])
    result["memory"] = _memory_summary(watch)
    metrics = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    result["reports_received"] = [m.get("reports_received") for m in metrics]
    return result


def _time_fresh_import() -> float:
    """Seconds a new Python process takes to import the ClientApp module (flwr, torch, the app)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import clients.app"], cwd=REPO, check=True, capture_output=True, timeout=300)
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
