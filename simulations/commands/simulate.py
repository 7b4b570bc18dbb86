"""``ldpfed simulate``: run the Flower app as a Ray simulation on a private SuperLink, with progress (ldpfed.simulate)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ldpfed.fed.configuration.run_spec import options

if TYPE_CHECKING:
    from ldpfed import Run


HELP = "run a federated simulation of LDP users (Flower + Ray) and write a run directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per run option (fed.configuration.run_spec.options), with its default."""
    for option in options():
        if option.kind is bool:
            parser.add_argument(option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
        else:
            parser.add_argument(
                option.flag, type=option.parse or option.kind, default=None, help=f"{option.help} (default: {option.to_config(option.default)!r})"
            )
    parser.add_argument(
        "--cpus-per-client", type=int, default=1, help="CPUs Ray reserves per ClientApp (whole CPUs: Flower takes no fractions)"
    )
    parser.add_argument(
        "--ray-address", default=None, metavar="HOST:PORT",
        help="join this running Ray cluster ('auto' or the head's HOST:PORT; default: $RAY_ADDRESS, "
        "else a private Ray instance); see docs/scale.md",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress display")


FAILED = 1
"""The exit status of a run that started and failed (inside Flower); bad input exits 2."""


def run(args: argparse.Namespace) -> int:
    """Run the simulation (ldpfed.simulate) with the options given, print the summary; a run that fails inside
    Flower prints one line, its reason and its log, and exits 1."""
    import sys

    import ldpfed

    values = {o.name: getattr(args, o.name) for o in options() if getattr(args, o.name) is not None}
    try:
        result = ldpfed.simulate(cpus_per_client=args.cpus_per_client, ray_address=args.ray_address, progress=not args.quiet, **values)
    except RuntimeError as error:
        print(f"ldpfed simulate: error: {error}", file=sys.stderr)
        return FAILED
    _print_summary(result)
    return 0


def _print_summary(result: Run) -> None:
    """The run's main figures as a table (ldpfed.simulate printed its warnings)."""
    from rich.console import Console
    from rich.table import Table

    summary = result.summary
    table = Table(title=f"ldpfed run: {result.path}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in (
        "accuracy_local", "accuracy_local_denoised", "accuracy_remote", "accuracy_nonprivate", "accuracy_public_only",
        "accuracy_combined", "accuracy_top_tier_only", "enforce", "epsilon_enforced_max", "epsilon_sentence_max", "epsilon_sentence_median",
        "epsilon_amplified_pld_max", "epsilon_user_max", "epsilon_shuffled", "epsilon_user_central", "delta", "releases",
    ):
        value = summary.get(key)
        table.add_row(key, "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value))
    table.add_row("wall time (s)", f"{result.seconds:.1f}")
    Console().print(table)
