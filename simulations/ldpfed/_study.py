"""study(): a grid of simulations over axes and seeds (resuming finished runs), and its report."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldpfed._run import Run


@dataclass(frozen=True)
class StudyEntry:
    """One run of a study: a cell of the grid at one seed.

    Attributes
    ----------
    name : str
        Its run directory's name (``axis=value__seed=N``).
    cell : Mapping[str, Any]
        The cell: axis -> value.
    seed : int
        The run seed.
    state : str
        ``complete``, ``missing``, ``incomplete`` or ``changed`` (ran with other options).
    path : Path
        Its run directory.
    """

    name: str
    cell: Mapping[str, Any]
    seed: int
    state: str
    path: Path

    def load(self) -> Run:
        """The finished run (ValueError if the run is not complete)."""
        if self.state != "complete":
            raise ValueError(f"run {self.name} is {self.state}, not complete")
        return Run.load(self.path)


@dataclass(frozen=True)
class Study:
    """A study after :func:`ldpfed.study`: its runs with their states, failures and report.

    Attributes
    ----------
    config : Path
        The study TOML.
    title : str
        The study's title.
    out : Path
        Folder of the run directories.
    report : Path or None
        study.md (beside study.json and the plots); None when no report was written (``dry_run``).
    runs : tuple[StudyEntry, ...]
        Every run of the grid, cell by cell, with its state after the call.
    failures : tuple[str, ...]
        One message per run that failed (each names its log).
    """

    config: Path
    title: str
    out: Path
    report: Path | None
    runs: tuple[StudyEntry, ...]
    failures: tuple[str, ...]

    def results(self) -> dict[str, Run]:
        """Every complete run by name."""
        return {entry.name: entry.load() for entry in self.runs if entry.state == "complete"}


def study(
    config: str | Path,
    *,
    out: str | Path | None = None,
    report: str | Path | None = None,
    runs_from: Sequence[str | Path] = (),
    dry_run: bool = False,
    report_only: bool = False,
    progress: bool = True,
    runner: str = "auto",
) -> Study:
    """Run a study as ``ldpfed study`` does: validate the whole grid first, run what is not complete, report it.

    Parameters
    ----------
    config : str or Path
        Study TOML: [base] options, [axes] option -> values, seeds, group_by (simulations/study.py).
    out : str or Path, optional
        Folder of the run directories (default: runs/studies/<config name>).
    report : str or Path, optional
        Folder of study.md, study.json and the plots (default: ``out``).
    runs_from : sequence of str or Path
        Earlier reports' study.json of the same study: their recorded runs fill in runs not complete
        under ``out`` (the report names them).
    dry_run : bool
        Validate and list every run with its state; run nothing, write no report.
    report_only : bool
        Write the report from the complete runs; run nothing.
    progress : bool
        Print the study's line, a progress bar and one line per finished run.
    runner : str
        ``shared``: every run in one worker process that keeps the imports, the loaded encoder and its encodings
        (the in-process grid; each run's results are those of the run alone, docs/scale.md "Studies"); ``alone``:
        each run its own ``ldpfed simulate`` (Flower + Ray); ``auto`` (default): shared when no run has more than
        200 users (simulations.study.SHARED_MAX_USERS). Either way a run that fails fails alone.

    Raises
    ------
    ValueError
        A bad study config (naming the key or the run), before anything runs; or no complete run to report.
    """
    from rich.console import Console

    from ldpfed.simulations.study import load_study, run_state, shares_worker
    from ldpfed.simulations.study_report import write_report

    if dry_run and report_only:
        raise ValueError("dry_run and report_only exclude each other")
    config = Path(config)
    grid = load_study(config)
    shared = shares_worker(grid, runner)  # a bad runner is refused before anything runs
    folder = (Path(out) if out is not None else Path("runs") / "studies" / config.stem).resolve()
    console = Console(soft_wrap=True, quiet=not progress)  # paths stay on one line
    runs = grid.runs()
    states = {run.name: run_state(folder / run.name, run) for run in runs}
    todo = sum(state != "complete" for state in states.values())
    console.print(
        f"study {config}: {len(runs)} runs in {folder}, {len(runs) - todo} complete, {todo} to run"
        + (", in one shared worker" if shared and todo and not (dry_run or report_only) else "")
    )
    failures: list[str] = []
    written = None
    if not dry_run:
        if not report_only:
            failures = _run_with_progress(grid, folder, len(runs), console, "shared" if shared else "alone")
            states = {run.name: run_state(folder / run.name, run) for run in runs}
        given = [str(config)]  # the command line that makes this report (not --report-only)
        for flag, value in (("--out", out), ("--report", report)):
            given += [] if value is None else [flag, str(value)]
        given += [item for path in runs_from for item in ("--runs-from", str(path))]
        command = "ldpfed study " + " ".join(shlex.quote(a) for a in given)
        target = (Path(report) if report is not None else folder).resolve()
        for failure in failures:
            console.print(failure, style="red", markup=False)
        written = write_report(grid, folder, target, command, [Path(path) for path in runs_from])
    entries = tuple(StudyEntry(run.name, run.cell, run.seed, states[run.name], folder / run.name) for run in runs)
    return Study(config, grid.title, folder, written, entries, tuple(failures))


def _run_with_progress(grid: Any, out: Path, total: int, console: Any, runner: str) -> list[str]:
    """run_study with a progress bar over runs and one line per finished run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ldpfed.simulations.study import StudyRun, run_study

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
        disable=console.quiet,
    ) as bar:
        task = bar.add_task("study", total=total)

        def start(run: StudyRun) -> None:
            bar.update(task, description=f"running {run.name}")

        def done(run: StudyRun, result: str) -> None:
            bar.console.print(f"{run.name}: {result}")
            bar.advance(task)

        return run_study(grid, out, start, done, runner)
