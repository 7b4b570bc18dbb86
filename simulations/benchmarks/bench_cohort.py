"""What one node's scale mode costs, without Flower: registered users, users served per step, memory.

``python -m ldpfed.simulations.benchmarks.bench_cohort --registered 1000000 --per-round 10000`` builds the node
side of a run with that many registered users (split over ``--nodes`` nodes as a simulation
splits them, served one after the other in this process), with synthetic clean records (no
encoder: the point is the node's arrays, ledger store and noise), and serves ``--rounds``
training steps of ``--per-round`` users sampled at random, through the same NodeHost and
SQLite ledger store as a run. It prints the build time, seconds per round (ledger and noise
apart), user-rounds/s on one core and the peak resident memory of this process.
"""

from __future__ import annotations

import argparse
import math
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ldpfed.fed.runtime.cohort import Cohort
from ldpfed.fed.device.entropy import simulation_engine
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.runtime.user import UserRecords


def _records(users: list[int], per_user: int, dim: int, rng: np.random.Generator) -> dict[int, UserRecords]:
    """Synthetic clean records: ``per_user`` training rows of ``dim`` per user, no queries."""
    x = rng.standard_normal((len(users) * per_user, dim)).astype(np.float32)
    labels = rng.integers(0, 2, len(users) * per_user)
    empty = np.zeros((0, dim), np.float32)
    return {
        u: UserRecords(
            x[i * per_user : (i + 1) * per_user],
            labels[i * per_user : (i + 1) * per_user],
            empty,
            np.zeros(0, np.int64),
            np.array([f"{u}-{j}" for j in range(per_user)], dtype=object),
        )
        for i, u in enumerate(users)
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(prog="python -m ldpfed.simulations.benchmarks.bench_cohort", description=__doc__.splitlines()[0])
    parser.add_argument("--registered", type=int, default=1_000_000, help="users registered in the federation")
    parser.add_argument("--per-round", type=int, default=10_000, help="users sampled per round")
    parser.add_argument("--records", type=int, default=4, help="training records per user")
    parser.add_argument("--release", type=int, default=1, help="records each sampled user releases per round")
    parser.add_argument("--dim", type=int, default=16, help="dimension of a record")
    parser.add_argument("--nodes", type=int, default=2, help="Flower nodes the users are split over")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--send-reports", action="store_true", help="reply with the reports (as with --save-reports) instead of their sums"
    )
    args = parser.parse_args(argv)
    for name in ("registered", "per_round", "records", "release", "dim", "nodes", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.per_round > args.registered:
        parser.error("--per-round cannot exceed --registered")
    rng = np.random.default_rng(args.seed)
    randomizer = GaussianRandomizer(1.0, 2.0)
    plan = PrivacyPlan(randomizer, randomizer, PublicLabels(2), Budget(1e6, 1e-5))
    policy = DevicePolicy(1e6, math.inf, 1e-5, mechanisms=("gaussian",), labels="public", memoize=False)
    started = time.perf_counter()
    hosts = []
    with tempfile.TemporaryDirectory(prefix="bench-cohort-") as folder:
        for node in tqdm(range(args.nodes), desc="build nodes"):
            users = list(range(node, args.registered, args.nodes))
            records = _records(users, args.records, args.dim, rng)
            owner = lambda uid: f"user-{uid}"  # noqa: E731  (a simulated user owns its spending)
            cohort = Cohort.build(records, owner)
            store = LedgerStore(Path(folder) / f"node-{node}.sqlite", durable=False)
            hosts.append(NodeHost(records, plan, policy, store, owner, args.seed, simulation=True, cohort=cohort))
        built = time.perf_counter() - started
        params = '{"mechanism": "gaussian", "clip": 1.0, "sigma": 2.0}'
        rows = []
        with simulation_engine():
            for _ in tqdm(range(args.rounds), desc="rounds"):
                sampled = np.sort(rng.choice(args.registered, args.per_round, replace=False))
                tick = time.perf_counter()
                served = ledger = 0.0
                for node, host in enumerate(hosts):
                    mine = sampled[sampled % args.nodes == node].tolist()
                    request = {"users": mine, "randomizer": params, "records": args.release, "sampling": "all"}
                    request["summarise"] = not args.send_reports  # as the simulation engine asks
                    reply = host.release("train", request)
                    served += len(reply.ledgers) - len(reply.refusals)
                    ledger += reply.ledger_seconds
                rows.append((time.perf_counter() - tick, ledger, served))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steady = rows[1:] or rows
    seconds = sum(r[0] for r in steady)
    served = sum(r[2] for r in steady)
    print(f"registered users {args.registered:,} on {args.nodes} nodes, {args.records} records of {args.dim} dims each")
    print(f"build (records stacked, ledgers created): {built:.1f} s")
    print("| round | seconds | ledger s | users served | user-rounds/s (one core) |")
    print("|---|---|---|---|---|")
    for i, (total, ledger_s, n) in enumerate(rows, 1):
        print(f"| {i} | {total:.3f} | {ledger_s:.3f} | {n:,.0f} | {n / total:,.0f} |")
    print(f"steady rounds (2..): {served / seconds:,.0f} user-rounds/s on one core; peak RSS {peak:,.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
