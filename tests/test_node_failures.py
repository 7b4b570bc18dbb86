"""Nodes that fail, vanish or restart: the run goes on with the others and says who was missing.

In process (LocalGrid) a node that always errors and a node that restarts under a new id; on
the real runtime (a SuperLink and two SuperNodes on loopback) a SuperNode killed mid-run, then
restarted: the next run sets it up again and its ledger still holds the first run's spending.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from tests.conftest import device_node_configs
from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.privacy.ledger import DEVICE_VIEW
from ldpfed.simulations.flower_runner import cluster, restart_supernode, run_status, start_run
from ldpfed.strategies.app import app as server_app
from tests.local_grid import LocalGrid

SMALL = dict(data="generated:240", public="generated:120", users=4, nodes=2, epsilon=8.0, nonprivate_baseline=False)


class FailingGrid(LocalGrid):
    """A LocalGrid whose node ``dead`` answers every message with Flower's "Node Unavailable" error."""

    dead = 1001

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # type: ignore[override]
        messages = list(messages)
        ids = list(super().push_messages([m for m in messages if m.metadata.dst_node_id != self.dead]))
        for msg in (m for m in messages if m.metadata.dst_node_id == self.dead):
            mid = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            self._replies[mid] = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="Node Unavailable"), reply_to=msg)
            ids.append(mid)
        return ids


class RestartingGrid(LocalGrid):
    """A LocalGrid whose node 1001 restarts with an empty state after its first train message,
    as node ``new_id`` (Flower gives a restarted SuperNode a new id unless its key is kept);
    messages to a node id that is gone get no reply (a timeout)."""

    new_id = 1002

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # type: ignore[override]
        messages = list(messages)
        ids = super().push_messages([m for m in messages if m.metadata.dst_node_id in self.node_ctx])
        if any(m.metadata.dst_node_id == 1001 and m.metadata.message_type == "train" for m in messages):
            old = self.node_ctx.pop(1001)
            self.node_ctx[self.new_id] = Context(
                run_id=old.run_id, node_id=self.new_id, node_config=old.node_config, state=RecordDict(),
                run_config=old.run_config,
            )
        return ids


def _run(grid: LocalGrid, config: dict) -> None:
    server_app(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=config))


def test_a_node_that_always_fails_leaves_its_users_unavailable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = RunSpec.from_mapping({**SMALL, "rounds": 2, "users_per_round": 0, "out": str(out)}).to_mapping()
    _run(FailingGrid(client_app, 2, config), config)
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # round 1: users 0 and 2 (node 1000) release all their records; round 2: no one has any left
    assert [(r["nodes_available"], r["users_unavailable"], r["users_sampled"]) for r in rounds] == [(1, 2, 2), (1, 2, 0)]
    assert rounds[0]["reports_received"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["nodes_dropped"]) == ["1001"] and "Node Unavailable" in summary["nodes_dropped"]["1001"]
    assert summary["errors"][0] == "query.setup: node 1001 failed: Node Unavailable"
    assert sorted(json.loads((out / "ledgers.json").read_text())["users"]) == ["0", "2"]


def test_too_few_nodes_is_a_clear_error(tmp_path: Path) -> None:
    config = RunSpec.from_mapping({**SMALL, "min_nodes": 2, "out": str(tmp_path / "run")}).to_mapping()
    with pytest.raises(RuntimeError, match="1 of 2 connected nodes .* fewer than --min-nodes 2: query.setup: node 1001"):
        _run(FailingGrid(client_app, 2, config), config)


@pytest.mark.parametrize("new_id", [1002, 1001])
def test_a_restarted_node_is_set_up_again_and_serves_its_users(tmp_path: Path, new_id: int) -> None:
    out = tmp_path / "run"
    config = RunSpec.from_mapping({**SMALL, "rounds": 2, "users_per_round": 0, "out": str(out)}).to_mapping()
    grid = RestartingGrid(client_app, 2, config)
    grid.new_id = new_id
    _run(grid, config)
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # round 1: node 1001 releases, restarts and misses the evaluation (no reply, or a `not-set-up`
    # refusal under the same id); round 2: it is set up again and hosts users 1 and 3
    assert [(r["nodes_available"], r["users_unavailable"]) for r in rounds] == [(1, 2), (2, 0)]
    summary = json.loads((out / "summary.json").read_text())
    if new_id == 1001:
        assert summary["nodes_dropped"] == {} and "evaluate: node 1001 refused (not-set-up)" in summary["errors"][0]
    else:
        assert list(summary["nodes_dropped"]) == ["1001"]
    assert sorted(json.loads((out / "ledgers.json").read_text())["users"]) == ["0", "1", "2", "3"]


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _wait_for_round(metrics: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.is_file() and metrics.read_text().strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"no round finished within {timeout:g} s")


