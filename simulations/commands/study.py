"""``ldpfed study``: run a grid of simulations over axes and seeds (resuming), then write its report."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from simulations.study import Study, StudyRun, load_study, run_state, run_study
from simulations.study_report import write_report

if TYPE_CHECKING:
    from rich.console import Console

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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="validate and list every run with its state; run nothing")
    mode.add_argument("--report-only", action="store_true", help="write the report from the complete runs; run nothing")


def run(args: argparse.Namespace) -> int:
    """Validate the whole study first, run what is not complete, write the report; 1 if a run failed."""
    from rich.console import Console

    study = load_study(args.config)
    out = (args.out or Path("runs") / "studies" / args.config.stem).resolve()
    report = (args.report or out).resolve()
    console = Console(soft_wrap=True)  # paths stay on one line
    runs = study.runs()
    states = {run.name: run_state(out / run.name, run) for run in runs}
    todo = sum(state != "complete" for state in states.values())
    console.print(f"study {args.config}: {len(runs)} runs in {out}, {len(runs) - todo} complete, {todo} to run")
    if args.dry_run:
        for run in runs:
            console.print(f"  {states[run.name]:>10}  {run.name}")
        return 0
    failures: list[str] = []
    if not args.report_only:
        failures = _run_with_progress(study, out, len(runs), console)
    for failure in failures:
        console.print(failure, style="red", markup=False)
    command = "ldpfed study " + " ".join(shlex.quote(a) for a in _given(args))
    console.print(f"report: {write_report(study, out, report, command, args.runs_from)}")
    return 1 if failures else 0


def _run_with_progress(study: Study, out: Path, total: int, console: Console) -> list[str]:
    """run_study with a progress bar over runs and one line per finished run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("study", total=total)

        def start(run: StudyRun) -> None:
            bar.update(task, description=f"running {run.name}")

        def done(run: StudyRun, result: str) -> None:
            bar.console.print(f"{run.name}: {result}")
            bar.advance(task)

        return run_study(study, out, start, done)


def _given(args: argparse.Namespace) -> list[str]:
    """The arguments as given that make the study (not --report-only), for the report's command line."""
    given = [str(args.config)]
    for flag, value in (("--out", args.out), ("--report", args.report)):
        if value is not None:
            given += [flag, str(value)]
    for path in args.runs_from:
        given += ["--runs-from", str(path)]
    return given
