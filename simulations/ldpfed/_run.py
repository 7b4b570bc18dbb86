"""A finished run, read back from its run directory."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ldpfed.fed.configuration.run_spec import RunSpec


@dataclass(frozen=True)
class Run:
    """One run of :func:`ldpfed.simulate`, as its run directory holds it.

    Attributes
    ----------
    path : Path
        The run directory (config.json, metrics.jsonl, ledgers.json, users.csv, summary.json,
        privacy_report.md, plots).
    config : RunSpec
        The resolved run options (config.json).
    summary : Mapping[str, Any]
        The run's figures (summary.json): accuracies next to the epsilons that paid for them.
    metrics : tuple[Mapping[str, Any], ...]
        One entry per round (metrics.jsonl).
    seconds : float or None
        Wall time of :func:`ldpfed.simulate` (None for a run read with :meth:`load`).
    ledgers : Mapping[int, Mapping[str, Any]]
        Every user's ledger by user id (ledgers.json's ``users``): budget, the privacy events
        charged and their counts per record; read on first use.
    users : tuple[Mapping[str, Any], ...]
        The users table (users.csv, simulation only), one row per user, numbers parsed; read on first use.
    """

    path: Path
    config: RunSpec
    summary: Mapping[str, Any]
    metrics: tuple[Mapping[str, Any], ...]
    seconds: float | None = field(default=None, compare=False)

    @classmethod
    def load(cls, path: str | Path, seconds: float | None = None) -> Run:
        """The run in directory ``path``; ValueError if it is not a finished run directory."""
        folder = Path(path)
        for name in ("config.json", "summary.json"):
            if not (folder / name).is_file():
                raise ValueError(f"{folder} is not a finished run directory (no {name})")
        config = RunSpec.from_mapping(json.loads((folder / "config.json").read_text()))
        summary = json.loads((folder / "summary.json").read_text())
        lines = (folder / "metrics.jsonl").read_text().splitlines() if (folder / "metrics.jsonl").is_file() else []
        return cls(folder, config, summary, tuple(json.loads(line) for line in lines if line.strip()), seconds)

    @cached_property
    def ledgers(self) -> Mapping[int, Mapping[str, Any]]:
        """Every user's ledger by user id (ledgers.json)."""
        users = json.loads((self.path / "ledgers.json").read_text()).get("users", {})
        return {int(user): ledger for user, ledger in users.items()}

    @cached_property
    def users(self) -> tuple[Mapping[str, Any], ...]:
        """The users table (users.csv), one row per user; empty if the run wrote none."""
        path = self.path / "users.csv"
        if not path.is_file():
            return ()
        with open(path, newline="") as handle:
            return tuple({key: _cell(value) for key, value in row.items()} for row in csv.DictReader(handle))

    @property
    def files(self) -> dict[str, Path]:
        """Every file of the run directory by name."""
        return {p.name: p for p in sorted(self.path.iterdir()) if p.is_file()}


def _cell(text: str) -> Any:
    """A users.csv cell as written (fed.reporting.run_record): an int, a float, None (empty) or text."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        return value if kind is int or not math.isnan(value) else None
    return text