def _wait_for_text(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path} within {timeout:g} s")


def test_a_supernode_killed_mid_run_and_restarted(tmp_path: Path) -> None:
    """An insecure loopback deployment (two real SuperNodes with their owners' policy, state folder and
    data). Kill -9 one SuperNode after round 1: the run completes with the other and reports the
    missing users; restarted with the same node config, the node is set up by the next run (a new
    randomizer: a repeat would be answered from memoized reports) and every device's ledger (SQLite
    in its state folder) still holds the first run's spending: the ledger lives on the device."""
    nodes = device_node_configs(tmp_path, [tmp_path / f"device{i}" for i in range(2)])  # 120 records each, one user each
    outs = [tmp_path / "run1", tmp_path / "run2"]
    # Setup encodes each device's data (tens of seconds on busy cores); a dead node's messages end
    # with the SuperLink's "Node Unavailable" once it misses two heartbeats (at most 60 s).
    timeout = 120.0
    with cluster(tmp_path / "flower", simulation=False, node_configs=nodes) as running:
        values = {**SMALL, "users": 2, "rounds": 2, "users_per_round": 0, "round_timeout": timeout, "out": str(outs[0])}
        log = tmp_path / "flwr-run1.log"
        process = start_run(running, RunSpec.from_mapping(values).to_mapping(), None, log)
        _wait_for_round(outs[0] / "metrics.jsonl", process, timeout=300)
        _kill(running.processes[2])  # supernode 1: user 1
        process.wait(timeout=400)
        assert run_status(running, log) == "finished:completed", log.read_text()[-3000:]

        restart_supernode(running, 1)
        _wait_for_text(running.logs / "supernode1-restart.log", "SuperNode ID", timeout=60)
        values = {**SMALL, "users": 2, "rounds": 1, "users_per_round": 0, "clip": 2.9, "round_timeout": timeout, "out": str(outs[1])}
        log = tmp_path / "flwr-run2.log"
        start_run(running, RunSpec.from_mapping(values).to_mapping(), None, log).wait(timeout=300)
        assert run_status(running, log) == "finished:completed", log.read_text()[-3000:]

    rounds = [json.loads(line) for line in (outs[0] / "metrics.jsonl").read_text().splitlines()]
    assert [(r["nodes_available"], r["users_unavailable"]) for r in rounds] == [(2, 0), (1, 1)]
    assert rounds[0]["reports_received"] == 240  # every user released every record in round 1
    assert rounds[0]["accuracy_local"] is not None  # estimated from randomized outcome bits (policy evaluation rr:2)
    summary = json.loads((outs[0] / "summary.json").read_text())
    (dropped,) = summary["nodes_dropped"]
    assert any(f"node {dropped}" in error for error in summary["errors"])
    assert sorted(json.loads((outs[0] / "ledgers.json").read_text())["users"]) == ["0"]

    # run 2 (a new randomizer): the restarted node, under a new node id, is set up; its users are
    # back and refuse for lack of budget, as do node 0's: their ledgers hold run 1's spending
    second = json.loads((outs[1] / "metrics.jsonl").read_text().splitlines()[0])
    assert (second["nodes_available"], second["users_unavailable"]) == (2, 0)
    assert second["reports_received"] == 0 and second["users_refused"] == 2
    ledgers = json.loads((outs[1] / "ledgers.json").read_text())["users"]
    assert sorted(ledgers) == ["0", "1"]
    # a device's aggregates, no record counts: the restarted device's step log holds its user's step of run 1
    assert ledgers["1"]["view"] == DEVICE_VIEW and "events" not in ledgers["1"], ledgers["1"]
    assert sum(s["steps"] for s in ledgers["1"]["steps"] if s["kind"] == "train") == 1, ledgers["1"]
