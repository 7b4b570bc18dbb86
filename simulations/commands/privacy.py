"""``ldpfed privacy``: every accountant's epsilon for a Gaussian schedule, side by side."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

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
    """Compute, print and optionally plot and calibrate."""
    from fed.privacy.accountants import Schedule, all_figures
    from fed.privacy.accountants.calibration import ACCOUNTANTS, calibrate_noise_multiplier

    noise_multiplier = _noise_multiplier(args)
    output: dict[str, Any] = {"mechanism": args.mechanism}
    if noise_multiplier is not None:
        schedule = Schedule(
            noise_multiplier,
            args.p,
            args.steps,
            args.delta,
            q=args.q,
            releases=args.releases,
            dataset_size=args.dataset_size,
        )
        output["schedule"] = {**schedule.to_json(), "sigma": args.sigma, "sensitivity": args.sensitivity}
        output["figures"] = [f.to_json() for f in all_figures(schedule)]
    elif args.calibrate is None:
        raise ValueError("give --noise-multiplier, or --sigma with --sensitivity, or --calibrate EPSILON")
    if args.calibrate is not None:
        output["calibration"] = [
            calibrate_noise_multiplier(
                name, args.calibrate, args.delta, args.steps, args.p, args.q, args.releases
            ).to_json()
            for name in ACCOUNTANTS
        ]
        if args.sensitivity is not None:
            for entry in output["calibration"]:
                entry["sigma"] = entry["noise_multiplier"] * args.sensitivity
    if args.plot:
        if noise_multiplier is None:
            raise ValueError("--plot needs --noise-multiplier or --sigma")
        from simulations.composition_plot import plot_schedule

        output["plot"] = str(plot_schedule(schedule, args.plot))
    if args.json:
        print(json.dumps(output, indent=2))
    else:
        _print_tables(output)
    return 0


def _noise_multiplier(args: argparse.Namespace) -> float | None:
    if args.sigma is None:
        if args.sensitivity is not None and args.noise_multiplier is not None:
            raise ValueError("--sensitivity goes with --sigma, not --noise-multiplier")
        return args.noise_multiplier
    if args.sensitivity is None:
        raise ValueError("--sigma needs --sensitivity (the replace-one diameter, 2C for clip C)")
    if not (math.isfinite(args.sensitivity) and args.sensitivity > 0):
        raise ValueError(f"--sensitivity must be a positive finite number, got {args.sensitivity!r}")
    return args.sigma / args.sensitivity


def _print_tables(output: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from fed.privacy.accountants.base import SHORT_ASSUMPTION

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
