"""A user's worst-case privacy ledger (design.md section 2).

Every release of a record is one run of its randomizer. A record's sentence-level cost is
the composition of its own releases; the user's sentence-level cost is the maximum over
its records; its user-level cost is the composition of all its releases. Counts are kept
per distinct event and composed on demand.

The ledger also logs the user's steps: for each kind of release (training or query, and
their label and evaluation releases), each sampling scheme and each randomizer event, how many
steps the user served, and how many reports left under each user-level event. The worst-case
figures never read that log (sampling never lowers them); the amplified accountants do, and so
does what a device reports (:meth:`Ledger.served_figures`), which must not depend on record content.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent, event_from_json
from fed.privacy.validators import check_delta

LABELS, EVALUATION, REPORTS = "labels", "evaluate", "reports"
"""Step-log kinds beside "train" and "query": a training step's label release, one model's randomized
outcomes in an evaluation, and (counted per user-level event, not per step) the reports that left."""
DEVICE_VIEW = "device"
"""The ``view`` of a device's ledger answer (:meth:`Ledger.device_json`): aggregates of the requests it
served, nothing computed from record content (docs/device.md, "What a device reveals")."""
FULL_VIEW = "full (simulation only)"
"""The ``view`` of a ledger answer inside the simulation engine: :meth:`Ledger.to_json`, counts per record."""


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
        check_delta(self.delta)


class EventCapReached(ValueError):
    """A release would add a distinct event past the ledger's cap; nothing was charged."""

    code = "policy"


