"""Epsilon against steps for every accountant (seed 000 Fig. 3 analogue), as PNG, CSV and markdown.

Rerun with ``python -m ldpfed.simulations.experiments.composition_plot`` (defaults: z = 1, p = 0.01, T = 1..10,000,
delta = 1e-5, output in runs/reports/).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

from ldpfed.fed.privacy.accountants import AccountantFigure, Schedule, figures_over_steps
from ldpfed.simulations.commands.privacy import plot_curves, schedule_title, step_grid

Curves = dict[str, list[AccountantFigure]]


def write_tables(curves: Curves, steps: Sequence[int], csv_path: Path, md_path: Path) -> None:
    """Long-form CSV (one row per accountant and T) and a wide markdown table (T per row)."""
    with open(csv_path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["key", "name", "kind", "steps", "epsilon", "delta", "unavailable"])
        for key, figs in curves.items():
            for t, f in zip(steps, figs, strict=True):
                writer.writerow(
                    [key, f.name, f.kind, t, "" if f.epsilon is None else f.epsilon, f.delta, f.unavailable or ""]
                )
    keys = list(curves)
    lines = [
        "| T | " + " | ".join(f"{curves[k][0].name} [{curves[k][0].kind}]" for k in keys) + " |",
        "|---" * (len(keys) + 1) + "|",
    ]
    for i, t in enumerate(steps):
        cells = ["n/a" if curves[k][i].epsilon is None else f"{curves[k][i].epsilon:.4g}" for k in keys]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    md_path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Write composition_plot.{png,csv,md} for the given schedule."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--p", type=float, default=0.01)
    parser.add_argument("--q", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, default=10_000)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--points", type=int, default=25)
    parser.add_argument("--out", type=Path, default=Path("runs/reports"))
    args = parser.parse_args(argv)
    schedule = Schedule(args.noise_multiplier, args.p, args.max_steps, args.delta, q=args.q)
    steps = step_grid(args.max_steps, args.points)
    curves = figures_over_steps(schedule, steps)
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot_curves(curves, steps, args.out / "composition_plot.png", schedule_title(schedule))
    write_tables(curves, steps, args.out / "composition_plot.csv", args.out / "composition_plot.md")
    print(f"wrote {png}, {args.out / 'composition_plot.csv'}, {args.out / 'composition_plot.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
