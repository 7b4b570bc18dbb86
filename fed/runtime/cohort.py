"""Users' clean records as arrays: what the release pipeline (fed.runtime.release) serves.

Scale mode: a simulated node hosts thousands of users. :meth:`Cohort.build` stacks their clean
records once per process; a single user's release is served from :meth:`Cohort.of_user`, the
same arrays for a cohort of one. :func:`summaries` gives the figures a reply reports per user.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ldpfed.fed.privacy.cohort_ledger import CohortKeys, CohortLedger
from ldpfed.fed.randomizers.base import Randomizer

if TYPE_CHECKING:
    from ldpfed.fed.runtime.user import UserRecords


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each start and length."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(np.asarray(starts, np.int64), lengths) + np.arange(total) - offsets


@dataclass(frozen=True)
class Cohort:
    """Clean records of a node's users, stacked (user i's rows: ``start[i]:start[i + 1]``).

    Columns are the ledger's: each user's records with the same content share one column, and
    user i's columns are ``column_start[i]:column_start[i + 1]``.
    """

    users: np.ndarray
    train: np.ndarray
    train_labels: np.ndarray
    train_start: np.ndarray
    train_column: np.ndarray
    train_first: np.ndarray
    """Whether a training record is the first of its column within its user (one release per content)."""
    query: np.ndarray
    query_labels: np.ndarray
    query_start: np.ndarray
    column_start: np.ndarray
    keys: CohortKeys | None = field(repr=False)
    """Where the users' ledgers live in the store (None: a cohort of one, whose ledger the caller holds)."""
    _prepared: dict = field(default_factory=dict, repr=False, compare=False)
    """The training rows through the latest randomizer's preprocessing, under its preprocess_key."""

    @classmethod
    def build(cls, records: Mapping[int, UserRecords], owner: Callable[[int], str]) -> "Cohort":
        """Stack ``records`` (user id -> clean records); ``owner(uid)`` names each user's account."""
        users = np.array(sorted(records), dtype=np.int64)
        parts = [records[int(u)] for u in users]
        dim = next((len(p.train[0]) for p in parts if len(p.train)), next((len(p.query[0]) for p in parts if len(p.query)), 0))
        n_train = np.array([len(p.train) for p in parts], dtype=np.int64)
        n_records = np.array([p.num_records for p in parts], dtype=np.int64)
        # A column per distinct (user, record id), numbered by user, then id.
        user_of = np.repeat(np.arange(len(parts)), n_records)
        ids = np.concatenate([np.asarray(p.record_ids).astype(str) for p in parts]) if parts else np.zeros(0, str)
        order = np.lexsort((ids, user_of))
        ids = ids[order]
        sorted_user = user_of[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (sorted_user[1:] != sorted_user[:-1]) | (ids[1:] != ids[:-1])
        column = np.empty(len(order), np.int64)
        column[order] = np.cumsum(new) - 1
        column_user = sorted_user[new]
        in_train = np.arange(len(order)) - np.repeat(np.cumsum(n_records) - n_records, n_records) < np.repeat(n_train, n_records)
        train_column = column[in_train]
        train_first = np.zeros(len(train_column), dtype=bool)
        train_first[np.unique(train_column, return_index=True)[1]] = True  # a column is one user's

        def stack(name: str, dtype: type) -> np.ndarray:
            """The users' arrays one after the other, converted while they are copied (one pass, no float32 copy first)."""
            arrays = [getattr(p, name) for p in parts]
            return np.concatenate(arrays, dtype=dtype, casting="unsafe") if arrays else np.zeros((0, dim), dtype)

        return cls(
            users=users,
            train=stack("train", np.float64).reshape(-1, dim),
            train_labels=stack("train_labels", np.int64).reshape(-1),
            train_start=np.concatenate([[0], np.cumsum(n_train)]).astype(np.int64),
            train_column=train_column,
            train_first=train_first,
            query=stack("query", np.float64).reshape(-1, dim),
            query_labels=stack("query_labels", np.int64).reshape(-1),
            query_start=np.cumsum([0] + [len(p.query) for p in parts]).astype(np.int64),
            column_start=np.searchsorted(column_user, np.arange(len(parts) + 1)).astype(np.int64),
            keys=CohortKeys([owner(int(u)) for u in users], column_user, ids[new].tolist()),
        )

    @classmethod
    def of_user(cls, user: int, records: "UserRecords", columns: np.ndarray) -> "Cohort":
        """One user's records as a cohort of one, its rows as they are; ``columns`` maps each record
        (training first, then queries) onto its ledger's columns."""
        n_train = len(records.train)
        train_column = np.asarray(columns[:n_train], dtype=np.int64)
        train_first = np.zeros(n_train, dtype=bool)
        train_first[np.unique(train_column, return_index=True)[1]] = True
        return cls(
            users=np.array([user], dtype=np.int64),
            train=records.train,
            train_labels=records.train_labels,
            train_start=np.array([0, n_train], dtype=np.int64),
            train_column=train_column,
            train_first=train_first,
            query=records.query,
            query_labels=records.query_labels,
            query_start=np.array([0, len(records.query)], dtype=np.int64),
            column_start=np.array([0, int(np.max(columns, initial=-1)) + 1], dtype=np.int64),
            keys=None,
        )

    def rows_for(self, randomizer: Randomizer) -> np.ndarray:
        """The training rows as ``randomizer`` releases them: through its preprocessing (computed
        once per preprocess key) where its release splits so, else as they are."""
        key = randomizer.preprocess_key()
        if key is None:
            return self.train
        if self._prepared.get("key") != key:
            self._prepared.clear()  # one copy of the rows at most: a new clip replaces the last
            self._prepared.update(key=key, rows=randomizer.preprocess(self.train))
        return self._prepared["rows"]

    def index(self, users: np.ndarray) -> np.ndarray:
        """Positions of hosted ``users`` in the cohort."""
        return np.searchsorted(self.users, users)

    def columns_of(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The columns of users ``idx``, grouped by user, and where each user's group starts."""
        lengths = self.column_start[idx + 1] - self.column_start[idx]
        return ranges(self.column_start[idx], lengths), np.cumsum(lengths) - lengths


def summaries(
    cohort: Cohort, ledger: CohortLedger, idx: np.ndarray, uids: np.ndarray, train_events: list
) -> dict[int, dict[str, float]]:
    """The figures a simulated user reports about its own ledger, for users ``idx`` (ids ``uids``): its
    sentence-level and user-level epsilon, its record releases, and how many of its training records
    can still afford one more release costing ``train_events`` (:meth:`fed.runtime.user.User.summary`)."""
    n = len(idx)
    columns, starts = cohort.columns_of(idx)
    lengths = np.diff(np.append(starts, len(columns)))
    nonempty = lengths > 0
    sentence = np.zeros(n)
    releases = np.zeros(n, np.int64)
    if len(columns):
        sentence[nonempty] = np.maximum.reduceat(ledger.column_epsilons(columns), starts[nonempty])
        releases[nonempty] = np.add.reduceat(ledger.counts[:, columns].sum(axis=0), starts[nonempty])
    n_train = cohort.train_start[idx + 1] - cohort.train_start[idx]
    records = ranges(cohort.train_start[idx], n_train)
    position = np.repeat(np.arange(n), n_train)
    first = cohort.train_first[records]
    left = np.bincount(position[first][ledger.affordable(train_events, cohort.train_column[records[first]])], minlength=n)
    user = ledger.user_epsilons(idx)
    return {
        int(u): {
            "epsilon_sentence": float(sentence[i]),
            "epsilon_user": float(user[i]),
            "releases": float(releases[i]),
            "train_records_left": float(left[i]),
        }
        for i, u in enumerate(uids.tolist())
    }
