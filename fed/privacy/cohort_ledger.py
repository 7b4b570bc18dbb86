"""The one ledger model (design.md section 2): the worst-case ledgers of any number of users as arrays.

Counts per event and record column, the user-level account per event and user, and the step
log per (kind, sampling, event) and user. A user's records with the same content share one
column. Every budget question is answered for all users in one pass: the count vectors that
occur are few (users spend alike), so each distinct vector is composed once (and cached,
fed.privacy.composition) and the answer is spread back. :class:`fed.privacy.ledger.Ledger` is
this model for one user (its records mapped onto its columns); a node's cohort is the same
model for all its users. tests/test_cohort.py checks both against a reference ledger.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PrivacyEvent

if TYPE_CHECKING:
    from ldpfed.fed.privacy.ledger import Budget

LABELS, EVALUATION, REPORTS = "labels", "evaluate", "reports"
"""Step-log kinds beside "train" and "query": a training step's label release, one model's randomized
outcomes in an evaluation, and (counted per user-level event, not per step) the reports that left."""

StepKey = tuple[str, str, PrivacyEvent]


class CohortLedger:
    """Counts of privacy events for many users whose records are columns of one table.

    Parameters
    ----------
    column_user:
        The user (index into the cohort) each record column belongs to; a user's records with
        the same content share one column.
    num_users:
        Users in the cohort.
    budget:
        The budgets every user enforces.
    max_events:
        Most distinct events one user's ledger may hold (None: no cap).
    """

    def __init__(self, column_user: np.ndarray, num_users: int, budget: Budget, max_events: int | None = None) -> None:
        self.column_user = np.asarray(column_user, dtype=np.int64)
        self.num_users = int(num_users)
        self.budget = budget
        self.max_events = max_events
        self.events: list[PrivacyEvent] = []
        self.counts = np.zeros((0, len(self.column_user)), dtype=np.int64)
        self.user_counts = np.zeros((0, self.num_users), dtype=np.int64)
        self.steps: dict[StepKey, np.ndarray] = {}

    # -- structure ---------------------------------------------------------------------
    def row(self, event: PrivacyEvent) -> int:
        """The row of ``event`` (added, all zero, when new)."""
        if event not in self.events:
            self.events.append(event)
            self.counts = np.vstack([self.counts, np.zeros((1, self.counts.shape[1]), np.int64)])
            self.user_counts = np.vstack([self.user_counts, np.zeros((1, self.num_users), np.int64)])
        return self.events.index(event)

    def _increment(self, events: Sequence[PrivacyEvent]) -> np.ndarray:
        """One more run of each of ``events``, as a vector over the rows (rows added as needed)."""
        rows = [self.row(e) for e in events]
        inc = np.zeros(len(self.events), np.int64)
        np.add.at(inc, rows, 1)
        return inc

    def _epsilons(self, vectors: np.ndarray) -> np.ndarray:
        """Epsilon at the budget's delta of each column of ``vectors`` (events x n)."""
        if vectors.shape[1] == 0:
            return np.zeros(0)
        if vectors.shape[0] == 0:
            return np.zeros(vectors.shape[1])
        unique, inverse = _unique_columns(vectors)
        values = np.array(
            [
                compose_epsilon({e: int(n) for e, n in zip(self.events, unique[:, j]) if n > 0}, self.budget.delta)
                for j in range(unique.shape[1])
            ]
        )
        return values[inverse.reshape(-1)]

    # -- questions -----------------------------------------------------------------------
    def affordable(self, events: Sequence[PrivacyEvent], columns: np.ndarray) -> np.ndarray:
        """For each column, whether one more release costing ``events`` stays within the sentence budget."""
        inc = self._increment(events)
        return self._epsilons(self.counts[:, columns] + inc[:, None]) <= self.budget.epsilon_sentence

    def users_can_afford(self, user_events: dict[PrivacyEvent, np.ndarray], users: np.ndarray) -> np.ndarray:
        """For each user, whether its reports costing ``user_events`` (event -> count per user) fit its user budget."""
        if math.isinf(self.budget.epsilon_user):
            return np.ones(len(users), dtype=bool)
        rows = {event: self.row(event) for event in user_events}  # before the copy: new rows are zero
        after = self.user_counts[:, users].copy()
        for event, n in user_events.items():
            after[rows[event]] += n
        return self._epsilons(after) <= self.budget.epsilon_user

    def events_held(self, user_columns: np.ndarray, column_starts: np.ndarray, users: np.ndarray) -> np.ndarray:
        """Per user (events x users, bool): which events its ledger holds (records or user-level account).

        ``user_columns`` lists the users' columns grouped by user, group i starting at ``column_starts[i]``.
        """
        held = self.user_counts[:, users] > 0
        if len(user_columns) and self.counts.shape[0]:
            spent = (self.counts[:, user_columns] > 0).astype(np.int64)
            nonempty = np.diff(np.append(column_starts, len(user_columns))) > 0
            sums = np.zeros((len(self.events), len(users)), np.int64)
            sums[:, nonempty] = np.add.reduceat(spent, column_starts[nonempty], axis=1)
            held |= sums > 0
        return held

    def column_epsilons(self, columns: np.ndarray) -> np.ndarray:
        """Sentence-level epsilon of each of ``columns``."""
        return self._epsilons(self.counts[:, columns])

    def user_epsilons(self, users: np.ndarray) -> np.ndarray:
        """User-level epsilon of each of ``users``."""
        return self._epsilons(self.user_counts[:, users])

    # -- updates -------------------------------------------------------------------------
    def charge_columns(
        self,
        events: Sequence[PrivacyEvent],
        columns: np.ndarray,
        user_events: dict[PrivacyEvent, np.ndarray],
        users: np.ndarray,
    ) -> None:
        """One release costing ``events`` on each of ``columns``; ``user_events`` reports per user of ``users``."""
        rows = [self.row(e) for e in events]  # first: a new row replaces the arrays
        user_rows = {event: self.row(event) for event in user_events}
        for row in rows:
            np.add.at(self.counts[row], columns, 1)
        for event, n in user_events.items():
            np.add.at(self.user_counts[user_rows[event]], users, n)

    def log_steps(
        self, kind: str, sampling: str, event: PrivacyEvent, users: np.ndarray, counts: np.ndarray | int = 1
    ) -> None:
        """Each of ``users`` served one step of ``kind`` sampled by ``sampling`` through ``event``
        (``counts``: how many to add per user, e.g. reports for fed.privacy.ledger.REPORTS)."""
        counts = np.broadcast_to(np.asarray(counts, np.int64), np.shape(users))
        if not len(counts) or (kind == REPORTS and not counts.any()):
            return
        log = self.steps.setdefault((kind, sampling, event), np.zeros(self.num_users, np.int64))
        np.add.at(log, users, counts)


