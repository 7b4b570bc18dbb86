"""``ldpfed privacy``: every accountant's epsilon for a Gaussian schedule, side by side (ldpfed.privacy)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ldpfed.fed.privacy.accountants import AccountantFigure, Schedule

PRV_BAND = ("prv_lower", "prv_upper")
"""The curves drawn as one band: the PRV accountant's lower and upper bounds."""
HELP = "Epsilon of a Gaussian schedule under every accountant (worst-case ledger, CLT, PLD, RDP, PRV, baselines)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Mechanism parameters, schedule (p, q, T, delta) and output options."""
    parser.add_argument(
        "--mechanism", choices=["gaussian"], default="gaussian", help="the randomizer (default gaussian)"
    )
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("--noise-multiplier", type=float, help="sigma / sensitivity")
    noise.add_argument("--sigma", type=float, help="Gaussian noise scale (with --sensitivity)")
    parser.add_argument("--sensitivity", type=float, help="replace-one L2 diameter of the input domain (2C for clip C)")
    parser.add_argument("--p", type=float, required=True, help="sampling rate per step")
    parser.add_argument("--q", type=float, default=1.0, help="inference true-data rate (seed 000 eq. 9; default 1)")
    parser.add_argument("--steps", type=int, required=True, help="number of steps T")
    parser.add_argument("--delta", type=float, default=1e-5, help="delta of every figure (default 1e-5)")
    parser.add_argument("--releases", type=int, help="the record's actual number of releases (worst-case ledger)")
    parser.add_argument("--dataset-size", type=int, help="n, for fixed-size sampling without replacement figures")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--plot", metavar="PATH", help="write epsilon against steps (1..T) for every accountant")
    parser.add_argument(
        "--calibrate",
        type=float,
        metavar="EPSILON",
        help="print the noise multiplier per step meeting EPSILON under each accountant",
    )


def run(args: argparse.Namespace) -> int:
    """Compute (ldpfed.privacy), print and optionally plot and calibrate."""
    import ldpfed

    result = ldpfed.privacy(
        p=args.p, steps=args.steps, noise_multiplier=args.noise_multiplier, sigma=args.sigma, sensitivity=args.sensitivity,
        q=args.q, delta=args.delta, releases=args.releases, dataset_size=args.dataset_size, calibrate=args.calibrate,
        plot=args.plot, mechanism=args.mechanism,
    )
    output = result.to_json()
    if args.json:
        print(json.dumps(output, indent=2))
    else:
        _print_tables(output)
    return 0


def step_grid(max_steps: int, points: int = 25) -> list[int]:
    """About ``points`` distinct integers log-spaced from 1 to ``max_steps``."""
    import numpy as np

    return sorted({int(round(x)) for x in np.geomspace(1, max_steps, points)})


def plot_curves(curves: dict[str, list[AccountantFigure]], steps: Sequence[int], path: str | Path, title: str) -> Path:
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
    from ldpfed.fed.privacy.accountants import figures_over_steps

    steps = step_grid(schedule.steps, points)
    return plot_curves(figures_over_steps(schedule, steps), steps, path, schedule_title(schedule))


def _print_tables(output: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from ldpfed.fed.privacy.accountants.base import SHORT_ASSUMPTION

    console = Console()
    if "figures" in output:
        s = output["schedule"]
        table = Table(
            title=f"{output['mechanism']}: z = {s['noise_multiplier']:g}, p = {s['p']:g}, q = {s['q']:g}, "
            f"T = {s['steps']}, delta = {s['delta']:g}",
            show_lines=True,
        )
        for column in ("accountant", "kind", "epsilon", "assumption", "note"):
            table.add_column(column, overflow="fold")
        for f in output["figures"]:
            value = f"unavailable: {f['unavailable']}" if f["unavailable"] else _fmt(f["epsilon"])
            name = f"{f['name']}\n[dim]{f['version']}[/dim]"
            table.add_row(name, f["kind"], value, SHORT_ASSUMPTION[f["assumption"]], f["note"])
        console.print(table)
        for long in dict.fromkeys(f["assumption"] for f in output["figures"]):
            console.print(f"[bold]{SHORT_ASSUMPTION[long]}[/bold]: {long}")
    if "calibration" in output:
        table = Table(title="noise multiplier per step for the total budget")
        for column in ("accountant", "noise multiplier", "sigma", "epsilon recomputed", "target", "k"):
            table.add_column(column)
        for c in output["calibration"]:
            table.add_row(
                c["accountant"],
                f"{c['noise_multiplier']:.6g}",
                _fmt(c.get("sigma")),
                f"{c['epsilon']:.6g}",
                f"{c['target_epsilon']:g}",
                "" if c["releases"] is None else str(c["releases"]),
            )
        console.print(table)
        console.print("clt is an approximation, not a bound; only the worst-case ledger is enforced by default.")
    if "plot" in output:
        console.print(f"plot written to {output['plot']}")


def _fmt(value: float | str | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else f"{value:.4g}"


def _available(steps: Sequence[int], figs: list[AccountantFigure]) -> tuple[list[int], list[float]]:
    pairs = [(t, f.epsilon) for t, f in zip(steps, figs, strict=True) if f.epsilon is not None and f.epsilon > 0]
    return [t for t, _ in pairs], [e for _, e in pairs]


def schedule_title(schedule: Schedule) -> str:
    """The plot's title: the schedule, and what its amplified and CLT figures assume."""
    s = schedule
    return (
        f"epsilon vs steps: z = {s.noise_multiplier:g}, p = {s.p:g}, q = {s.q:g}, delta = {s.delta:g}\n"
        "amplified figures assume the server cannot link a report to its record; CLT is an estimate"
    )