class Ledger:
    """Per-record counts of privacy events for one user, with budget checks.

    Records with the same content (the same stable record id) share one column: spending
    follows the sentence, however many times it appears. The user-level account counts
    each report's user-level event (a mixup report mixes several records but is one run
    of its noise), separately from the per-record counts.

    Parameters
    ----------
    num_records:
        Number of records the user holds (public, as is the dataset size).
    budget:
        The budgets enforced before any release.
    columns:
        The column of each record (records sharing content share a column); default: one each.
    max_events:
        Most distinct events the ledger may hold (None: no cap).
    """

    def __init__(
        self, num_records: int, budget: Budget, columns: np.ndarray | None = None, max_events: int | None = None
    ) -> None:
        if num_records < 0:
            raise ValueError("num_records must be non-negative")
        self.num_records = int(num_records)
        self.budget = budget
        self.columns = np.arange(self.num_records) if columns is None else np.asarray(columns, dtype=np.int64)
        if self.columns.shape != (self.num_records,):
            raise ValueError(f"columns must give one column per record, got shape {self.columns.shape}")
        self.num_columns = int(self.columns.max(initial=-1)) + 1
        self.max_events = max_events
        self.events: list[PrivacyEvent] = []
        self.counts = np.zeros((0, self.num_columns), dtype=np.int64)
        self.user_counts: Counter[PrivacyEvent] = Counter()
        self.steps: dict[tuple[str, str, PrivacyEvent], int] = {}

    # -- queries -----------------------------------------------------------------------
    def record_counts(self) -> np.ndarray:
        """Counts per event and record (events x records; records sharing content show the same)."""
        return self.counts[:, self.columns]

    def record_epsilons(self) -> np.ndarray:
        """Sentence-level epsilon of every record at the budget's delta."""
        eps = np.zeros(self.num_columns)
        if self.counts.size:
            columns, inverse = np.unique(self.counts, axis=1, return_inverse=True)
            values = [self._compose_column(columns[:, j]) for j in range(columns.shape[1])]
            eps = np.asarray(values)[inverse.reshape(-1)]
        return eps[self.columns]

    def sentence_epsilon(self) -> float:
        """Worst-case sentence-level epsilon: the maximum over records."""
        return float(self.record_epsilons().max(initial=0.0))

    def user_epsilon(self) -> float:
        """User-level epsilon: the composition of every report's user-level event."""
        return compose_epsilon(+self.user_counts, self.budget.delta)

    def served_figures(self, enforced: bool) -> dict[str, float]:
        """What a device reports of its spending, from its step log alone (the requests it served).

        Sentence level: the composition of every served step's events (a step charges each
        record at most once under each); user level: the composition of every report that
        left (:meth:`log_reports`). Both bound every record and the user whatever the records
        hold, and each is capped by its budget where the ledger enforces it (``enforced``: the
        sentence budget on this worst-case ledger; the user-level budget always).
        """
        steps: Counter[PrivacyEvent] = Counter()
        reports: Counter[PrivacyEvent] = Counter()
        for (kind, _, event), n in self.steps.items():
            (reports if kind == REPORTS else steps)[event] += n
        sentence = compose_epsilon(steps, self.budget.delta)
        return {
            "epsilon_sentence": min(sentence, self.budget.epsilon_sentence) if enforced else sentence,
            "epsilon_user": min(compose_epsilon(reports, self.budget.delta), self.budget.epsilon_user),
        }

    def releases(self) -> int:
        """Number of record releases so far (one per record and event)."""
        return int(self.counts.sum())

    def admits(self, events: Sequence[PrivacyEvent]) -> None:
        """EventCapReached if charging ``events`` would hold more distinct events than the cap."""
        new = {e for e in events if e not in self.events and e not in self.user_counts}
        held = len(set(self.events) | set(self.user_counts))
        if self.max_events is not None and held + len(new) > self.max_events:
            raise EventCapReached(
                f"the ledger holds {held} distinct privacy events; {len(new)} more would pass the policy's cap of {self.max_events}"
            )

    def remaining(self, events: Sequence[PrivacyEvent], candidates: np.ndarray) -> np.ndarray:
        """The candidate record ids that can afford one more release costing ``events``.

        Of several candidates with the same content only the first is returned, so that
        releasing every returned id charges each column at most once.
        """
        candidates = self._check_ids(candidates)
        if not candidates.size:
            return candidates
        _, first = np.unique(self.columns[candidates], return_index=True)
        candidates = candidates[np.sort(first)]
        cols = self.columns[candidates]
        known = [*self.events, *(e for e in dict.fromkeys(events) if e not in self.events)]
        after = np.zeros((len(known), candidates.size), dtype=np.int64)
        after[: len(self.events)] = self.counts[:, cols]
        for event in events:
            after[known.index(event)] += 1
        columns, inverse = np.unique(after, axis=1, return_inverse=True)
        ok = np.array(
            [
                _compose(known, columns[:, j], self.budget.delta) <= self.budget.epsilon_sentence
                for j in range(columns.shape[1])
            ]
        )
        return candidates[ok[inverse.reshape(-1)]]

    def user_can_afford(self, user_events: Mapping[PrivacyEvent, int]) -> bool:
        """Whether more reports costing ``user_events`` (event -> count) stay within the user-level budget."""
        if math.isinf(self.budget.epsilon_user):
            return True
        return compose_epsilon(+(self.user_counts + Counter(user_events)), self.budget.delta) <= self.budget.epsilon_user

    # -- updates -----------------------------------------------------------------------
    def charge(
        self, events: Sequence[PrivacyEvent], record_ids: np.ndarray, user_events: Mapping[PrivacyEvent, int] | None = None
    ) -> None:
        """Record one release costing ``events`` on each record id, and the reports' user-level events.

        ``user_events`` (event -> number of reports) defaults to one ``events`` per record id.
        """
        record_ids = self._check_ids(record_ids)
        if user_events is None:
            user_events = {event: int(record_ids.size) for event in events}
        self.admits([*events, *user_events])
        for event in events:
            row = self._row(event)
            np.add.at(self.counts[row], self.columns[record_ids], 1)
        self.user_counts.update({e: int(n) for e, n in user_events.items() if n})

    def log_step(self, kind: str, sampling: str, event: PrivacyEvent) -> None:
        """Record that the user served one step of ``kind`` sampled by ``sampling`` through ``event``."""
        key = (kind, sampling, event)
        self.steps[key] = self.steps.get(key, 0) + 1

    def log_reports(self, sampling: str, user_events: Mapping[PrivacyEvent, int]) -> None:
        """Count the reports that left in one step (event -> reports; memoized and fictitious ones included)."""
        for event, n in user_events.items():
            if n:
                key = (REPORTS, sampling, event)
                self.steps[key] = self.steps.get(key, 0) + int(n)

    def step_log(self, kind: str) -> list[tuple[str, PrivacyEvent, int]]:
        """(sampling spec, event, number of steps) of every step of ``kind`` so far."""
        return [(s, e, n) for (k, s, e), n in self.steps.items() if k == kind]

    # -- serialisation -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Each distinct event and how many times each record used it, the user-level account, the budget.

        ``columns`` names, for every record, the records it shares its spending with (same content).
        """
        counts = self.record_counts()
        return {
            "num_records": self.num_records,
            "columns": self.columns.tolist(),
            "budget": self._budget_json(),
            "events": [{"event": e.to_json(), "counts_per_record": counts[i].tolist()} for i, e in enumerate(self.events)],
            "user_events": [{"event": e.to_json(), "reports": n} for e, n in self.user_counts.items()],
            "steps": self._steps_json(),
        }

    def _budget_json(self) -> dict[str, float]:
        return {"epsilon_sentence": self.budget.epsilon_sentence, "epsilon_user": self.budget.epsilon_user, "delta": self.budget.delta}

    def _steps_json(self) -> list[dict[str, Any]]:
        return [{"kind": k, "sampling": s, "event": e.to_json(), "steps": n} for (k, s, e), n in self.steps.items()]

    def device_json(self, enforced: bool) -> dict[str, Any]:
        """A device's ledger answer: budget, :meth:`served_figures` and the step log (the server's own
        requests), with no record index or count (``enforced``: budgets enforced on this ledger)."""
        return {
            "view": DEVICE_VIEW,
            "num_records": self.num_records,
            "budget": self._budget_json(),
            **self.served_figures(enforced),
            "steps": self._steps_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Ledger":
        """Rebuild a ledger from :meth:`to_json` output (from a :meth:`device_json` answer: budget and step log only)."""
        budget = Budget(**{k: float(v) for k, v in data["budget"].items()})  # JSON may hold "inf"
        columns = np.asarray(data["columns"], dtype=np.int64) if "columns" in data else None
        ledger = cls(data["num_records"], budget, columns)
        events = data.get("events", [])
        for entry in events:
            ledger.events.append(event_from_json(entry["event"]))
        rows = np.asarray([entry["counts_per_record"] for entry in events], dtype=np.int64)
        _, first = np.unique(ledger.columns, return_index=True)  # one record per column carries its count
        ledger.counts = rows.reshape(len(rows), ledger.num_records)[:, first]
        for entry in data.get("user_events", []):
            ledger.user_counts[event_from_json(entry["event"])] += int(entry["reports"])
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
        self.counts = np.vstack([self.counts, np.zeros((1, self.num_columns), dtype=np.int64)])
        return len(self.events) - 1

    def _compose_column(self, column: np.ndarray) -> float:
        return _compose(self.events, column, self.budget.delta)


def _compose(events: list[PrivacyEvent], column: np.ndarray, delta: float) -> float:
    return compose_epsilon({e: int(n) for e, n in zip(events, column) if n > 0}, delta)
