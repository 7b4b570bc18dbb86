"""CPU seconds of one train message in a fresh process, as Flower 1.42 serves each message on a device.

``flwr-clientapp`` starts a new process for every message: it imports Flower's SuperNode
modules, then the app, then serves the message. This benchmark times the three by the process's
own CPU clock (``time.process_time``), which other jobs on the machine slow far less than they
slow the wall clock, for one or several source trees side by side (``--repo``, e.g. a worktree of
main and this checkout), messages alternating between them. Each tree serves its own copy of one
device set up here (the device of ``simulations.benchmarks.device_costs``: ``generated:200``, MiniLM, one
user, the owner's policy), one record per message, so every tree sees the same ledger history.

Run::

    python -m ldpfed.simulations.benchmarks.message_cpu --repo ../main-worktree --repo . --messages 6
    python -m ldpfed.simulations.benchmarks.message_cpu --repo ../main-worktree --repo . --messages 3 --labels rr:1.0 --dim 0
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

SERVE = """
import json, pickle, sys, time
c0 = time.process_time()
import flwr.supernode.cli, flwr.supernode.runtime.run_clientapp  # what flwr-clientapp imports before the app
c1 = time.process_time()
import ldpfed.clients.app as client_app
c2 = time.process_time()
from flwr.app import Message
from flwr.supercore.task_identity import TaskIdentity
from ldpfed.fed import protocol
path = sys.argv[1]
saved = pickle.load(open(path, "rb"))
context = saved["context"]
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, context.run_id, context.node_id
message = Message(saved["request"], dst_node_id=context.node_id, message_type=protocol.TRAIN)
message.metadata.__dict__["_message_id"] = "train"
c3 = time.process_time()
reply = client_app.app(message, context)
c4 = time.process_time()
assert not reply.has_error() and protocol.read_refusal(reply.content) is None, reply
pickle.dump(saved, open(path, "wb"))
loaded = [m for m in ("scipy", "dp_accounting", "torch", "transformers") if m in sys.modules]
print(json.dumps({"flower_import_s": c1 - c0, "app_import_s": c2 - c1, "handler_s": c4 - c3, "loaded": loaded}))
"""


def set_up(work: Path, labels: str, dim: int) -> Path:
    """A device of simulations.benchmarks.device_costs (with ``labels`` in both the run and the policy), set up; its saved context."""
    import ldpfed.simulations.benchmarks.device_costs.device as costs
    from ldpfed.clients.app import FLOWER
    from ldpfed.fed import protocol

    device = costs.make_device(work, "device", costs.DEFAULT_DATA, costs.DEFAULT_PUBLIC, dim, labels=labels)
    request = FLOWER(protocol.release_request([0], device.plan.train.params(), 1, device.plan.train_sampling.spec))
    path = work / "context.pkl"
    path.write_bytes(pickle.dumps({"context": device.grid.node_ctx[costs.NODE_ID], "request": request}))
    return path


def copy_device(work: Path, copy: Path) -> Path:
    """A copy of the device in ``work`` (state, policy, caches), its context naming the copy's folders."""
    shutil.copytree(work, copy, symlinks=True)
    path = copy / "context.pkl"
    saved = pickle.loads(path.read_bytes())
    config = saved["context"].node_config
    for key in ("state-dir", "policy", "cache-dir"):
        config[key] = config[key].replace(str(work), str(copy))
    path.write_bytes(pickle.dumps(saved))
    return path


def serve(repo: Path, context: Path) -> dict[str, Any]:
    """One train message in a new interpreter on ``repo``'s code; its CPU seconds and heavy modules loaded."""
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(context)], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True, text=True, timeout=900,
    )
    if done.returncode:
        raise RuntimeError(f"the message failed on {repo}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.message_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, action="append", required=True, help="a source tree to serve with (repeatable)")
    parser.add_argument("--messages", type=int, default=6, help="train messages per tree (one record each)")
    parser.add_argument("--labels", default="public", help="the run's and the policy's labels: public or rr:<epsilon>")
    parser.add_argument("--dim", type=int, default=16, help="the run's --dim (0: all 384 dimensions)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ldpfed-message-cpu-") as temp:
        work = Path(temp)
        set_up(work / "device", args.labels, args.dim)
        contexts = [copy_device(work / "device", work / f"tree-{i}") for i in range(len(args.repo))]
        runs: list[list[dict[str, Any]]] = [[] for _ in args.repo]
        for _ in range(args.messages):
            for i, repo in enumerate(args.repo):
                runs[i].append(serve(repo.resolve(), contexts[i]))
    results = {"command": "python -m ldpfed.simulations.benchmarks.message_cpu " + " ".join(argv if argv is not None else sys.argv[1:]), "trees": []}
    for repo, messages in zip(args.repo, runs):
        git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        median = {k: float(np.median([m[k] for m in messages])) for k in ("flower_import_s", "app_import_s", "handler_s")}
        results["trees"].append({"repo": str(repo), "git": git, "messages": messages, "median": median})
        print(f"{repo} ({git}): median CPU s per train message: Flower's imports {median['flower_import_s']:.2f}, "
              f"app import {median['app_import_s']:.2f}, handler {median['handler_s']:.2f}; "
              f"handlers {[round(m['handler_s'], 2) for m in messages]}; loaded {[m['loaded'] for m in messages]}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
