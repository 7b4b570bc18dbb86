"""A user's worst-case privacy ledger (design.md section 2).

Every release of a record is one run of its randomizer. A record's sentence-level cost is
the composition of its own releases; the user's sentence-level cost is the maximum over
its records; its user-level cost is the composition of all its releases. Counts are kept
per distinct event and composed on demand.

The ledger also logs the user's steps: for each kind of release (training or query), each
sampling scheme and each randomizer event, how many steps the user served. The worst-case
figures never read that log (sampling never lowers them); the amplified accountants do.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent, event_from_json


@dataclass(frozen=True)
class Budget:
    """Sentence-level and user-level epsilon budgets at one delta."""

    epsilon_sentence: float
    delta: float
    epsilon_user: float = math.inf

    def __post_init__(self) -> None:
        for name in ("epsilon_sentence", "epsilon_user"):
            value = getattr(self, name)
            if math.isnan(value) or value <= 0:
                raise ValueError(f"{name} budget must be positive, got {value!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")


class Ledger:
    """Per-record counts of privacy events for one user, with budget checks.

    Parameters
    ----------
    num_records:
        Number of records the user holds (public, as is the dataset size).
    budget:
        The budgets enforced before any release.
    """

    def __init__(self, num_records: int, budget: Budget) -> None:
        if num_records < 0:
            raise ValueError("num_records must be non-negative")
        self.num_records = int(num_records)
        self.budget = budget
        self.events: list[PrivacyEvent] = []
        self.counts = np.zeros((0, self.num_records), dtype=np.int64)
        self.steps: dict[tuple[str, str, PrivacyEvent], int] = {}

    # -- queries -----------------------------------------------------------------------
    def record_epsilons(self) -> np.ndarray:
        """Sentence-level epsilon of every record at the budget's delta."""
        eps = np.zeros(self.num_records)
        if self.counts.size == 0:
            return eps
        columns, inverse = np.unique(self.counts, axis=1, return_inverse=True)
        values = [self._compose_column(columns[:, j]) for j in range(columns.shape[1])]
        return np.asarray(values)[inverse.reshape(-1)]

    def sentence_epsilon(self) -> float:
        """Worst-case sentence-level epsilon: the maximum over records."""
        return float(self.record_epsilons().max(initial=0.0))

    def user_epsilon(self) -> float:
        """User-level epsilon: the composition of every release."""
        return self._compose_column(self.counts.sum(axis=1))

    def releases(self) -> int:
        """Number of record releases so far."""
        return int(self.counts.sum())

    def remaining(self, events: Sequence[PrivacyEvent], candidates: np.ndarray) -> np.ndarray:
        """The candidate record ids that can afford one more release costing ``events``."""
        candidates = self._check_ids(candidates)
        known = [*self.events, *(e for e in dict.fromkeys(events) if e not in self.events)]
        after = np.zeros((len(known), candidates.size), dtype=np.int64)
        after[: len(self.events)] = self.counts[:, candidates]
        for event in events:
            after[known.index(event)] += 1
        if not candidates.size:
            return candidates
        columns, inverse = np.unique(after, axis=1, return_inverse=True)
        ok = np.array(
            [
                _compose(known, columns[:, j], self.budget.delta) <= self.budget.epsilon_sentence
                for j in range(columns.shape[1])
            ]
        )
        return candidates[ok[inverse.reshape(-1)]]

    def user_can_afford(self, events: Sequence[PrivacyEvent], count: int) -> bool:
        """Whether ``count`` more releases costing ``events`` stay within the user-level budget."""
        if math.isinf(self.budget.epsilon_user):
            return True
        total = Counter(dict(zip(self.events, self.counts.sum(axis=1).tolist())))
        for event in events:
            total[event] += count
        return compose_epsilon(total, self.budget.delta) <= self.budget.epsilon_user

    # -- updates -----------------------------------------------------------------------
    def charge(self, events: Sequence[PrivacyEvent], record_ids: np.ndarray) -> None:
        """Record one release costing ``events`` on each record id (ids may repeat)."""
        record_ids = self._check_ids(record_ids)
        for event in events:
            row = self._row(event)
            np.add.at(self.counts[row], record_ids, 1)

    def log_step(self, kind: str, sampling: str, event: PrivacyEvent) -> None:
        """Record that the user served one step of ``kind`` sampled by ``sampling`` through ``event``."""
        key = (kind, sampling, event)
        self.steps[key] = self.steps.get(key, 0) + 1

    def step_log(self, kind: str) -> list[tuple[str, PrivacyEvent, int]]:
        """(sampling spec, event, number of steps) of every step of ``kind`` so far."""
        return [(s, e, n) for (k, s, e), n in self.steps.items() if k == kind]

    # -- serialisation -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Each distinct event and how many times each record used it, plus the budget."""
        return {
            "num_records": self.num_records,
            "budget": {
                "epsilon_sentence": self.budget.epsilon_sentence,
                "epsilon_user": self.budget.epsilon_user,
                "delta": self.budget.delta,
            },
            "events": [
                {"event": e.to_json(), "counts_per_record": self.counts[i].tolist()}
                for i, e in enumerate(self.events)
            ],
            "steps": [
                {"kind": k, "sampling": s, "event": e.to_json(), "steps": n} for (k, s, e), n in self.steps.items()
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Ledger":
        """Rebuild a ledger from :meth:`to_json` output."""
        ledger = cls(data["num_records"], Budget(**data["budget"]))
        for entry in data["events"]:
            ledger.events.append(event_from_json(entry["event"]))
        rows = [entry["counts_per_record"] for entry in data["events"]]
        ledger.counts = np.asarray(rows, dtype=np.int64).reshape(len(rows), ledger.num_records)
        for entry in data.get("steps", []):
            ledger.steps[(entry["kind"], entry["sampling"], event_from_json(entry["event"]))] = int(entry["steps"])
        return ledger

    # -- internals ---------------------------------------------------------------------
    def _check_ids(self, record_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(record_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_records):
            raise ValueError(f"record id out of range [0, {self.num_records})")
        return ids

    def _row(self, event: PrivacyEvent) -> int:
        if event in self.events:
            return self.events.index(event)
        self.events.append(event)
        self.counts = np.vstack([self.counts, np.zeros((1, self.num_records), dtype=np.int64)])
        return len(self.events) - 1

    def _compose_column(self, column: np.ndarray) -> float:
        return _compose(self.events, column, self.budget.delta)


def _compose(events: list[PrivacyEvent], column: np.ndarray, delta: float) -> float:
    return compose_epsilon({e: int(n) for e, n in zip(events, column) if n > 0}, delta)
