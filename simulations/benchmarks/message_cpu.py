"""CPU seconds of one train message in a fresh process, as Flower 1.42 serves each message on a device.

``flwr-clientapp`` starts a new process for every message: it imports Flower's SuperNode
modules, then the app, then serves the message. This benchmark times the three by the process's
own CPU clock (``time.process_time``), which other jobs on the machine slow far less than they
slow the wall clock, for one or several source trees side by side (``--repo``, e.g. a worktree of
main and this checkout; ``--rev``, a commit of this checkout exported with ``git archive``), messages
alternating between them. As on a device, each tree's bytecode is written once before its first
message and read by every message's process (PYTHONDONTWRITEBYTECODE dropped; the SuperNode's
``simulations.benchmarks.device_costs.supernode.device_env``); each process runs with ``python -P``
and imports ldpfed from its tree (``simulations.checkout.checkout_env``). Each tree serves its own device,
set up here alike (the device of ``simulations.benchmarks.device_costs``: ``generated:200``, MiniLM, one user,
the owner's policy; a copied state folder would be refused, its ledger being bound to its file), one record per
message, so every tree sees the same ledger history. Each tree's first message is not counted: setup ran this
checkout's code, whose stored accounting figures another tree's code does not read (fed.privacy.figure_cache).

Run::

    python -m ldpfed.simulations.benchmarks.message_cpu --repo ../main-worktree --repo . --messages 6
    python -m ldpfed.simulations.benchmarks.message_cpu --repo ../main-worktree --repo . --messages 3 --labels rr:1.0 --dim 0
    python -m ldpfed.simulations.benchmarks.message_cpu --rev 917b572 --rev HEAD --messages 5 --out parts.json
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

from ldpfed.simulations.benchmarks.device_costs.device import REPO

SERVE = """
import gc, json, pickle, sys, time
full = []
gc.callbacks.append(lambda phase, info: full.append(phase) if phase == "stop" and info["generation"] == 2 else None)
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
c3, before = time.process_time(), len(full)
reply = client_app.app(message, context)
c4 = time.process_time()
assert not reply.has_error() and protocol.read_refusal(reply.content) is None, reply
pickle.dump(saved, open(path, "wb"))
loaded = [m for m in ("scipy", "dp_accounting", "torch", "transformers") if m in sys.modules]
print(json.dumps({
    "flower_import_s": c1 - c0, "app_import_s": c2 - c1, "handler_s": c4 - c3, "loaded": loaded,
    "ldpfed_modules": sum(m.startswith("ldpfed.") for m in sys.modules), "full_collections_in_handler": len(full) - before,
}))
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


def tree_env(repo: Path, shims: Path) -> dict[str, str]:
    """The environment of ``repo``'s message processes (ldpfed from ``repo``, bytecode as on a device), its
    bytecode written once."""
    from ldpfed.simulations.benchmarks.device_costs.supernode import device_env
    from ldpfed.simulations.checkout import checkout_env

    env = device_env(checkout_env(repo, shims))
    subprocess.run([sys.executable, "-P", "-c", "import ldpfed.clients.app"], cwd=repo, env=env, check=True, timeout=300)
    return env


def export(rev: str, folder: Path) -> Path:
    """This checkout's commit ``rev`` (git archive: committed files only) in ``folder``."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def serve(repo: Path, context: Path, env: dict[str, str]) -> dict[str, Any]:
    """One train message in a new interpreter on ``repo``'s code; its CPU seconds and heavy modules loaded."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", SERVE, str(context)], cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )
    if done.returncode:
        raise RuntimeError(f"the message failed on {repo}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.message_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, action="append", default=[], help="a source tree to serve with (repeatable)")
    parser.add_argument("--rev", action="append", default=[], help="a commit of this checkout to serve with (repeatable)")
    parser.add_argument("--messages", type=int, default=6, help="train messages per tree (one record each)")
    parser.add_argument("--labels", default="public", help="the run's and the policy's labels: public or rr:<epsilon>")
    parser.add_argument("--dim", type=int, default=16, help="the run's --dim (0: all 384 dimensions)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not args.repo and not args.rev:
        parser.error("name at least one tree: --repo or --rev")
    with tempfile.TemporaryDirectory(prefix="ldpfed-message-cpu-") as temp:
        work = Path(temp)
        gits = [_git(repo) for repo in args.repo] + [_git(REPO, rev) for rev in args.rev]
        repos = [repo.resolve() for repo in args.repo] + [export(rev, work / f"rev-{i}") for i, rev in enumerate(args.rev)]
        envs = [tree_env(repo, work / f"shims-{i}") for i, repo in enumerate(repos)]
        contexts = [set_up(work / f"device-{i}", args.labels, args.dim) for i in range(len(repos))]
        for repo, context, env in zip(repos, contexts, envs):
            serve(repo, context, env)
        runs: list[list[dict[str, Any]]] = [[] for _ in repos]
        for _ in range(args.messages):
            for i, repo in enumerate(repos):
                runs[i].append({**serve(repo, contexts[i], envs[i]), "load_average": os.getloadavg()})
    results = {
        "what": "CPU seconds (time.process_time) of one train message's fresh process, as flwr-clientapp 1.42 serves it: "
        "Flower's imports, importing ldpfed.clients.app, the handler (one record); ldpfed_s is the app's import plus the handler",
        "method": f"per tree a device set up alike and one message not counted, then {args.messages} rounds of one message "
        "per tree in turn, each a fresh python -P reading bytecode written before (simulations.benchmarks.message_cpu)",
        "command": "python -m ldpfed.simulations.benchmarks.message_cpu " + " ".join(argv if argv is not None else sys.argv[1:]),
        "trees": [],
    }
    for repo, git, messages in zip([*map(str, args.repo), *args.rev], gits, runs):
        median = {k: float(np.median([m[k] for m in messages])) for k in ("flower_import_s", "app_import_s", "handler_s")}
        median["ldpfed_s"] = float(np.median([m["app_import_s"] + m["handler_s"] for m in messages]))
        mean = {"handler_s": float(np.mean([m["handler_s"] for m in messages]))}  # with the messages that load SciPy
        results["trees"].append({"repo": repo, "git": git, "messages": messages, "median": median, "mean": mean})
        print(f"{repo} ({git}): median CPU s per train message: Flower's imports {median['flower_import_s']:.2f}, "
              f"app import {median['app_import_s']:.3f}, handler {median['handler_s']:.3f}, both {median['ldpfed_s']:.3f}; "
              f"handlers {[round(m['handler_s'], 2) for m in messages]}; loaded {[m['loaded'] for m in messages]}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _git(repo: Path, rev: str = "HEAD") -> str:
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=repo, capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
