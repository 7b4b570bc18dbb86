"""A node's hosted users as arrays, and a training step served for all of them at once.

Scale mode: a simulated node hosts thousands of users. :class:`Cohort` stacks their clean
records once per process; :func:`train_step` answers one training request for every user it
names with the decisions :meth:`fed.user.User.release` takes one user at a time: the same
candidates (records whose sentence-level budget affords one more release, one per content),
the same sampling, the same user-level and event-cap checks, the same charges and step log,
and the same refusals. Only the order of the random draws differs: one generator serves the
whole message, each report still gets fresh noise. tests/test_cohort.py runs both paths on
the same requests and compares ledgers, refusals and summaries.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from fed.privacy.cohort_ledger import CohortKeys, CohortLedger
from fed.privacy.ledger import LABELS, REPORTS, EventCapReached
from fed.randomizers.base import Randomizer
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.report_sums import GRAM_BLOCK, ReportSums
from fed.requests import ReleaseRequest
from fed.sampling import TrainSampling
from fed.user import BudgetExhausted, UserRecords


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
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
    keys: CohortKeys = field(repr=False)
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

        def stack(name: str) -> np.ndarray:
            arrays = [getattr(p, name) for p in parts]
            return np.concatenate(arrays) if arrays else np.zeros((0, dim))

        return cls(
            users=users,
            train=np.asarray(stack("train"), dtype=np.float64).reshape(-1, dim),
            train_labels=np.asarray(stack("train_labels"), dtype=np.int64).reshape(-1),
            train_start=np.concatenate([[0], np.cumsum(n_train)]).astype(np.int64),
            train_column=train_column,
            train_first=train_first,
            query=np.asarray(stack("query"), dtype=np.float64).reshape(-1, dim),
            query_labels=np.asarray(stack("query_labels"), dtype=np.int64).reshape(-1),
            query_start=np.cumsum([0] + [len(p.query) for p in parts]).astype(np.int64),
            column_start=np.searchsorted(column_user, np.arange(len(parts) + 1)).astype(np.int64),
            keys=CohortKeys([owner(int(u)) for u in users], column_user, ids[new].tolist()),
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
        return _ranges(self.column_start[idx], lengths), np.cumsum(lengths) - lengths


@dataclass
class CohortStep:
    """What one training request released for many users, in the order the request names them.

    When the request asks for sums (``summarise``), ``sums`` holds those of the decoded reports and
    ``reports`` and ``labels`` are empty.
    """

    reports: np.ndarray
    labels: np.ndarray
    users: np.ndarray
    refusals: dict[int, tuple[str, str]]
    summaries: dict[int, dict[str, float]]
    release_seconds: float
    """Seconds spent drawing the reports and summing them (the rest of a step is ledger work)."""
    sums: ReportSums | None = None


def train_step(
    cohort: Cohort,
    ledger: CohortLedger,
    request: ReleaseRequest,
    labels: PublicLabels | RandomizedResponse,
    rng: np.random.Generator,
) -> CohortStep:
    """Serve one training step of every user ``request`` names (distinct, hosted users)."""
    randomizer = request.randomizer
    events = [randomizer.event] + ([labels.event] if labels.event is not None else [])
    sampling = TrainSampling.parse(request.sampling)
    uids = np.asarray(request.users, dtype=np.int64)
    idx = cohort.index(uids)
    n_users = len(idx)
    refusals: dict[int, tuple[str, str]] = {}

    def refuse(positions: np.ndarray, error: type[Exception], reason: Callable[[int], str]) -> None:
        for position in positions.tolist():
            uid = int(uids[position])
            refusals[uid] = (str(error.code), reason(uid))  # type: ignore[attr-defined]

    n_train = cohort.train_start[idx + 1] - cohort.train_start[idx]
    records = _ranges(cohort.train_start[idx], n_train)
    position = np.repeat(np.arange(n_users), n_train)
    first = cohort.train_first[records]
    records, position = records[first], position[first]
    ok = ledger.affordable(events, cohort.train_column[records])
    candidates, owner = records[ok], position[ok]
    n_candidates = np.bincount(owner, minlength=n_users)
    refuse(np.flatnonzero(n_train == 0), BudgetExhausted, lambda u: f"user {u}: holds no train records")
    refuse(
        np.flatnonzero((n_train > 0) & (n_candidates == 0)),
        BudgetExhausted,
        lambda u: f"user {u}: no train record has budget left",
    )
    chosen = _select(sampling, request.records, owner, n_candidates, rng)
    selected, owner = candidates[chosen], owner[chosen]
    active = np.flatnonzero(n_candidates > 0)
    n_fresh = np.bincount(owner, minlength=n_users)
    user_events: dict = {randomizer.user_event: n_fresh}  # reports per user (each one run of its noise, and a label)
    if labels.event is not None:
        user_events[labels.event] = user_events.get(labels.event, 0) + n_fresh
    affords = ledger.users_can_afford({e: n[active] for e, n in user_events.items()}, idx[active])
    refuse(active[~affords], BudgetExhausted, lambda u: f"user {u}: user-level budget would be exceeded")
    active = active[affords]
    if ledger.max_events is not None and len(active):
        active = _within_event_cap(cohort, ledger, idx, active, [*events, *user_events], refuse)
    served = np.zeros(n_users, dtype=bool)
    served[active] = True
    keep = served[owner]
    selected, owner = selected[keep], owner[keep]
    started = time.perf_counter()
    released = labels.release(cohort.train_labels[selected], rng)
    blocks = _release(randomizer, cohort.rows_for(randomizer), selected, released, labels.num_values, rng)
    sums = None
    if request.summarise:  # each block summed while in cache: only the sums leave the node
        sums = reduce(operator.add, (ReportSums.of_reports(randomizer, r, y, labels.num_values) for r, y in blocks))
        reports, released = np.zeros((0, sums.second_moment.shape[0]), np.float32), np.zeros(0, np.int64)
    else:
        parts = list(blocks)
        reports, released = np.concatenate([r for r, _ in parts]), np.concatenate([y for _, y in parts])
    release_seconds = time.perf_counter() - started
    ledger.charge(events, cohort.train_column[selected], {e: n[active] for e, n in user_events.items()}, idx[active])
    ledger.log_steps("train", request.sampling, randomizer.event, idx[active])
    if labels.event is not None:
        ledger.log_steps(LABELS, request.sampling, labels.event, idx[active])
    for event, n in user_events.items():
        ledger.log_steps(REPORTS, request.sampling, event, idx[active], n[active])
    return CohortStep(
        reports=reports,
        labels=released,
        users=uids[owner],
        refusals=refusals,
        summaries=summaries(cohort, ledger, idx, uids, events),
        release_seconds=release_seconds,
        sums=sums,
    )


RELEASE_BLOCK = 1024
"""Rows per call of a batched release: a block's clean rows, noise and reports stay in cache. On
few shared cores memory traffic costs more than the arithmetic: measured on this 2-core machine,
two processes each releasing 40,000 rows of 384 dims in one call took 0.5-0.6 s per release
side by side (0.42 s alone); in blocks of 1,024 rows, 0.43 s side by side and alone."""


def _release(
    randomizer: Randomizer,
    rows: np.ndarray,
    selected: np.ndarray,
    labels: np.ndarray,
    num_labels: int,
    rng: np.random.Generator,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Reports (float32, as they travel) of ``rows[selected]`` and the labels that travel with them,
    in chunks of up to GRAM_BLOCK rows drawn RELEASE_BLOCK rows per call (at least one chunk, empty
    when nothing is selected). A chunk is what :meth:`ReportSums.of` sums at once: its second
    moment runs 1.6 times as fast on 8,192 rows as on 1,024.

    ``rows`` are as :meth:`Cohort.rows_for` gives them: already preprocessed where the randomizer's
    release splits into preprocessing and noise (:meth:`Randomizer.preprocess_key`). Blocks are
    allowed because a batched randomizer's reports depend on their own row and fresh noise only
    (:attr:`Randomizer.batch_release`).
    """
    split = randomizer.preprocess_key() is not None

    def release(chosen: np.ndarray, chosen_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if split:
            return randomizer.randomize(rows[chosen], rng), chosen_labels
        return randomizer.release_with_labels(rows[chosen], chosen_labels, num_labels, rng)

    if not len(selected):
        yield np.zeros((0, randomizer.preprocess(rows[:1]).shape[1]), np.float32), labels
    for start in range(0, len(selected), GRAM_BLOCK):
        chunk = selected[start : start + GRAM_BLOCK]
        reports: np.ndarray | None = None
        chunk_labels = []
        for offset in range(0, len(chunk), RELEASE_BLOCK):
            first = start + offset
            block, block_labels = release(chunk[offset : offset + RELEASE_BLOCK], labels[first : first + RELEASE_BLOCK])
            if reports is None:
                reports = np.empty((len(chunk), block.shape[1]), np.float32)
            reports[offset : offset + len(block)] = block
            chunk_labels.append(block_labels)
        yield reports, np.concatenate(chunk_labels)


def _select(sampling: TrainSampling, cap: int, owner: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Which candidates each user samples (``owner`` groups them, in order): as TrainSampling.select does per user."""
    if sampling.kind == "poisson":
        return rng.random(len(owner)) < sampling.p
    size = counts.copy()
    if sampling.kind == "fixed":
        size = np.minimum(sampling.m, counts)
    elif cap:
        size = np.minimum(cap, counts)
    if (size == counts).all():
        return np.ones(len(owner), dtype=bool)
    # m of n uniformly without replacement: the m smallest of n uniform keys, per user.
    keys = rng.random(len(owner))
    order = np.lexsort((keys, owner))
    starts = np.cumsum(counts) - counts
    rank = np.empty(len(owner), np.int64)
    rank[order] = np.arange(len(owner)) - starts[owner[order]]
    return rank < size[owner]


def _within_event_cap(
    cohort: Cohort,
    ledger: CohortLedger,
    idx: np.ndarray,
    active: np.ndarray,
    events: list,
    refuse: Callable[[np.ndarray, type[Exception], Callable[[int], str]], None],
) -> np.ndarray:
    """The ``active`` users whose ledgers can hold ``events`` within the cap; the others are refused."""
    for event in events:
        ledger.row(event)
    columns, starts = cohort.columns_of(idx[active])
    held = ledger.events_held(columns, starts, idx[active])
    wanted = np.zeros(len(ledger.events), dtype=bool)
    wanted[[ledger.events.index(e) for e in events]] = True
    n_held = held.sum(axis=0)
    n_new = (wanted[:, None] & ~held).sum(axis=0)
    over = n_held + n_new > ledger.max_events
    for i in np.flatnonzero(over).tolist():
        refuse(
            active[i : i + 1],
            EventCapReached,
            lambda _u, h=int(n_held[i]), n=int(n_new[i]): (
                f"the ledger holds {h} distinct privacy events; {n} more would pass the policy's cap of {ledger.max_events}"
            ),
        )
    return active[~over]


def summaries(
    cohort: Cohort, ledger: CohortLedger, idx: np.ndarray, uids: np.ndarray, train_events: list
) -> dict[int, dict[str, float]]:
    """The figures :meth:`fed.user.User.summary` reports, for users ``idx`` (ids ``uids``)."""
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
    records = _ranges(cohort.train_start[idx], n_train)
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
