"""The run directory: resolved config, per-round metrics, ledgers, summary, report, plots."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.configuration.run_spec import RunSpec


def _clean(value: Any) -> Any:
    """JSON-safe: infinities and NaN become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _cells(column: np.ndarray) -> list[str]:
    """A column as CSV cells: integers as written, floats to 6 significant digits (integral ones as
    integers), infinities as inf, NaN and None as empty cells."""
    column = np.asarray(column)
    if column.dtype.kind == "f":
        finite = np.isfinite(column)
        integral = bool(np.all(column[finite] == np.round(column[finite])))
        spec = "%d" if integral else "%.6g"
        return [spec % v if math.isfinite(v) else "" if math.isnan(v) else str(v) for v in column.tolist()]
    return ["" if v is None else str(v) for v in column.tolist()]


class RunRecord:
    """Writes one run's directory as the run goes."""

    def __init__(self, out: Path, config: RunSpec) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.write_json("config.json", config.to_mapping())
        (out / "metrics.jsonl").write_text("")
        self.rounds: list[dict[str, Any]] = []

    def write_json(self, name: str, data: Any) -> Path:
        """Write ``data`` as indented JSON under the run directory."""
        path = self.out / name
        with open(path, "w") as handle:  # streamed: a run's ledgers can be hundreds of MiB of text
            json.dump(_clean(data), handle, indent=1)
            handle.write("\n")
        return path

    def round(self, metrics: dict[str, Any]) -> None:
        """Append one round's metrics to metrics.jsonl."""
        self.rounds.append(metrics)
        with open(self.out / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(_clean(metrics)) + "\n")

    def write_csv(self, name: str, columns: Mapping[str, np.ndarray]) -> Path:
        """Write equal-length ``columns`` as one CSV table (a header row, then one row per entry)."""
        path = self.out / name
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(list(columns))
            writer.writerows(zip(*(_cells(c) for c in columns.values())))
        return path
