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


class FrozenDict(dict):
    """A mapping read from a run directory, read-only (TypeError on a change); unlike a MappingProxyType it is still
    a dict to ``json.dumps`` and ``pickle``."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a run's mappings are read-only; change a copy: dict(...)")

    __setitem__ = __delitem__ = __ior__ = _read_only  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type, tuple[dict[Any, Any]]]:
        return FrozenDict, (dict(self),)


class FrozenList(tuple):
    """A list read from a run directory, read-only: a tuple that equals the list of the same items."""

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, list) else tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def frozen(value: Any) -> Any:
    """``value`` (read from JSON) read-only all the way down: each dict a FrozenDict, each list a FrozenList; equal
    to ``value``."""
    if isinstance(value, dict):
        return FrozenDict({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(frozen(item) for item in value)
    return value


@dataclass(frozen=True)
class Run:
    """One run of :func:`ldpfed.simulate`, as its run directory holds it; its mappings and lists are read-only
    (:func:`frozen`: ``dict(run.summary)`` is a copy to change).

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
        summary = frozen(json.loads((folder / "summary.json").read_text()))
        lines = (folder / "metrics.jsonl").read_text().splitlines() if (folder / "metrics.jsonl").is_file() else []
        return cls(folder, config, summary, tuple(frozen(json.loads(line)) for line in lines if line.strip()), seconds)

    @cached_property
    def ledgers(self) -> Mapping[int, Mapping[str, Any]]:
        """Every user's ledger by user id (ledgers.json)."""
        users = json.loads((self.path / "ledgers.json").read_text()).get("users", {})
        return frozen({int(user): ledger for user, ledger in users.items()})

    @cached_property
    def users(self) -> tuple[Mapping[str, Any], ...]:
        """The users table (users.csv), one row per user; empty if the run wrote none."""
        path = self.path / "users.csv"
        if not path.is_file():
            return ()
        with open(path, newline="") as handle:
            return tuple(frozen({key: _cell(value) for key, value in row.items()}) for row in csv.DictReader(handle))

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
