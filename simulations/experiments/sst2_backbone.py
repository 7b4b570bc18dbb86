"""Issue-2 figures: SST-2, 200 users, dirichlet:0.5, MiniLM, public labels, each training record
released once, local inference on the dev set, at several worst-case sentence-level epsilons.

Every row is a real `ldpfed simulate` run (Flower + Ray); the table is written to
<out>/table.md and printed. Rerun: python -m ldpfed.simulations.experiments.sst2_backbone
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def main() -> None:
    """Run the sweep and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(SHARED / "sst2"))
    parser.add_argument("--public", default=str(SHARED / "sentiment_labelled_sentences"))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[8.0, 3.0, 1.0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--dim", type=int, default=0)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--shrinkage", type=float, default=-1.0)
    parser.add_argument("--train-limit", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cache-dir", default="")
    parser.add_argument("--out", default="runs/reports/sst2_backbone")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for epsilon in args.epsilons:
        run_dir = out / f"eps{epsilon:g}"
        command = [
            sys.executable, "-m", "ldpfed.simulations.cli", "simulate", "--quiet",
            f"--data={args.data}", f"--public={args.public}", f"--users={args.users}",
            "--partition=dirichlet:0.5", "--encoder=minilm", f"--dim={args.dim}", f"--clip={args.clip}",
            f"--epsilon={epsilon}", "--delta=1e-5", "--labels=public", f"--rounds={args.rounds}",
            f"--users-per-round={-(-args.users // args.rounds)}", "--records-per-user-round=0",
            "--releases-per-record=1", "--inference=local", f"--nodes={args.nodes}",
            f"--shrinkage={args.shrinkage}", f"--train-limit={args.train_limit}", f"--out={run_dir}",
        ] + ([f"--cache-dir={args.cache_dir}"] if args.cache_dir else [])
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"run at epsilon {epsilon} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        summary = json.loads((run_dir / "summary.json").read_text())
        rows.append((epsilon, summary, wall))
        print(f"epsilon {epsilon:g}: accuracy {summary['accuracy_local']:.4f} in {wall:.0f}s", flush=True)
    table = _table(rows, args)
    (out / "table.md").write_text(table)
    print(table)


def _table(rows: list[tuple[float, dict, float]], args: argparse.Namespace) -> str:
    lines = [
        f"SST-2 ({args.data}), {args.users} users, dirichlet:0.5, MiniLM"
        f"{f' projected to {args.dim} dims' if args.dim else ''}, clip {args.clip}, public labels, "
        "each training record released once, local inference on the dev set, delta 1e-5.",
        "",
        "| target epsilon | sigma | worst-case sentence epsilon (max / median over users) | user-level epsilon (max) "
        "| accuracy (private reports) | non-private upper bound (simulation only) | public-only baseline | releases | wall time (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for epsilon, s, wall in rows:
        lines.append(
            f"| {epsilon:g} | {s['sigma_train']:.3f} | {s['epsilon_sentence_max']:.3f} / {s['epsilon_sentence_median']:.3f} "
            f"| {s['epsilon_user_max']:.1f} | {s['accuracy_local']:.4f} | {s['accuracy_nonprivate']:.4f} "
            f"| {s['accuracy_public_only']:.4f} | {s['releases']} | {wall:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
