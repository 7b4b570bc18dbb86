"""The real Flower runtime: `ldpfed simulate` (Ray simulation on a private SuperLink) and a
minimal deployment (flower-superlink plus two flower-supernode processes on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import device_node_configs
from fed.config import RunConfig
from simulations.flower_runner import cluster, run_status, start_run

SMALL = dict(data="generated:240", public="generated:120", users=4, nodes=2, rounds=2, epsilon=8.0)


def test_ldpfed_simulate_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
    done = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "simulate", *args, f"--out={out}", "--quiet"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["users"] == 4 and summary["rounds"] == 2 and summary["errors"] == []
    assert summary["accuracy_nonprivate"] > 0.5 and summary["epsilon_sentence_max"] <= 8.0 + 1e-9
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    assert "accuracy_local" in done.stdout


def test_deployment_on_loopback_keeps_each_devices_ledger_across_runs(tmp_path: Path) -> None:
    """Two real SuperNodes with their owners' policy, state folder and data; a second run (a new
    randomizer: a repeat of the first would be answered from memoized reports) finds the budget
    the first one spent: the ledger lives on the device, not in the run."""
    nodes = device_node_configs(tmp_path, [tmp_path / f"device{i}" for i in range(2)], SMALL["data"])
    outs = [tmp_path / "run1", tmp_path / "run2"]
    with cluster(tmp_path / "flower", simulation=False, node_configs=nodes) as running:
        for i, out in enumerate(outs):
            values = {**SMALL, "rounds": 1, "users_per_round": 0, "clip": 3.0 - i / 10, "out": str(out)}
            config = RunConfig.from_mapping({**values, "nonprivate_baseline": False})
            log = tmp_path / f"flwr-run{i}.log"
            process = start_run(running, config.to_mapping(), None, log)
            process.wait(timeout=900)
            assert run_status(running, log) == "finished:completed", log.read_text()[-3000:]
    first, second = (json.loads((out / "metrics.jsonl").read_text().splitlines()[0]) for out in outs)
    summary = json.loads((outs[0] / "summary.json").read_text())
    assert summary["errors"] == [] and first["reports_received"] == 240
    assert first["accuracy_local"] is not None  # estimated from randomized outcome bits (policy evaluation rr:2)
    assert second["reports_received"] == 0 and second["users_refused"] == 4
    ledgers = json.loads((outs[1] / "ledgers.json").read_text())["users"]
    assert sorted(ledgers) == ["0", "1", "2", "3"]
    assert max(max(e["counts_per_record"]) for u in ledgers.values() for e in u["events"] if e["event"]["mechanism"] == "gaussian") == 1
