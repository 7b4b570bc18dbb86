"""Epsilon against steps for every accountant (seed 000 Fig. 3 analogue), as PNG, CSV and markdown.

Rerun with ``python -m simulations.composition_plot`` (defaults: z = 1, p = 0.01, T = 1..10,000,
delta = 1e-5, output in runs/reports/).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fed.privacy.accountants import AccountantFigure, Schedule, figures_over_steps

Curves = dict[str, list[AccountantFigure]]
PRV_BAND = ("prv_lower", "prv_upper")


def step_grid(max_steps: int, points: int = 25) -> list[int]:
    """About ``points`` distinct integers log-spaced from 1 to ``max_steps``."""
    return sorted({int(round(x)) for x in np.geomspace(1, max_steps, points)})


def plot_curves(curves: Curves, steps: Sequence[int], path: str | Path, title: str) -> Path:
    """One line per accountant (PRV lower/upper as a band), log-x and log-y."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    for key, figs in curves.items():
        if key in PRV_BAND:
            continue
        xs, ys = _available(steps, figs)
        if xs:
            style = "--" if figs[0].kind == "estimate" else "-"
            width = 4.0 if key == "pld" else 1.5  # PLD and the PRV estimate coincide; keep both visible
            ax.plot(xs, ys, style, lw=width, marker=".", label=f"{figs[0].name} [{figs[0].kind}]")
    if all(k in curves for k in PRV_BAND):
        xs, low = _available(steps, curves["prv_lower"])
        _, high = _available(steps, curves["prv_upper"])
        if xs:
            ax.fill_between(xs, low, high, alpha=0.3, label="PRV accountant, lower to upper")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps T")
    ax.set_ylabel("epsilon")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_schedule(schedule: Schedule, path: str | Path, points: int = 25) -> Path:
    """Plot every accountant for ``schedule`` run for 1..T steps."""
    steps = step_grid(schedule.steps, points)
    return plot_curves(figures_over_steps(schedule, steps), steps, path, _title(schedule))


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
    png = plot_curves(curves, steps, args.out / "composition_plot.png", _title(schedule))
    write_tables(curves, steps, args.out / "composition_plot.csv", args.out / "composition_plot.md")
    print(f"wrote {png}, {args.out / 'composition_plot.csv'}, {args.out / 'composition_plot.md'}")
    return 0


def _available(steps: Sequence[int], figs: list[AccountantFigure]) -> tuple[list[int], list[float]]:
    pairs = [(t, f.epsilon) for t, f in zip(steps, figs, strict=True) if f.epsilon is not None and f.epsilon > 0]
    return [t for t, _ in pairs], [e for _, e in pairs]


def _title(schedule: Schedule) -> str:
    s = schedule
    return (
        f"epsilon vs steps: z = {s.noise_multiplier:g}, p = {s.p:g}, q = {s.q:g}, delta = {s.delta:g}\n"
        "amplified figures assume the server cannot link a report to its record; CLT is an estimate"
    )


if __name__ == "__main__":
    raise SystemExit(main())
