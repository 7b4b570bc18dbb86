"""What every reproduction shares: resumable cells in results.json, a progress bar, mean and
range over seeds, and markdown tables.

A cell is one (setting, seed): a setting is a small JSON object naming the row (table,
mechanism, epsilon, accounting, ...). Finished cells are kept in ``results.json`` beside the
fixed ``setup`` they were computed under, and skipped when the reproduction runs again; a
different setup is refused rather than mixed in.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Setting = dict[str, Any]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
"""The shared datasets beside the checkout (../shared/data), as the other experiment scripts read them."""


def common_arguments(parser: argparse.ArgumentParser, folder: Path, seeds: int) -> None:
    """--out, --seeds, --fresh and --report-only, shared by every reproduction."""
    parser.add_argument("--out", type=Path, default=folder, help=f"report folder (default {folder})")
    parser.add_argument("--seeds", type=int, default=seeds, help=f"seeds 0..N-1 per setting (default {seeds})")
    parser.add_argument("--fresh", action="store_true", help="discard the cells already in results.json")
    parser.add_argument("--report-only", action="store_true", help="rewrite README.md from results.json, run nothing")
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help=f"folder of the shared datasets (default {SHARED_DATA})")


def cell_key(setting: Setting, seed: int) -> str:
    """The cell's key in results.json: its setting and seed as sorted JSON."""
    return json.dumps({**setting, "seed": seed}, sort_keys=True)


class Results:
    """The finished cells of one reproduction and the setup they share.

    Parameters
    ----------
    folder:
        The report folder; ``results.json`` lives in it.
    setup:
        Everything fixed across cells (data, sizes, encoder, reductions): plain JSON.
    fresh:
        Start empty instead of resuming.
    """

    def __init__(self, folder: Path, setup: dict[str, Any], fresh: bool = False) -> None:
        self.path = Path(folder) / "results.json"
        self.setup = json.loads(json.dumps(setup))
        self.cells: dict[str, dict[str, Any]] = {}
        if self.path.exists() and not fresh:
            stored = json.loads(self.path.read_text())
            if stored.get("setup") != self.setup:
                changed = sorted(
                    k for k in set(stored.get("setup", {})) | set(self.setup)
                    if stored.get("setup", {}).get(k) != self.setup.get(k)
                )
                raise ValueError(
                    f"{self.path} holds cells of another setup (differs in: {', '.join(changed)}); "
                    "give --fresh to discard them or --out for another folder"
                )
            self.cells = stored.get("cells", {})

    def done(self, setting: Setting, seed: int) -> bool:
        """Whether the cell is finished."""
        return cell_key(setting, seed) in self.cells

    def get(self, setting: Setting, seed: int) -> dict[str, Any] | None:
        """The cell's values, or None."""
        return self.cells.get(cell_key(setting, seed))

    def put(self, setting: Setting, seed: int, values: dict[str, Any]) -> None:
        """Record a finished cell and save (atomically)."""
        self.cells[cell_key(setting, seed)] = {"setting": setting, "seed": seed, **values}
        self.save()

    def save(self) -> None:
        """Write results.json under a temporary name and rename it into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"setup": self.setup, "cells": self.cells}, indent=1, sort_keys=True) + "\n"
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix="results", suffix=".tmp")
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temp, self.path)

    def values(self, setting: Setting, field: str) -> list[float]:
        """``field`` of every finished seed of ``setting`` (seed order)."""
        found = [
            (cell["seed"], cell[field])
            for cell in self.cells.values()
            if cell["setting"] == setting and cell.get(field) is not None
        ]
        return [value for _, value in sorted(found)]


def run_cells(
    results: Results,
    cells: Sequence[tuple[Setting, int]],
    compute: Callable[[Setting, int], dict[str, Any]],
    title: str,
) -> None:
    """Compute every unfinished cell in order (saving each), with a rich progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    todo = [(s, seed) for s, seed in cells if not results.done(s, seed)]
    columns = (
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[cell]}"),
    )
    with Progress(*columns) as progress:
        task = progress.add_task(title, total=len(cells), completed=len(cells) - len(todo), cell="")
        for setting, seed in todo:
            progress.update(task, cell=f"{_short(setting)} seed {seed}")
            started = time.time()
            values = compute(setting, seed)
            results.put(setting, seed, {**values, "seconds": round(time.time() - started, 2)})
            progress.advance(task)


def reproduce(
    args: argparse.Namespace,
    results: Results,
    cells: Sequence[tuple[Setting, int]],
    compute: Callable[[Setting, int], dict[str, Any]],
    name: str,
    report: Callable[[], list[str]],
) -> int:
    """Run the unfinished cells (one torch thread) unless ``--report-only``, then write the README."""
    if not args.report_only:
        import torch

        torch.set_num_threads(1)
        run_cells(results, cells, compute, f"reproduce {name}")
    print(f"wrote {write_readme(args.out, report())}")
    return 0


def _short(setting: Setting) -> str:
    return " ".join(f"{k}={v}" for k, v in setting.items())


def spread(values: Iterable[float]) -> dict[str, float] | None:
    """Mean, min, max and count of finite values; None when there are none."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return None
    return {"mean": sum(finite) / len(finite), "min": min(finite), "max": max(finite), "n": len(finite)}


def fmt_range(values: Sequence[float], single: str = "") -> str:
    """'mean [min, max]' to 3 decimals; the one value alone (followed by ``single``); '-' for none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}{single}"
    return f"{sum(values) / len(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def fmt_spread(values: Iterable[float], scale: float = 100.0, digits: int = 2) -> str:
    """'mean [min, max] (n)' in percent by default; '-' when nothing finished."""
    s = spread(values)
    if s is None:
        return "-"
    f = f"{{:.{digits}f}}"
    body = f"{f.format(s['mean'] * scale)} [{f.format(s['min'] * scale)}, {f.format(s['max'] * scale)}]"
    return f"{body} (n={s['n']})"


def fmt_number(value: float | None, digits: int = 4) -> str:
    """A figure to ``digits`` significant digits, 'inf' or '-'."""
    if value is None:
        return "-"
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def write_readme(folder: Path, lines: list[str]) -> Path:
    """Write README.md into the report folder and return its path."""
    path = Path(folder) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
