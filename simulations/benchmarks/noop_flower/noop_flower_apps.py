"""A no-op Flower app: the message sequence of ldpfed's SuperNode benchmark, every message answered at once.

The ClientApp serves the message types ldpfed's ClientApp serves in that run (``query.setup``,
``train``, ``evaluate``, ``query.ledger``) and answers each with a tiny reply, importing nothing
but Flower and numpy: what a ``flwr-clientapp`` process costs on its own. The ServerApp waits for
``nodes`` nodes, then sends one ``query.setup``, ``rounds`` times one ``train`` and one
``evaluate``, and one ``query.ledger`` to every node, as ldpfed's ServerApp does with one user per
node and ``evaluate-every=1``; it appends ``{"round", "reports_received", "errors", "seconds"}`` per
round to ``<out>/metrics.jsonl``. This module is a FAB's top-level module: Flower imports it as
``noop_flower_apps`` (no package-relative imports).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

client = ClientApp()
server = ServerApp()

SEQUENCE = ("query.setup", "train", "evaluate", "query.ledger")
"""The message types, in the order of one run: setup, then train and evaluate per round, then the ledger."""


def _ok(message: Message, **values: int | float | str | bool) -> Message:
    return Message(RecordDict({"meta": ConfigRecord({"ok": True, **values})}), reply_to=message)


@client.query("setup")
def setup(message: Message, context: Context) -> Message:
    """A setup-like reply: one small config record."""
    return _ok(message, users=1)


@client.train()
def train(message: Message, context: Context) -> Message:
    """One report of ``dim`` float32 zeros, as ldpfed's reply carries one report."""
    dim = int(message.content["config"]["dim"])
    reply = RecordDict({"reports": ArrayRecord([np.zeros((1, dim), dtype=np.float32)]), "meta": ConfigRecord({"ok": True})})
    return Message(reply, reply_to=message)


@client.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    """An evaluate-like reply: one small config record."""
    return _ok(message, correct=0, total=0)


@client.query("ledger")
def ledger(message: Message, context: Context) -> Message:
    """A ledger-like reply: one small config record."""
    return _ok(message, events=0)


def _wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(list(grid.get_node_ids())) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return sorted(grid.get_node_ids())


def _exchange(grid: Grid, nodes: list[int], message_type: str, config: dict, timeout: float) -> tuple[int, int]:
    """Send ``message_type`` to every node and wait for the replies: (replies without error, errors)."""
    content = RecordDict({"config": ConfigRecord(config)})
    replies = list(grid.send_and_receive([Message(content, dst_node_id=n, message_type=message_type) for n in nodes], timeout=timeout))
    errors = sum(reply.has_error() for reply in replies)
    return len(replies) - errors, errors


@server.main()
def main(grid: Grid, context: Context) -> None:
    """Setup, ``rounds`` rounds of train and evaluate, then the ledger; one metrics row per round."""
    rounds, dim = int(context.run_config["rounds"]), int(context.run_config["dim"])
    timeout = float(context.run_config["round-timeout"])
    nodes = _wait_for_nodes(grid, int(context.run_config["nodes"]), timeout)
    out = Path(str(context.run_config["out"]) or Path.cwd() / "noop-flower")
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    metrics.write_text("")
    _, errors = _exchange(grid, nodes, "query.setup", {"dim": dim}, timeout)
    for server_round in range(1, rounds + 1):
        started = time.monotonic()
        reports, train_errors = _exchange(grid, nodes, "train", {"dim": dim, "round": server_round}, timeout)
        _, evaluate_errors = _exchange(grid, nodes, "evaluate", {"round": server_round}, timeout)
        row = {
            "round": server_round, "reports_received": reports, "errors": train_errors + evaluate_errors + errors,
            "seconds": time.monotonic() - started,
        }
        errors = 0
        with open(metrics, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    _exchange(grid, nodes, "query.ledger", {}, timeout)
