"""``python -m ldpfed.simulations.benchmarks.plain_flower``: run the trivial app on N simulated nodes, R rounds."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from ldpfed.simulations.flower_runner import cluster, run_status, start_run
from ldpfed.simulations.benchmarks.plain_flower import APP_DIR


def federation_config(nodes: int, cpus_per_client: float = 1.0) -> str:
    """The federation options ``ldpfed simulate`` gives Flower's Ray backend, for ``nodes`` nodes."""
    cpus = int(cpus_per_client) if float(cpus_per_client).is_integer() else cpus_per_client
    return (
        f"num-supernodes={nodes} client-resources-num-cpus={cpus} "
        f"init-args-num-cpus={os.cpu_count() or 1} init-args-logging-level='error'"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the plain app and wait; exit 1 unless Flower reports the run completed."""
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.plain_flower", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2, help="simulated nodes (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--dim", type=int, default=16, help="length of each node's reply array (default 16)")
    parser.add_argument("--out", type=Path, required=True, help="folder of metrics.jsonl and flower.log")
    parser.add_argument("--cpus-per-client", type=float, default=1.0, help="CPUs Ray reserves per ClientApp")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.rounds < 1 or args.dim < 1:
        parser.error("--nodes, --rounds and --dim must be at least 1")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "flower.log"
    run_config = {"nodes": args.nodes, "rounds": args.rounds, "dim": args.dim, "out": str(out)}
    metrics = out / "metrics.jsonl"
    with tempfile.TemporaryDirectory(prefix="plain-flwr-") as work, cluster(Path(work), simulation=True) as running:
        process = start_run(running, run_config, federation_config(args.nodes, args.cpus_per_client), log, app=str(APP_DIR))
        done = 0
        while process.poll() is None:
            rounds = len(metrics.read_text().splitlines()) if metrics.is_file() else 0
            if rounds > done:
                done = rounds
                print(f"plain Flower, {args.nodes} nodes: round {done}/{args.rounds}", flush=True)
            time.sleep(0.5)
        status = run_status(running, log)
    if status != "finished:completed":
        print(f"plain Flower run ended with status {status!r}; see {log}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
