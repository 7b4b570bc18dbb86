"""Studies: a grid of ``ldpfed simulate`` runs over one or more axes and several seeds, and its report.

A study is a TOML file::

    title = "SST-2 label skew"            # optional; the report's heading
    description = "What it shows."       # optional; printed under the heading
    seeds = [0, 1, 2]
    group_by = ["label_skew_quantile"]   # optional: users.csv column(s) to split results by
    baselines = ["accuracy_nonprivate"]  # optional: summary.json accuracies shown beside each cell's

    [base]                               # fixed run options (any run option but seed and out)
    data = "../shared/data/sst2"
    users = 200

    [axes]                               # run option -> values; the grid is their product
    partition = ["dirichlet:0.05", "dirichlet:1"]

    [axes.task.snips]                    # an axis of named option sets: its values are the names
    data = "../shared/data/snips"        # (options that must change together, e.g. data and public)
    public = "none"

An axis whose value is a table of tables (``[axes.NAME.VALUE]``) has named option sets as values:
the cell names the set (``task=snips``) and the run takes all its options. Its name is not a run
option, and no option may be set by two axes or by an axis and ``[base]``.

Every cell of the grid is run once per seed, as its own run directory under the study's folder,
named by its parameters (``partition=dirichlet-0.05__seed=0``). A run is complete when
:data:`MARKER` is there with the run's options and the run wrote its summary: a rerun skips
complete runs and starts the others afresh. Paths in the options (``data``, ``public``) are
relative to the working directory, as with ``ldpfed simulate``.

Runs run one after another, each either alone, as its own ``ldpfed simulate`` process (Flower + Ray), or in one
worker process the study's runs share (simulations/study_worker.py: the imports, the loaded encoder and its encodings
kept; each run on the in-process grid, with the results of the run alone). ``runner="auto"`` shares the worker when no
run has more than :data:`SHARED_MAX_USERS` users (docs/scale.md, "Studies"). Either way a run that fails, or whose
worker dies, fails alone.

The report (study.md, study.json, one PNG per axis) gives, per cell and per group, the mean and
the [min, max] over seeds of accuracy, the worst-case sentence-level epsilon spent and the
releases. Groups come from the run's users.csv (per-user results, simulation only): a group's
accuracy is the mean per-user accuracy of its users with queries, its epsilon the largest over its
users, its releases their sum. Group labels ``KEY: detail`` (quartiles, whose value ranges differ
by seed) are matched across seeds by KEY. Runs without users.csv give whole-run figures only.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldpfed.fed.configuration.option import unknown_option
from ldpfed.fed.plugins.entry_points import PluginError, environment
from ldpfed.fed.configuration.run_spec import RunSpec, options
from ldpfed.simulations import processes
from ldpfed.simulations.study_worker import SharedRunner

MARKER = "study_run.json"
"""Written into a run directory once its run finished: the options it ran with and its wall time."""
USERS_CSV = "users.csv"
USER_ACCURACY = "accuracy_private"
"""users.csv column with each user's accuracy of the private model (empty: the user has no queries)."""
ALL = "all users"
"""The group of a row with whole-run figures."""
PATH_OPTIONS = ("data", "public", "projection_public", "encoder", "cache_dir", *(o.name for o in options() if o.file))
"""Run options that may name a local path (those above, and the files an axis's options name, e.g. traces): passed
to the run as absolute paths (its apps run elsewhere)."""
SET_BY_STUDY = ("seed", "out")
"""Run options a study sets itself: seeds from ``seeds``, run directories from the study's folder."""
TOP_LEVEL = ("title", "description", "seeds", "group_by", "baselines", "figures", "base", "axes")
BASELINES = {
    "accuracy_combined": "accuracy, reports and public data combined (--combined-baseline)",
    "accuracy_local_denoised": "accuracy on denoised query releases (snd)",
    "accuracy_nonprivate": "non-private accuracy",
    "accuracy_public_only": "public-only accuracy",
    "accuracy_top_tier_only": "accuracy, largest-budget tier's reports alone",
}
"""summary.json figures a study may report beside each cell's whole-run accuracy, and their column titles."""
FIGURES = {
    "epsilon_user_max": "worst-case user-level epsilon (max over users)",
    "epsilon_shuffled": "central epsilon after shuffling (FMT21)",
    "epsilon_user_central": "user-level epsilon of DP-FedAvg",
}
"""Privacy figures of summary.json a study may report beside each cell (not plotted), and their column titles."""


