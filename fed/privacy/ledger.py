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

from ldpfed.fed.privacy.cohort_ledger import EVALUATION, LABELS, REPORTS, CohortLedger
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PrivacyEvent, event_from_json
from ldpfed.fed.privacy.validators import check_delta

__all__ = ["DEVICE_VIEW", "EVALUATION", "FULL_VIEW", "LABELS", "REPORTS", "Budget", "Ledger"]

DEVICE_VIEW = "device"
"""The ``view`` of a device's ledger answer (:meth:`Ledger.device_json`): aggregates of the requests it
served, nothing computed from record content (docs/device.md, "What a device reveals")."""
FULL_VIEW = "full (simulation only)"
"""The ``view`` of a ledger answer inside the simulation engine: :meth:`Ledger.to_json`, counts per record."""
ONE = np.zeros(1, dtype=np.int64)
"""The index of a one-user ledger's user."""


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


class Ledger(CohortLedger):
    """One user's ledger: the one ledger model (:class:`~fed.privacy.cohort_ledger.CohortLedger`) with one
    user, its records mapped onto its columns.

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
        self.columns = np.arange(self.num_records) if columns is None else np.asarray(columns, dtype=np.int64)
        if self.columns.shape != (self.num_records,):
            raise ValueError(f"columns must give one column per record, got shape {self.columns.shape}")
        self.num_columns = int(self.columns.max(initial=-1)) + 1
        super().__init__(np.zeros(self.num_columns, dtype=np.int64), 1, budget, max_events)

    # -- queries -----------------------------------------------------------------------
    def record_counts(self) -> np.ndarray:
        """Counts per event and record (rows: :attr:`events`; records sharing content show the same)."""
        return self.counts[:, self.columns]

    def record_epsilons(self) -> np.ndarray:
        """Sentence-level epsilon of every record at the budget's delta."""
        return self.column_epsilons(np.arange(self.num_columns))[self.columns]

    def sentence_epsilon(self) -> float:
        """Worst-case sentence-level epsilon: the maximum over records."""
        return float(self.record_epsilons().max(initial=0.0))

    def user_epsilon(self) -> float:
        """User-level epsilon: the composition of every report's user-level event."""
        return float(self.user_epsilons(ONE)[0])

    def user_reports(self) -> dict[PrivacyEvent, int]:
        """The user-level account: reports that left under each event (events with none left out)."""
        return {e: int(n) for e, n in zip(self.events, self.user_counts[:, 0].tolist()) if n}

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
            (reports if kind == REPORTS else steps)[event] += int(n[0])
        sentence = compose_epsilon(steps, self.budget.delta)
        return {
            "epsilon_sentence": min(sentence, self.budget.epsilon_sentence) if enforced else sentence,
            "epsilon_user": min(compose_epsilon(reports, self.budget.delta), self.budget.epsilon_user),
        }

    def releases(self) -> int:
        """Number of record releases so far (one per record and event)."""
        return int(self.counts.sum())

    def events_held_with(self, events: Sequence[PrivacyEvent]) -> tuple[int, int]:
        """How many distinct events the ledger holds, and how many of ``events`` it does not hold yet."""
        held = self.events_held(np.arange(self.num_columns), np.zeros(1, np.int64), ONE)[:, 0]
        have = {e for e, h in zip(self.events, held.tolist()) if h}
        return len(have), len(set(events) - have)

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
        return candidates[self.affordable(events, self.columns[candidates])]

    def user_can_afford(self, user_events: Mapping[PrivacyEvent, int]) -> bool:
        """Whether more reports costing ``user_events`` (event -> count) stay within the user-level budget."""
        return bool(self.users_can_afford({e: np.array([int(n)]) for e, n in user_events.items()}, ONE)[0])

    # -- updates -----------------------------------------------------------------------
    def charge(
        self, events: Sequence[PrivacyEvent], record_ids: np.ndarray, user_events: Mapping[PrivacyEvent, int] | None = None
    ) -> None:
        """Record one release costing ``events`` on each record id, and the reports' user-level events.

        ``user_events`` (event -> number of reports) defaults to one ``events`` per record id.
        Past the event cap it raises ValueError, having charged nothing (the release pipeline,
        fed.runtime.release, refuses such a release before anything is drawn).
        """
        record_ids = self._check_ids(record_ids)
        if user_events is None:
            user_events = {event: int(record_ids.size) for event in events}
        held, new = self.events_held_with([*events, *user_events])
        if self.max_events is not None and held + new > self.max_events:
            raise ValueError(f"a charge past the ledger's cap of {self.max_events} distinct events")
        self.charge_columns(events, self.columns[record_ids], {e: np.array([int(n)]) for e, n in user_events.items()}, ONE)

    def log_step(self, kind: str, sampling: str, event: PrivacyEvent) -> None:
        """Record that the user served one step of ``kind`` sampled by ``sampling`` through ``event``."""
        self.log_steps(kind, sampling, event, ONE)

    def log_reports(self, sampling: str, user_events: Mapping[PrivacyEvent, int]) -> None:
        """Count the reports that left in one step (event -> reports; memoized and fictitious ones included)."""
        for event, n in user_events.items():
            self.log_steps(REPORTS, sampling, event, ONE, int(n))

    def step_log(self, kind: str) -> list[tuple[str, PrivacyEvent, int]]:
        """(sampling spec, event, number of steps) of every step of ``kind`` so far."""
        return [(s, e, int(n[0])) for (k, s, e), n in self.steps.items() if k == kind]

    # -- serialisation -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """Each event charged to records and how many times each record used it, the user-level account, the budget.

        ``columns`` names, for every record, the records it shares its spending with (same content).
        """
        counts = self.record_counts()
        return {
            "num_records": self.num_records,
            "columns": self.columns.tolist(),
            "budget": self._budget_json(),
            "events": [
                {"event": e.to_json(), "counts_per_record": counts[i].tolist()}
                for i, e in enumerate(self.events)
                if self.counts[i].any()
            ],
            "user_events": [{"event": e.to_json(), "reports": n} for e, n in self.user_reports().items()],
            "steps": self._steps_json(),
        }

    def _budget_json(self) -> dict[str, float]:
        return {"epsilon_sentence": self.budget.epsilon_sentence, "epsilon_user": self.budget.epsilon_user, "delta": self.budget.delta}

    def _steps_json(self) -> list[dict[str, Any]]:
        return [{"kind": k, "sampling": s, "event": e.to_json(), "steps": int(n[0])} for (k, s, e), n in self.steps.items()]

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
        _, first = np.unique(ledger.columns, return_index=True)  # one record per column carries its count
        for entry in data.get("events", []):
            row = ledger.row(event_from_json(entry["event"]))
            ledger.counts[row] = np.asarray(entry["counts_per_record"], dtype=np.int64).reshape(ledger.num_records)[first]
        for entry in data.get("user_events", []):
            row = ledger.row(event_from_json(entry["event"]))  # first: a new row replaces the arrays
            ledger.user_counts[row, 0] += int(entry["reports"])
        for entry in data.get("steps", []):
            ledger.steps[(entry["kind"], entry["sampling"], event_from_json(entry["event"]))] = np.array([int(entry["steps"])])
        return ledger

    # -- internals ---------------------------------------------------------------------
    def _check_ids(self, record_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(record_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_records):
            raise ValueError(f"record id out of range [0, {self.num_records})")
        return ids
