"""A study's report: the runs' figures read back, aggregated over seeds into rows, and written as
study.md, study.json and plots (``ldpfed study --report``)."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ldpfed.fed.reporting.run_record import _clean
from ldpfed.simulations.study import (
    ALL, BASELINES, FIGURES, MARKER, Study, StudyRun, USERS_CSV, USER_ACCURACY, float_or_none, number_text, run_state,
)

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
        float_or_none(summary.get("accuracy_local")), float_or_none(summary.get("epsilon_sentence_max")),
        float_or_none(summary.get("releases")), summary.get("users"),
    )
    groups, labels = None, {}
    if group_by and (directory / USERS_CSV).is_file():
        groups, labels = read_groups(directory / USERS_CSV, group_by)
    extra = {name: float_or_none(summary.get(name)) for name in baselines}
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






def _spread_text(spread: Spread | None, spec: str) -> str:
    if spread is None:
        return "-"
    return f"{number_text(spread.mean, spec)} [{number_text(spread.low, spec)}, {number_text(spread.high, spec)}]"


def markdown(
    study: Study, rows: Sequence[Row], results: Sequence[RunResult], missing: Sequence[str], plots: Sequence[Path],
    command: str, reused: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """study.md: the setting, one table (mean [min, max] over seeds), notes and plots.

    ``reused``: study.json path -> the runs taken from it rather than from a run directory.
    """
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
            str(len(row.seeds)), number_text(users, ".0f"), _spread_text(row.accuracy, ".4f"),
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
    for path, names in (reused or {}).items():
        lines += ["", f"Taken from the earlier report `{path}` (its run directories are not here): {', '.join(names)}."]
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


def recorded_runs(path: Path, study: Study) -> dict[str, RunResult]:
    """The runs an earlier report of the same study recorded in its study.json, by run name.

    Raises ValueError when that report is of another study (base options, axes or option sets differ).
    """
    raw = json.loads(path.read_text())
    mine = json.loads(json.dumps(_clean({"base": study.base, "axes": study.axes, "option_sets": study.sets})))
    for key, value in mine.items():
        if raw.get(key) != value:
            raise ValueError(f"{path}: its {key.replace('_', ' ')} differ from {study.path}'s; its runs are of another study")
    runs = {run.name: run for run in study.runs()}
    recorded = {}
    for entry in raw["runs"]:
        run = runs.get(entry["name"])
        if run is None:
            continue
        groups = entry["groups"]
        recorded[run.name] = RunResult(
            run, Figures(**entry["whole"]), None if groups is None else {k: Figures(**v) for k, v in groups.items()},
            entry["group_labels"], entry["seconds"], entry["baselines"],
        )
    return recorded


def write_report(study: Study, out: Path, report: Path, command: str, runs_from: Sequence[Path] = ()) -> Path:
    """Read every complete run under ``out``; write study.md, study.json and the plots to ``report``.

    A run not complete under ``out`` is taken from the first study.json in ``runs_from`` that records
    it (an earlier report of the same study, e.g. made on another machine); study.md names those runs.

    Raises ValueError when no run is complete.
    """
    recorded = [(path, recorded_runs(path, study)) for path in runs_from]
    results, missing, reused = [], [], {}
    for run in study.runs():
        result = read_run(out / run.name, run, study.group_by, (*study.baselines, *study.figures))
        for path, runs in recorded:
            if result is None and run.name in runs:
                result = runs[run.name]
                reused.setdefault(str(path), []).append(run.name)
        if result is None:
            missing.append(run.name)
        else:
            results.append(result)
    if not results:
        raise ValueError(f"no complete run under {out}: run the study first")
    rows = aggregate(study, results)
    report.mkdir(parents=True, exist_ok=True)
    plots = plot_axes(study, rows, report)
    (report / "study.md").write_text(markdown(study, rows, results, missing, plots, command, reused))
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
        "group_by": list(study.group_by), "missing": missing, "runs_from": reused, "runs": runs,
        "rows": [asdict(row) for row in rows],
    }
    (report / "study.json").write_text(json.dumps(_clean(raw), indent=1) + "\n")
    return report / "study.md"
