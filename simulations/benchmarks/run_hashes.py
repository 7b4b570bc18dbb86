"""Hashes of a fixed set of small seeded runs: the check that a refactor changed no result (issue 27).

Each run's ledgers (every entry of every user) and per-round metrics are canonicalised and hashed
with SHA-256; one combined hash covers all runs. Canonical form:

- JSON with sorted keys and no whitespace;
- dropped: wall-clock figures (any key named ``seconds``, ``elapsed``, ``duration``, ``timestamp``,
  ``started``, ``finished`` or ending in ``_seconds``), the Ray host map (``users_by_host``, ``host``)
  and file paths (the run folder is replaced by ``<out>``);
- every float rounded to 10 significant digits (``float(f"{x:.10g}")``), so that a reordered sum
  that moves the last bits still hashes the same while any real change does not; so is every
  number with 10 or more decimals written inside a text (a refusal's reason);
- on the device node, whose record ids are keyed by the device's own secret (a new one per state
  folder), ledger columns are replaced by their number and per-record counts sorted; its Gaussian
  reports are drawn from OS entropy (never seeded on a device), so only their shape, the released
  labels, the refusals and the ledger are hashed.

The runs (generated corpus, 8 users, no projection; about 3 minutes on one free core):

- ``cohort``: scale mode (2 nodes host 8 users), 2 rounds, 2 releases per record;
- ``per_user``: one user per node (4 nodes, 4 users);
- ``amplified``: ``--enforce amplified`` with Poisson sampling, which the per-user path serves;
- ``tiers_rr``: two privacy tiers and randomized-response labels;
- ``poisson`` and ``fixed``: seed 000's training sub-sampling (Poisson and fixed-size);
- ``remote``: remote inference with up-sampled queries;
- ``device``: one device node (its own state folder and policy file), a release, an empty one, a refusal.

Usage, from the repository root (the code under test is the one on ``PYTHONPATH``)::

    PYTHONPATH=$PWD python simulations/benchmarks/run_hashes.py --out hashes.json

The script finds the code it drives by the name of each function it needs (see :func:`_locate`),
so it runs unchanged before and after fed/ is split into packages.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMON: dict[str, Any] = {
    "data": "generated:300", "public": "none", "dim": 0, "clip": 3.0, "users": 8, "nodes": 2, "seed": 3,
    "nonprivate-baseline": False,
}
"""Options every run shares; the clip is given (3, the default until the Gaussian's became 1) so that hashes
stay comparable across that change of default."""
RUNS: dict[str, dict[str, Any]] = {
    "cohort": {"rounds": 2, "releases-per-record": 2},
    "per_user": {"users": 4, "nodes": 4, "rounds": 2, "releases-per-record": 2},
    "amplified": {"enforce": "amplified", "sampling": "poisson:0.5", "rounds": 2, "epsilon": 4.0},
    "tiers_rr": {"tiers": "0.5:1,0.5:8", "labels": "rr:1.0", "rounds": 1},
    "poisson": {"sampling": "poisson:0.5", "rounds": 2},
    "fixed": {"sampling": "fixed:5", "rounds": 2, "users-per-round": 4},
    "remote": {"inference": "remote", "upsampling-q": 0.5, "p-query": 0.5, "answers": 2, "rounds": 1},
}
DROPPED = {"seconds", "elapsed", "duration", "timestamp", "started", "finished", "users_by_host", "host"}
LONG_FLOAT = re.compile(r"\d+\.\d{10,}(?:e[-+]?\d+)?")
DEVICE_TRAIN, DEVICE_DEV = 24, 8


def _locate(name: str) -> Any:
    """The top-level function or class ``name``, from whichever module of the checkout's packages
    (the folders of the working directory with an ``__init__.py``, tests aside) defines it."""
    pattern = re.compile(rf"^(?:def|class) {re.escape(name)}\b", re.MULTILINE)
    found = []
    packages = sorted(p.parent for p in Path().glob("*/__init__.py") if p.parent.name != "tests")
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            if pattern.search(path.read_text()):
                found.append(".".join(path.with_suffix("").parts).removesuffix(".__init__"))
    if len(found) != 1:
        raise LookupError(f"{name}: defined in {found or 'no module'} (need exactly one)")
    return getattr(importlib.import_module(found[0]), name)


def canonical(value: Any, out: str = "") -> Any:
    """``value`` with wall-clock keys dropped, floats rounded to 10 significant digits, ``out`` masked."""
    if isinstance(value, dict):
        return {
            str(k): canonical(v, out) for k, v in value.items()
            if str(k) not in DROPPED and not str(k).endswith("_seconds")
        }
    if isinstance(value, (list, tuple)):
        return [canonical(v, out) for v in value]
    if isinstance(value, float):
        return value if not math.isfinite(value) else float(f"{value:.10g}")
    if isinstance(value, str):  # a number in a text (a refusal's reason) is rounded too
        value = LONG_FLOAT.sub(lambda m: f"{float(m.group()):.10g}", value)
        return value.replace(out, "<out>") if out else value
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return canonical(value.tolist(), out)
    return value


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value`` (already canonicalised)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def run_directory_hash(directory: str | Path) -> str:
    """The hash of a finished run directory's results, as :func:`simulated` hashes a run: its ledgers and per-round
    metrics, canonical (the run folder masked), so that the same run written to two folders hashes the same."""
    out = Path(directory)
    ledgers = json.loads((out / "ledgers.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return digest(canonical({"ledgers": ledgers, "metrics": metrics}, str(out)))


def summary_hash(directory: str | Path) -> str:
    """The hash of a run directory's summary.json, canonical (wall-clock figures dropped, the run folder masked)."""
    out = Path(directory)
    return digest(canonical(json.loads((out / "summary.json").read_text()), str(out)))


def simulated(name: str, root: Path) -> Any:
    """Run ``name`` on the in-process grid (the real ServerApp and ClientApp); its ledgers and metrics."""
    run_local = _locate("run_local")
    client_app = importlib.import_module("ldpfed.clients.app").app
    server_app = importlib.import_module("ldpfed.strategies.app").app
    out = str(root / name)
    values = {**COMMON, **RUNS[name], "out": out}
    run_local(server_app, client_app, int(values["nodes"]), values)
    ledgers = json.loads((Path(out) / "ledgers.json").read_text())
    metrics = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return canonical({"ledgers": ledgers, "metrics": metrics}, out)


def _review_folder(folder: Path) -> Path:
    """A small two-class folder dataset with its labels.txt, the same on every call."""
    words = (("dull", "bad", "boring"), ("great", "fine", "lovely"))
    folder.mkdir(parents=True)
    for split, n in (("train", DEVICE_TRAIN), ("dev", DEVICE_DEV)):
        rows = ["sentence\tlabel"] + [f"record {i} the {split} film was {words[i % 2][i % 3]} indeed\t{i % 2}" for i in range(n)]
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (folder / "labels.txt").write_text("0\tbad\n1\tgood\n")  # a device's label set comes from its schema (or its policy)
    return folder


def device(root: Path) -> Any:
    """One device node (engine off, as ``flower-supernode --node-config`` runs it): a training release
    the owner's policy allows, the same request again (its budget leaves nothing to release), and
    one with a quarter of the noise, which the policy refuses."""
    from flwr.app import Message

    LocalGrid = _locate("LocalGrid")
    init_device = _locate("init_device")
    pack = _locate("pack")
    calibrate = _locate("calibrate_gaussian_sigma")
    owner_ledgers = _locate("owner_ledgers")
    setup_request, release_request = _locate("setup_request"), _locate("release_request")
    read_refusal, read_release_reply = _locate("read_refusal"), _locate("read_release_reply")
    types = sys.modules[setup_request.__module__]  # SETUP and TRAIN stand beside setup_request
    client_module = importlib.import_module("ldpfed.clients.app")
    client_app = client_module.app
    flower = getattr(client_module, "FLOWER", lambda content: content)  # before fed.protocol, builders made Flower content

    data = _review_folder(root / "device-data")
    files = init_device(root / "device")
    files.policy.write_text('epsilon_sentence = 3.0\nepsilon_user = inf\nlabels = "public"\nmemoize = false\n')
    bundle_folder = root / "bundle"
    bundle_folder.mkdir()
    (bundle_folder / "encoder.txt").write_text("minilm")
    run = {"data": "generated:400", "public": "none", "dim": 0, "clip": 1.0, "users": 1, "nodes": 1, "rounds": 1, "epsilon": 3.0}
    node = {"data": str(data), "state-dir": str(files.state), "policy": str(files.policy)}
    grid = LocalGrid(client_app, 1, run, engine=False, node_configs=[node])
    node_id = next(iter(grid.node_ctx))

    def send(kind: str, content: Any) -> Any:
        (reply,) = grid.send_and_receive([Message(flower(content), dst_node_id=node_id, message_type=kind)])
        if reply.has_error():
            raise RuntimeError(f"device node failed: {reply.error.reason}")
        return reply.content

    steps: list[Any] = [read_refusal(send(types.SETUP, setup_request(pack(bundle_folder))))]
    sigma = calibrate(3.0, 1e-5, 1, 2.0)
    requests = [  # served; served again with nothing left to release; beyond the policy's floor: refused
        release_request([0], {"mechanism": "gaussian", "clip": 1.0, "sigma": s}, 0, "all")
        for s in (sigma, sigma, sigma / 4)
    ]
    for request in requests:
        content = send(types.TRAIN, request)
        refused = read_refusal(content)
        if refused is not None:
            steps.append({"refused": list(refused)})
            continue
        reply = read_release_reply(content)
        steps.append({"reports": list(reply.reports.shape), "labels": reply.labels, "label_channel": reply.label_channel,
                      "randomizer": reply.randomizer})
    ledgers = {}
    for user, ledger in owner_ledgers(grid.node_ctx[node_id]).items():
        entry = ledger.to_json()
        entry["columns"] = len(entry.get("columns", []))  # the device's secret record ids: their number only
        for event in entry.get("events", []):
            event["counts_per_record"] = sorted(event.get("counts_per_record", []))
        ledgers[str(user)] = entry
    return canonical({"steps": steps, "ledgers": ledgers}, str(root))


def main(argv: list[str] | None = None) -> int:
    """Run every case, print one hash per run and the combined hash, write them as JSON with --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the hashes here as JSON")
    parser.add_argument("--only", nargs="+", choices=[*RUNS, "device"], help="these runs only (no combined hash)")
    parser.add_argument("--keep", type=Path, help="also write each run's canonical JSON into this folder (to diff)")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    if not Path("fed").is_dir():
        parser.error("run from the repository root (with PYTHONPATH=$PWD)")
    _locate("limit_blas_threads")()
    names = args.only or [*RUNS, "device"]
    hashes: dict[str, str] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="run-hashes-") as work:
        for name in names:
            value = device(Path(work) / "device-run") if name == "device" else simulated(name, Path(work))
            hashes[name] = digest(value)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{name}.json").write_text(json.dumps(value, sort_keys=True, indent=1))
            print(f"{name:10s} {hashes[name]}", flush=True)
    result: dict[str, Any] = {"runs": hashes}
    if not args.only:
        result["combined"] = digest(hashes)
        print(f"{'combined':10s} {result['combined']}")
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
