"""The real Flower runtime: `ldpfed simulate` (Ray simulation on a private SuperLink) and a
minimal deployment (flower-superlink plus two flower-supernode processes on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_deployment_on_loopback_completes_a_round(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = RunConfig.from_mapping({**SMALL, "rounds": 1, "out": str(out), "nonprivate_baseline": False})
    nodes = [f"partition-id={i} num-partitions=2 deployed=true" for i in range(2)]
    with cluster(tmp_path / "flower", simulation=False, node_configs=nodes) as running:
        log = tmp_path / "flwr-run.log"
        process = start_run(running, config.to_mapping(), None, log)
        process.wait(timeout=900)
        status = run_status(running, log)
    assert status == "finished:completed", log.read_text()[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == [] and summary["releases"] > 0
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    assert sorted(ledgers) == ["0", "1", "2", "3"]
