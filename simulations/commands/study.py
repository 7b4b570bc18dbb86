"""``ldpfed study``: run a grid of simulations over axes and seeds (resuming), then write its report."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "run a study (a grid of simulate runs over axes and seeds, from a TOML file), resume it, report it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The study config, where runs and the report go, and what to do."""
    parser.add_argument("config", type=Path, help="study TOML: [base] options, [axes] option -> values, seeds, group_by")
    parser.add_argument(
        "--out", type=Path, default=None, help="folder of the run directories (default: runs/studies/<config name>)"
    )
    parser.add_argument(
        "--report", type=Path, default=None, help="folder of study.md, study.json and the plots (default: --out)"
    )
    parser.add_argument(
        "--runs-from", type=Path, action="append", default=[], metavar="STUDY_JSON",
        help="an earlier report's study.json of the same study: its recorded runs fill in runs not complete under --out "
        "(the report names them; repeatable)",
    )
    parser.add_argument(
        "--runner", choices=("auto", "shared", "alone"), default="auto",
        help="shared: every run in one worker process that keeps the imports, the encoder and its encodings (results "
        "identical to each run alone); alone: each run its own `ldpfed simulate` (Flower + Ray); auto: shared when no "
        "run has more than 200 users (default: auto; docs/scale.md, Studies)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="validate and list every run with its state; run nothing")
    mode.add_argument("--report-only", action="store_true", help="write the report from the complete runs; run nothing")


def run(args: argparse.Namespace) -> int:
    """Validate the whole study first, run what is not complete, write the report (ldpfed.study); 1 if a run failed."""
    from rich.console import Console

    import ldpfed

    result = ldpfed.study(
        args.config, out=args.out, report=args.report, runs_from=args.runs_from, dry_run=args.dry_run,
        report_only=args.report_only, runner=args.runner,
    )
    console = Console(soft_wrap=True)  # paths stay on one line
    if args.dry_run:
        for entry in result.runs:
            console.print(f"  {entry.state:>10}  {entry.name}")
        return 0
    console.print(f"report: {result.report}")
    return 1 if result.failures else 0