@dataclass(frozen=True)
class StudyRun:
    """One cell of the grid at one seed."""

    cell: dict[str, Any]
    seed: int
    options: dict[str, Any]
    name: str


@dataclass(frozen=True)
class Study:
    """A validated study configuration."""

    path: Path
    title: str
    description: str
    base: dict[str, Any]
    axes: dict[str, list[Any]]
    seeds: tuple[int, ...]
    group_by: tuple[str, ...]
    baselines: tuple[str, ...] = ()
    sets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Axes of named option sets: axis -> value name -> its run options (their values in ``axes`` are the names)."""
    figures: tuple[str, ...] = ()

    def cells(self) -> list[dict[str, Any]]:
        """Every combination of axis values, in the order the config lists them."""
        return [dict(zip(self.axes, values)) for values in itertools.product(*self.axes.values())]

    def options(self, cell: Mapping[str, Any]) -> dict[str, Any]:
        """A cell's run options: each axis's value, or all options of its named set."""
        options: dict[str, Any] = {}
        for axis, value in cell.items():
            options.update(self.sets[axis][value] if axis in self.sets else {axis: value})
        return options

    def runs(self) -> list[StudyRun]:
        """Every cell at every seed, cell by cell."""
        return [
            StudyRun(cell, seed, {**self.base, **self.options(cell), "seed": seed}, run_name(cell, seed))
            for cell in self.cells()
            for seed in self.seeds
        ]


def run_options() -> tuple[str, ...]:
    """The run options a study may set: every run option except those the study sets."""
    return tuple(option.name for option in options() if option.name not in SET_BY_STUDY)


def load_study(path: Path) -> Study:
    """Read and validate a study config; every run's options are checked by RunSpec.

    Raises
    ------
    ValueError
        Naming the unknown key, the misplaced option or the run whose options RunSpec refuses.
    """
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: {error}") from None
    unknown = sorted(set(raw) - set(TOP_LEVEL))
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; a study has {', '.join(TOP_LEVEL)}")
    base = _options(raw.get("base", {}), "[base]", path)
    for name, value in base.items():
        _check_value(value, f"[base] {name}", path)
    raw_axes = raw.get("axes", {})
    if not isinstance(raw_axes, dict):
        raise ValueError(f"{path}: [axes] must be a table of run options")
    sets = {name: _option_sets(name, table, path) for name, table in raw_axes.items() if isinstance(table, dict)}
    axes = _options({k: v for k, v in raw_axes.items() if k not in sets}, "[axes]", path)
    for name, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{path}: [axes] {name} must be a non-empty list of values, got {values!r}")
        for value in values:
            _check_value(value, f"[axes] {name}", path)
        if len({json.dumps(v) for v in values}) < len(values):
            raise ValueError(f"{path}: [axes] {name} lists a value twice: {values!r}")
    setter = {name: "[base]" for name in base}
    for axis in raw_axes:
        names = set(axes) & {axis} if axis in axes else {o for options in sets[axis].values() for o in options}
        for name in sorted(names):
            if name in setter:
                raise ValueError(f"{path}: {name!r} is both in {setter[name]} and in [axes] {axis}; keep one")
            setter[name] = f"[axes] {axis}"
    axes = {axis: axes[axis] if axis in axes else list(sets[axis]) for axis in raw_axes}
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or any(type(s) is not int for s in seeds) or len(set(seeds)) < len(seeds):
        raise ValueError(f"{path}: seeds must be a non-empty list of distinct integers, got {seeds!r}")
    group_by = raw.get("group_by", [])
    group_by = [group_by] if isinstance(group_by, str) else group_by
    if not isinstance(group_by, list) or not all(isinstance(g, str) and g for g in group_by):
        raise ValueError(f"{path}: group_by must be a users.csv column name or a list of them, got {group_by!r}")
    baselines = raw.get("baselines", [])
    if not isinstance(baselines, list) or any(b not in BASELINES for b in baselines):
        raise ValueError(f"{path}: baselines must be a list of {', '.join(BASELINES)}, got {baselines!r}")
    figures = raw.get("figures", [])
    if not isinstance(figures, list) or any(f not in FIGURES for f in figures):
        raise ValueError(f"{path}: figures must be a list of {', '.join(FIGURES)}, got {figures!r}")
    study = Study(
        Path(path), str(raw.get("title", Path(path).stem)), str(raw.get("description", "")),
        base, axes, tuple(seeds), tuple(group_by), tuple(baselines), sets, tuple(figures),
    )
    names: dict[str, dict[str, Any]] = {}
    for run in study.runs():
        if names.setdefault(run.name, run.cell) != run.cell:
            raise ValueError(f"{path}: cells {names[run.name]} and {run.cell} get the same run directory {run.name!r}")
        try:
            environment(RunSpec.from_mapping(run.options).to_mapping())  # a plugin registered here must reach the run
        except (ValueError, PluginError) as error:
            raise ValueError(f"{path}: run {run.name}: {error}") from None
    return study


def _options(table: Any, where: str, path: Path) -> dict[str, Any]:
    """A table of run options with underscored names; unknown or study-set names are errors."""
    if not isinstance(table, dict):
        raise ValueError(f"{path}: {where} must be a table of run options")
    valid = run_options()
    options: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name == "seed":
            raise ValueError(f"{path}: {where} sets 'seed'; list the seeds as seeds = [...] at the top level")
        if name == "out":
            raise ValueError(f"{path}: {where} sets 'out'; the study names each run directory (see --out)")
        if name not in valid:
            raise ValueError(f"{path}: {unknown_option(key, valid, where)}; valid options: {', '.join(valid)}")
        if name in options:
            raise ValueError(f"{path}: {where} sets {name!r} twice")
        options[name] = value
    return options


def _option_sets(axis: str, table: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """An axis of named option sets ([axes.AXIS.NAME] tables of run options), each value checked."""
    if axis.replace("-", "_") in run_options():
        raise ValueError(f"{path}: [axes] {axis} is a run option; an axis of option sets needs another name")
    if not table or not all(isinstance(options, dict) and options for options in table.values()):
        raise ValueError(f"{path}: [axes] {axis} must map each value's name to a non-empty table of run options")
    sets = {}
    for name, options in table.items():
        sets[name] = _options(options, f"[axes.{axis}.{name}]", path)
        for option, value in sets[name].items():
            _check_value(value, f"[axes.{axis}.{name}] {option}", path)
    return sets


def _check_value(value: Any, where: str, path: Path) -> None:
    if not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{path}: {where}: values must be strings, numbers or booleans, got {value!r}")


def run_name(cell: Mapping[str, Any], seed: int) -> str:
    """The run directory's name: ``axis=value`` for every axis, then the seed (odd characters -> '-')."""
    parts = [f"{name}={_slug(value)}" for name, value in cell.items()] + [f"seed={seed}"]
    return "__".join(parts)