def _unique_columns(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct columns of a non-negative integer matrix, and each column's index among them.

    Columns are packed into one integer each (mixed radix) where that fits in 63 bits: a 1-D
    unique is much faster than numpy's unique over axis 1.
    """
    base = int(vectors.max(initial=0)) + 1
    if base ** vectors.shape[0] >= 2**63:
        unique, inverse = np.unique(vectors, axis=1, return_inverse=True)
        return unique, inverse.reshape(-1)
    radix = np.array([base**i for i in range(vectors.shape[0])], dtype=np.int64)
    _, first, inverse = np.unique(radix @ vectors, return_index=True, return_inverse=True)
    return vectors[:, first], inverse.reshape(-1)


class CohortKeys:
    """Where a cohort's ledger lives in the store: each user's owner, each column's record id.

    Parameters
    ----------
    owners:
        The owner of each user's spending (distinct: one account per user).
    column_user, column_keys:
        The user (index into ``owners``) and the stable record id of each column.
    """

    def __init__(self, owners: Sequence[str], column_user: np.ndarray, column_keys: Sequence[str]) -> None:
        if len(set(owners)) != len(owners):
            raise ValueError("a cohort's users must have distinct owners")
        self.owners = list(owners)
        self.column_user = np.asarray(column_user, dtype=np.int64)
        self.column_keys = list(column_keys)
        self.user_of = {owner: i for i, owner in enumerate(self.owners)}
        order = np.argsort(self.column_user, kind="stable")
        self._by_user = (
            order,
            np.searchsorted(self.column_user[order], np.arange(len(self.owners) + 1)).tolist(),
            [self.column_keys[j] for j in order.tolist()],
        )

    def by_user(self) -> tuple[np.ndarray, list[int], list[str]]:
        """Columns grouped by user: their order, where user i's group starts (and ends, at i + 1), their record ids in that order."""
        return self._by_user
