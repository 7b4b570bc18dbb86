"""A trivial Flower app: the reference cost of Flower itself for simulations.benchmarks.bench_scale.

Each round the ServerApp sends one train message to every connected node (Flower's Message
API, ``Grid.send_and_receive``) and each ClientApp answers with a float32 array of ``dim``
zeros; nothing else happens. The ServerApp appends ``{"round", "nodes", "replies", "errors",
"seconds", "elapsed"}`` per round to ``<out>/metrics.jsonl`` (``elapsed``: seconds since round 1 began).
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


@client.train()
def answer(message: Message, context: Context) -> Message:
    """Reply with a tiny array of the length the server asked for."""
    dim = int(message.content["config"]["dim"])
    return Message(RecordDict({"arrays": ArrayRecord([np.zeros(dim, dtype=np.float32)])}), reply_to=message)


def _wait_for_nodes(grid: Grid, expected: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds until ``expected`` nodes are connected (as LdpStrategy.setup does)."""
    deadline = time.monotonic() + timeout
    while len(grid.get_node_ids()) < expected and time.monotonic() < deadline:
        time.sleep(0.5)


@server.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured rounds over all connected nodes and record each round's seconds."""
    rounds, dim = int(context.run_config["rounds"]), int(context.run_config["dim"])
    timeout = float(context.run_config["round-timeout"])
    _wait_for_nodes(grid, int(context.run_config["nodes"]), timeout)
    out = Path(str(context.run_config["out"]) or Path.cwd() / "plain-flower")
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    metrics.write_text("")
    first = time.monotonic()
    for server_round in range(1, rounds + 1):
        started = time.monotonic()
        nodes = sorted(grid.get_node_ids())
        content = RecordDict({"config": ConfigRecord({"dim": dim, "round": server_round})})
        messages = [Message(content, dst_node_id=node, message_type="train") for node in nodes]
        replies = list(grid.send_and_receive(messages, timeout=timeout))
        errors = sum(reply.has_error() for reply in replies)
        row = {
            "round": server_round,
            "nodes": len(nodes),
            "replies": len(replies) - errors,
            "errors": errors,
            "seconds": time.monotonic() - started,
            "elapsed": time.monotonic() - first,
        }
        with open(metrics, "a") as handle:
            handle.write(json.dumps(row) + "\n")