def _slug(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text)


def _jsonable(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options as JSON stores them (so a reread marker compares equal)."""
    return json.loads(json.dumps(dict(options)))


def run_state(directory: Path, run: StudyRun) -> str:
    """``complete``, ``missing``, ``incomplete`` (no marker or summary) or ``changed`` (ran with other options)."""
    if not directory.exists():
        return "missing"
    try:
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return "incomplete"
    if not (directory / "summary.json").is_file():
        return "incomplete"
    return "complete" if marker.get("options") == _jsonable(run.options) else "changed"


def simulate_command(options: Mapping[str, Any], out: Path) -> list[str]:
    """The ``ldpfed simulate`` command line of one run (this interpreter; booleans as --x / --no-x;
    a relative path that exists here, in a :data:`PATH_OPTIONS` option, made absolute)."""
    command = [sys.executable, "-P", "-m", "ldpfed.simulations.cli", "simulate", "--quiet"]
    for name, value in options.items():
        if name in PATH_OPTIONS and isinstance(value, str) and value and Path(value).exists():
            value = str(Path(value).resolve())
        flag = name.replace("_", "-")
        command.append(f"--{flag}" if value is True else f"--no-{flag}" if value is False else f"--{flag}={value}")
    return command + [f"--out={out}"]


def execute(run: StudyRun, directory: Path, shared: SharedRunner | None = None) -> float:
    """Run one run into a fresh ``directory``; write the marker on success.

    Alone (``shared`` None): ``ldpfed simulate`` in a process of its own. Shared: in the study's worker process
    (:mod:`simulations.study_worker`), which keeps the imports, the loaded encoder and its encodings across runs; the
    run's results are the same. Either way its output goes to ``simulate.log``.

    Returns the wall time in seconds. Raises RuntimeError naming the run's log when the run fails.
    """
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    log = directory / "simulate.log"
    started = time.monotonic()
    env = {**os.environ, **environment(RunSpec.from_mapping(run.options).to_mapping())}  # plugins registered here
    if shared is not None:
        log.touch()
        try:
            shared.run(run.options, directory, log, env)
        except RuntimeError as error:  # the run raised, or the worker died running it (the next run starts another)
            raise RuntimeError(f"run {run.name} failed: {error}; see {log}") from None
        done = subprocess.CompletedProcess([], 0)
    else:
        with open(log, "w") as handle:
            done = processes.run(simulate_command(run.options, directory), stdout=handle, stderr=subprocess.STDOUT, env=env)
    seconds = time.monotonic() - started
    if done.returncode != 0 or not (directory / "summary.json").is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"run {run.name} failed (exit {done.returncode}): {tail[0]}; see {log}")
    (directory / MARKER).write_text(json.dumps({"options": run.options, "seconds": seconds}, indent=1) + "\n")
    return seconds


SHARED_MAX_USERS = 200
"""``runner="auto"`` shares one worker among a study's runs when none has more users than this. The shared worker
runs a run's nodes one after another in one process, where Flower's Ray engine runs them side by side on the machine's
CPUs: beyond a few hundred users a run's own work outweighs what sharing saves (docs/scale.md, "Studies")."""
RUNNERS = ("auto", "shared", "alone")
"""How a study runs its runs: ``shared`` (one worker process for all, simulations/study_worker.py), ``alone`` (each
its own ``ldpfed simulate``), ``auto`` (shared when no run has more than :data:`SHARED_MAX_USERS` users)."""


def shares_worker(study: Study, runner: str = "auto") -> bool:
    """Whether :func:`run_study` runs ``study`` in one shared worker (see :data:`RUNNERS`)."""
    if runner not in RUNNERS:
        raise ValueError(f"runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    if runner != "auto":
        return runner == "shared"
    return all(RunSpec.from_mapping(run.options).data.users <= SHARED_MAX_USERS for run in study.runs())


def run_study(
    study: Study,
    out: Path,
    on_start: Callable[[StudyRun], None],
    on_done: Callable[[StudyRun, str], None],
    runner: str = "auto",
) -> list[str]:
    """Run every run that is not complete, one at a time; returns the failures' messages.

    ``on_start`` is called before each run that executes; ``on_done`` after every run (complete
    ones included) with a one-line result. ``runner``: see :data:`RUNNERS`. A run that fails (or whose shared worker
    dies) is reported and the others go on.
    """
    failures = []
    with SharedRunner() if shares_worker(study, runner) else nullcontext() as shared:
        for run in study.runs():
            directory = out / run.name
            if run_state(directory, run) == "complete":
                on_done(run, "done before")
                continue
            on_start(run)
            try:
                seconds = execute(run, directory, shared)
            except RuntimeError as error:
                failures.append(str(error))
                on_done(run, "FAILED")
                continue
            accuracy = json.loads((directory / "summary.json").read_text()).get("accuracy_local")
            on_done(run, f"accuracy {number_text(accuracy, '.4f')} in {seconds:.0f} s")
    return failures

def float_or_none(value: Any) -> float | None:
    """A JSON figure as a float (None stays None; 'inf' strings become inf)."""
    return None if value is None else float(value)

def number_text(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}" if math.isfinite(value) else str(value)
