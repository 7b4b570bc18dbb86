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

The report (study.md, study.json, one PNG per axis) gives, per cell and per group, the mean and
the [min, max] over seeds of accuracy, the worst-case sentence-level epsilon spent and the
releases. Groups come from the run's users.csv (per-user results, simulation only): a group's
accuracy is the mean per-user accuracy of its users with queries, its epsilon the largest over its
users, its releases their sum. Group labels ``KEY: detail`` (quartiles, whose value ranges differ
by seed) are matched across seeds by KEY. Runs without users.csv give whole-run figures only.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fed.spec.run_spec import RunSpec, options
from fed.run_record import _clean

MARKER = "study_run.json"
"""Written into a run directory once its run finished: the options it ran with and its wall time."""
USERS_CSV = "users.csv"
USER_ACCURACY = "accuracy_private"
"""users.csv column with each user's accuracy of the private model (empty: the user has no queries)."""
ALL = "all users"
"""The group of a row with whole-run figures."""
PATH_OPTIONS = ("data", "public", "encoder", "cache_dir", "device_speed", "behavior_trace")
"""Run options that may name a local path: passed to the run as absolute paths (its apps run elsewhere)."""
SET_BY_STUDY = ("seed", "out")
"""Run options a study sets itself: seeds from ``seeds``, run directories from the study's folder."""
TOP_LEVEL = ("title", "description", "seeds", "group_by", "baselines", "figures", "base", "axes")
BASELINES = {
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
            RunSpec.from_mapping(run.options)
        except ValueError as error:
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
            raise ValueError(f"{path}: unknown run option {key!r} in {where}; valid options: {', '.join(valid)}")
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
    command = [sys.executable, "-m", "simulations.cli", "simulate", "--quiet"]
    for name, value in options.items():
        if name in PATH_OPTIONS and isinstance(value, str) and value and Path(value).exists():
            value = str(Path(value).resolve())
        flag = name.replace("_", "-")
        command.append(f"--{flag}" if value is True else f"--no-{flag}" if value is False else f"--{flag}={value}")
    return command + [f"--out={out}"]


def execute(run: StudyRun, directory: Path) -> float:
    """Run ``ldpfed simulate`` for one run into a fresh ``directory``; write the marker on success.

    Returns the wall time in seconds. Raises RuntimeError naming the run's log when the run fails.
    """
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    log = directory / "simulate.log"
    started = time.monotonic()
    with open(log, "w") as handle:
        done = subprocess.run(simulate_command(run.options, directory), stdout=handle, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    if done.returncode != 0 or not (directory / "summary.json").is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"run {run.name} failed (exit {done.returncode}): {tail[0]}; see {log}")
    (directory / MARKER).write_text(json.dumps({"options": run.options, "seconds": seconds}, indent=1) + "\n")
    return seconds


def run_study(
    study: Study, out: Path, on_start: Callable[[StudyRun], None], on_done: Callable[[StudyRun, str], None]
) -> list[str]:
    """Run every run that is not complete, one at a time; returns the failures' messages.

    ``on_start`` is called before each run that executes; ``on_done`` after every run (complete
    ones included) with a one-line result.
    """
    failures = []
    for run in study.runs():
        directory = out / run.name
        if run_state(directory, run) == "complete":
            on_done(run, "done before")
            continue
        on_start(run)
        try:
            seconds = execute(run, directory)
        except RuntimeError as error:
            failures.append(str(error))
            on_done(run, "FAILED")
            continue
        accuracy = json.loads((directory / "summary.json").read_text()).get("accuracy_local")
        on_done(run, f"accuracy {_number(accuracy, '.4f')} in {seconds:.0f} s")
    return failures


# ---------------------------------------------------------------- report


@dataclass(frozen=True)
class Figures:
    """One run's (or one group's) figures: accuracy, worst-case sentence epsilon spent, releases, users."""

    accuracy: float | None
    epsilon: float | None
    releases: float | None
    users: int | None


@dataclass(frozen=True)
class RunResult:
    """A complete run's whole-run figures and, when it has users.csv, its figures per group."""

    run: StudyRun
    whole: Figures
    groups: dict[str, Figures] | None
    labels: dict[str, list[str]]
    seconds: float | None
    baselines: dict[str, float | None]


def read_run(
    directory: Path, run: StudyRun, group_by: Sequence[str], baselines: Sequence[str] = ()
) -> RunResult | None:
    """The figures of a complete run (None otherwise); groups only with ``group_by`` and a users.csv."""
    if run_state(directory, run) != "complete":
        return None
    summary = json.loads((directory / "summary.json").read_text())
    marker = json.loads((directory / MARKER).read_text())
    whole = Figures(
        _float(summary.get("accuracy_local")), _float(summary.get("epsilon_sentence_max")),
        _float(summary.get("releases")), summary.get("users"),
    )
    groups, labels = None, {}
    if group_by and (directory / USERS_CSV).is_file():
        groups, labels = read_groups(directory / USERS_CSV, group_by)
    extra = {name: _float(summary.get(name)) for name in baselines}
    return RunResult(run, whole, groups, labels, marker.get("seconds"), extra)


def read_groups(path: Path, group_by: Sequence[str]) -> tuple[dict[str, Figures], dict[str, list[str]]]:
    """Figures per group of users.csv; also each group key's full labels (``KEY: detail``).

    Raises ValueError when a ``group_by`` column or a needed column is missing.
    """
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        needed = [*group_by, USER_ACCURACY, "epsilon_sentence", "releases"]
        missing = [c for c in needed if c not in columns]
        if missing:
            raise ValueError(f"{path} has no column {missing[0]!r}; its columns: {', '.join(columns)}")
        members: dict[str, list[dict[str, str]]] = {}
        labels: dict[str, set[str]] = {}
        for row in reader:
            key = ", ".join(row[g].split(":")[0].strip() or "(none)" for g in group_by)
            members.setdefault(key, []).append(row)
            labels.setdefault(key, set()).add(", ".join(row[g] for g in group_by))
    groups = {}
    for key, rows in members.items():
        accuracy = [float(r[USER_ACCURACY]) for r in rows if r[USER_ACCURACY] != ""]
        epsilon = [float(r["epsilon_sentence"]) for r in rows if r["epsilon_sentence"] != ""]
        groups[key] = Figures(
            sum(accuracy) / len(accuracy) if accuracy else None,
            max(epsilon) if epsilon else None,
            sum(float(r["releases"] or 0) for r in rows),
            len(rows),
        )
    return groups, {key: sorted(values) for key, values in labels.items()}


@dataclass(frozen=True)
class Spread:
    """Mean, min and max of a figure over seeds."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float | None]) -> "Spread | None":
        """The spread of the values that exist (None if none does)."""
        present = [v for v in values if v is not None]
        return cls(sum(present) / len(present), min(present), max(present)) if present else None


@dataclass(frozen=True)
class Row:
    """One cell (and group) of the report: its seeds and each figure's spread over them."""

    cell: dict[str, Any]
    group: str
    seeds: list[int]
    accuracy: Spread | None
    epsilon: Spread | None
    releases: Spread | None
    users: Spread | None
    baselines: dict[str, Spread | None]
    """Whole-run rows only: each of the study's baselines and figures."""


def aggregate(study: Study, results: Sequence[RunResult]) -> list[Row]:
    """One row per cell with whole-run figures, then (with ``group_by``) one per group found in users.csv."""
    rows = []
    for cell in study.cells():
        found = [r for r in results if r.run.cell == cell]
        if not found:
            continue
        whole = _row(cell, ALL, [(r.run.seed, r.whole) for r in found])
        extra = {name: Spread.of(r.baselines.get(name) for r in found) for name in (*study.baselines, *study.figures)}
        rows.append(replace(whole, baselines=extra))
        keys = sorted({k for r in found if r.groups for k in r.groups}, key=natural_key)
        for key in keys:
            rows.append(_row(cell, key, [(r.run.seed, r.groups[key]) for r in found if r.groups and key in r.groups]))
    return rows


def _row(cell: dict[str, Any], group: str, seeded: list[tuple[int, Figures]]) -> Row:
    def spread(name: str) -> Spread | None:
        return Spread.of(getattr(figures, name) for _, figures in seeded)

    return Row(
        cell, group, [seed for seed, _ in seeded],
        spread("accuracy"), spread("epsilon"), spread("releases"), spread("users"), {},
    )


def natural_key(text: str) -> list[Any]:
    """Sort key that orders numbers inside text by value ('epsilon 2' before 'epsilon 16')."""
    parts = re.split(r"(\d+(?:\.\d+)?)", text)
    return [(0, float(part), "") if i % 2 else (1, 0.0, part) for i, part in enumerate(parts)]


def _float(value: Any) -> float | None:
    """A JSON figure as a float (None stays None; 'inf' strings become inf)."""
    return None if value is None else float(value)


def _number(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return f"{value:{spec}}" if math.isfinite(value) else str(value)


def _spread_text(spread: Spread | None, spec: str) -> str:
    if spread is None:
        return "-"
    return f"{_number(spread.mean, spec)} [{_number(spread.low, spec)}, {_number(spread.high, spec)}]"


def markdown(
    study: Study, rows: Sequence[Row], results: Sequence[RunResult], missing: Sequence[str], plots: Sequence[Path],
    command: str,
) -> str:
    """study.md: the setting, one table (mean [min, max] over seeds), notes and plots."""
    grouped = bool(study.group_by)
    base = ", ".join(f"{k} = {json.dumps(v)}" for k, v in study.base.items()) or "run defaults"
    axes = "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in study.axes.items()) or "none (seeds only)"
    seconds = sum(r.seconds or 0.0 for r in results)
    lines = [f"# {study.title}", ""]
    if study.description:
        lines += [study.description.strip(), ""]
    lines += [
        f"Study `{study.path}`: {len(study.cells())} cells x {len(study.seeds)} seeds "
        f"({', '.join(map(str, study.seeds))}); {len(results)} runs reported"
        + (f", {len(missing)} missing" if missing else "") + f", {seconds:.0f} s of runs. Command: `{command}`.",
        "",
        f"Fixed options: {base}. Axes: {axes}."
        + (f" Groups: users.csv column(s) {', '.join(study.group_by)}." if grouped else ""),
        "",
    ]
    for axis, sets in study.sets.items():
        lines += [f"Option sets of {axis}:", ""]
        lines += [f"- {name}: " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in options.items()) for name, options in sets.items()]
        lines += [""]
    header = [*study.axes, *(["group"] if grouped else []), "seeds", "users (mean)", "accuracy: mean [min, max]",
              *(BASELINES[name] for name in study.baselines), "worst-case sentence epsilon spent (max over users)",
              *(FIGURES[name] for name in study.figures), "releases"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row.cell[name]) for name in study.axes] + ([row.group] if grouped else [])
        users = None if row.users is None else row.users.mean
        cells += [
            str(len(row.seeds)), _number(users, ".0f"), _spread_text(row.accuracy, ".4f"),
            *(_spread_text(row.baselines.get(name), ".4f") for name in study.baselines), _spread_text(row.epsilon, ".4g"),
            *(_spread_text(row.baselines.get(name), ".4g") for name in study.figures), _spread_text(row.releases, ".0f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Each figure is the mean over seeds with its [min, max]. Accuracy: local inference, each user applying the "
        "private model to its own query records (exact counts, simulation only); for all users, pooled over every "
        "query. Epsilon: the worst-case sentence-level epsilon the ledgers charged (max over users; budgets are "
        "enforced on it unless the run says --enforce amplified). Releases: reports the users sent.",
    ]
    if grouped:
        lines += [
            "",
            f"Groups: rows of each run's users.csv by {', '.join(study.group_by)}; a group's accuracy is the mean "
            "per-user accuracy of its users with queries, its epsilon the largest of its users', its releases their "
            "sum, users its size. Labels `KEY: detail` are matched across seeds by KEY (quartile edges differ by "
            "seed); the full labels of every run are in study.json.",
        ]
        without = [r.run.name for r in results if r.groups is None]
        if without:
            lines += ["", f"No users.csv (whole-run figures only) in {len(without)} runs: {', '.join(without)}."]
    if missing:
        lines += ["", f"Not complete, left out: {', '.join(missing)}."]
    lines += [""] + [f"![{plot.stem}]({plot.name})" for plot in plots]
    return "\n".join(lines).rstrip() + "\n"


def plot_axes(study: Study, rows: Sequence[Row], folder: Path) -> list[Path]:
    """accuracy_<axis>.png for each axis with several values: accuracy against its values (evenly
    spaced, in config order), one line per value of the other axes and group, and one per baseline
    (dotted; drawn slightly apart), bars = [min, max] over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for axis, values in study.axes.items():
        if len(values) < 2:
            continue
        lines: dict[tuple[str, int], dict[int, Spread]] = {}  # (label, 0 whole run / 1 baseline / 2 group)
        for row in rows:
            others = [f"{k}={v}" for k, v in row.cell.items() if k != axis]
            index = values.index(row.cell[axis])
            if row.accuracy is not None:
                label = ", ".join(others + ([row.group] if study.group_by else [])) or "accuracy"
                lines.setdefault((label, 0 if row.group == ALL else 2), {})[index] = row.accuracy
            for name, spread in row.baselines.items():
                if spread is not None and name in study.baselines:
                    lines.setdefault((", ".join(others + [BASELINES[name]]), 1), {})[index] = spread
        fig, ax = plt.subplots(figsize=(7, 4.5))
        order = sorted(lines, key=lambda line: (line[1], natural_key(line[0])))
        for n, (label, kind) in enumerate(order):
            points = lines[(label, kind)]
            x = sorted(points)
            shift = 0.04 * (n - (len(order) - 1) / 2)  # side by side, so the bars stay apart
            mean = [points[i].mean for i in x]
            error = [[points[i].mean - points[i].low for i in x], [points[i].high - points[i].mean for i in x]]
            style = {"linestyle": ":"} if kind == 1 else {"linestyle": "--"} if kind == 0 and study.group_by else {}
            if kind < 2 and study.group_by and len(study.axes) == 1:
                style["color"] = "black" if kind == 0 else "grey"  # the one whole-run line and its baselines
            ax.errorbar([i + shift for i in x], mean, yerr=error, marker="o", capsize=3, label=label, **style)
        ax.set_xticks(range(len(values)), [str(v) for v in values], rotation=20 if len(values) > 4 else 0)
        ax.set_xlabel(axis)
        ax.set_ylabel(f"accuracy (mean over {len(study.seeds)} seeds; bars: min-max)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = folder / f"accuracy_{axis}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(study: Study, out: Path, report: Path, command: str) -> Path:
    """Read every complete run under ``out``; write study.md, study.json and the plots to ``report``.

    Raises ValueError when no run is complete.
    """
    results, missing = [], []
    for run in study.runs():
        result = read_run(out / run.name, run, study.group_by, (*study.baselines, *study.figures))
        if result is None:
            missing.append(run.name)
        else:
            results.append(result)
    if not results:
        raise ValueError(f"no complete run under {out}: run the study first")
    rows = aggregate(study, results)
    report.mkdir(parents=True, exist_ok=True)
    plots = plot_axes(study, rows, report)
    (report / "study.md").write_text(markdown(study, rows, results, missing, plots, command))
    runs = [
        {
            "name": r.run.name, "cell": r.run.cell, "seed": r.run.seed, "seconds": r.seconds, "whole": asdict(r.whole),
            "groups": None if r.groups is None else {k: asdict(v) for k, v in r.groups.items()},
            "group_labels": r.labels, "baselines": r.baselines,
        }
        for r in results
    ]
    raw = {
        "study": str(study.path), "base": study.base, "axes": study.axes, "option_sets": study.sets, "seeds": list(study.seeds),
        "group_by": list(study.group_by), "missing": missing, "runs": runs, "rows": [asdict(row) for row in rows],
    }
    (report / "study.json").write_text(json.dumps(_clean(raw), indent=1) + "\n")
    return report / "study.md"
