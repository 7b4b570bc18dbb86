"""The one release pipeline: every check and charge of a release, for one user or a node's whole cohort.

A training step (:func:`train_step`) takes, for every user a request names and all at once, the
steps of design.md section 2: the records that can afford one more release (one per content),
the sampling, the user-level check, the event cap, the release, then the charge and the step log.
A per-user release (:meth:`fed.runtime.user.User.release`) is this step for a cohort of one
(:meth:`fed.runtime.cohort.Cohort.of_user`) drawing from the user's own generator (:class:`UserDraws`);
scale mode (fed.runtime.node) serves all of a node's users with one generator (:class:`CohortDraws`).
Only the order of the random draws differs: each report still gets fresh noise.

Query and evaluation releases (fed.runtime.user, fed.runtime.node) pass through the same checks (:func:`refuse_past_cap`,
:meth:`~fed.privacy.cohort_ledger.CohortLedger.users_can_afford`) and the same charge (:func:`charge`).
Every refusal's code and text comes from fed.runtime.refusals.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import reduce

import numpy as np

from ldpfed.fed.runtime.cohort import Cohort, ranges
from ldpfed.fed.privacy.cohort_ledger import LABELS, REPORTS, CohortLedger
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.randomizers.base import Randomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.learning.report_sums import GRAM_BLOCK, ReportSums
from ldpfed.fed.runtime.requests import ReleaseRequest
from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.refusals import BudgetExhausted, EventCapReached
from ldpfed.fed.privacy.sampling import TrainSampling

Refusals = dict[int, tuple[str, str]]
"""User id -> (refusal code, reason text)."""

RELEASE_BLOCK = 256
"""Rows per call of a batched release: a block's clean rows, noise and reports stay in cache. On
few shared cores memory traffic costs more than the arithmetic: measured on this 2-core machine,
two processes each releasing 40,000 rows of 384 dims in one call took 0.5-0.6 s per release
side by side (0.42 s alone); in blocks of 1,024 rows, 0.43 s side by side and alone. Blocks of 256
rows (768 KiB of float64 noise, within a core's 1 MiB L2 cache), consecutive rows read in place
(:func:`release_blocks`), took a median 0.24-0.26 s per 40,000 x 384 release with its sums, two
processes side by side, against 0.28-0.34 s for 1,024 rows gathered; the same reports."""


@dataclass
class TrainStep:
    """What one training step released, in the order the request names its users.

    When the step sums its reports (``sums``), ``reports`` and ``labels`` are empty.
    """

    reports: np.ndarray
    labels: np.ndarray
    users: np.ndarray
    """The user id of each report."""
    fresh: np.ndarray
    """The cohort's training rows released fresh (and charged), grouped by user."""
    reused: np.ndarray
    """The cohort's training rows answered from a stored report (free), grouped by user."""
    refusals: Refusals
    release_seconds: float
    """Seconds spent drawing the reports and summing them (the rest of a step is ledger work)."""
    sums: ReportSums | None = None


class UserDraws:
    """The random draws of one user's step, from its own generator: as :meth:`TrainSampling.select`
    samples, and one release call on the clean rows."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def select(self, sampling: TrainSampling, cap: int, candidates: np.ndarray, owner: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Which ``candidates`` (one user's, in order) are sampled."""
        chosen = sampling.select(candidates, cap, self.rng)
        return np.isin(candidates, chosen)

    def release(
        self, randomizer: Randomizer, cohort: Cohort, selected: np.ndarray, labels: np.ndarray, num_labels: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The reports of ``selected`` rows and the labels that travel with them, in one block."""
        if len(selected):
            yield randomizer.release_with_labels(cohort.train[selected], labels, num_labels, self.rng)
        else:  # a Poisson step that sampled nothing new: an empty batch (still a step)
            yield np.zeros((0, randomizer.preprocess(cohort.train[:1]).shape[1]), dtype=np.float32), labels


class CohortDraws:
    """The random draws of a whole cohort's step, from one generator: uniform keys per candidate, and
    reports drawn in blocks (fed.runtime.release.RELEASE_BLOCK rows) from rows preprocessed once."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def select(self, sampling: TrainSampling, cap: int, candidates: np.ndarray, owner: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Which candidates each user samples (``owner`` groups them, in order): as TrainSampling.select does per user."""
        if sampling.kind == "poisson":
            return self.rng.random(len(owner)) < sampling.p
        size = counts.copy()
        if sampling.kind == "fixed":
            size = np.minimum(sampling.m, counts)
        elif cap:
            size = np.minimum(cap, counts)
        if (size == counts).all():
            return np.ones(len(owner), dtype=bool)
        # m of n uniformly without replacement: the m smallest of n uniform keys, per user.
        keys = self.rng.random(len(owner))
        order = np.lexsort((keys, owner))
        starts = np.cumsum(counts) - counts
        rank = np.empty(len(owner), np.int64)
        rank[order] = np.arange(len(owner)) - starts[owner[order]]
        return rank < size[owner]

    def release(
        self, randomizer: Randomizer, cohort: Cohort, selected: np.ndarray, labels: np.ndarray, num_labels: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:func:`release_blocks` of the cohort's rows as ``randomizer`` releases them."""
        return release_blocks(randomizer, cohort.rows_for(randomizer), selected, labels, num_labels, self.rng)


Draws = UserDraws | CohortDraws


def train_step(
    cohort: Cohort,
    ledger: CohortLedger,
    request: ReleaseRequest,
    labels: PublicLabels | RandomizedResponse,
    draws: Draws,
    summarise: bool = False,
    stored: np.ndarray | None = None,
    amplified: Callable[[int], str | None] | None = None,
) -> TrainStep:
    """Serve one training step of every user ``request`` names (distinct users of ``cohort``).

    ``stored`` marks the cohort's training rows whose earlier report is stored (memoization): they
    may be sampled whatever their budget and are answered free. ``amplified`` (user id -> refusal
    text or None) replaces the per-record check by the amplified bound of the user's step schedule.
    With ``summarise`` the reports are summed as they are drawn and only the sums are returned.
    """
    randomizer = request.randomizer
    events = [randomizer.event] + ([labels.event] if labels.event is not None else [])
    sampling = TrainSampling.parse(request.sampling)
    uids = np.asarray(request.users, dtype=np.int64)
    idx = cohort.index(uids)
    n_users = len(idx)
    refusals: Refusals = {}

    def refuse(positions: np.ndarray, error: type[Exception], reason: Callable[[int], str]) -> None:
        for position in positions.tolist():
            uid = int(uids[position])
            refusals[uid] = (str(error.code), reason(uid))  # type: ignore[attr-defined]

    # 1. the records that can afford one more release (one per content), or that are stored
    n_train = cohort.train_start[idx + 1] - cohort.train_start[idx]
    records = ranges(cohort.train_start[idx], n_train)
    position = np.repeat(np.arange(n_users), n_train)
    refuse(np.flatnonzero(n_train == 0), BudgetExhausted, texts.no_train_records)
    out = n_train == 0
    if amplified is not None:  # every record; the user's step schedule is checked instead
        for i in np.flatnonzero(~out).tolist():
            reason = amplified(int(uids[i]))
            if reason is not None:
                refusals[int(uids[i])] = (str(BudgetExhausted.code), reason)
                out[i] = True
        ok = ~out[position]
    else:
        first = cohort.train_first[records]
        ok = np.zeros(len(records), dtype=bool)
        ok[first] = ledger.affordable(events, cohort.train_column[records[first]])
        if stored is not None:
            ok |= stored[records]
    candidates, owner = records[ok], position[ok]
    n_candidates = np.bincount(owner, minlength=n_users)
    refuse(np.flatnonzero(~out & (n_candidates == 0)), BudgetExhausted, texts.no_train_budget)
    # 2. the sampling
    chosen = draws.select(sampling, request.records, candidates - cohort.train_start[idx][owner], owner, n_candidates)
    chosen_rows, owner = candidates[chosen], owner[chosen]
    is_fresh = np.ones(len(chosen_rows), dtype=bool) if stored is None else ~stored[chosen_rows]
    n_fresh = np.bincount(owner[is_fresh], minlength=n_users)
    active = np.flatnonzero(n_candidates > 0)
    needed = randomizer.records_per_report
    if needed > 1:
        few = n_fresh[active] < needed
        refuse(active[few], BudgetExhausted, lambda u: texts.too_few_to_mix(u, randomizer.name, needed, int(n_fresh[uids == u][0])))
        active = active[~few]
    # 3. the user-level budget
    user_events = user_cost(randomizer, labels, n_fresh)
    affords = ledger.users_can_afford({e: n[active] for e, n in user_events.items()}, idx[active])
    refuse(active[~affords], BudgetExhausted, texts.user_budget)
    active = active[affords]
    # 4. the event cap
    if ledger.max_events is not None and len(active):
        over = over_cap(cohort, ledger, idx[active], [*events, *user_events])
        for i in np.flatnonzero(over[2]).tolist():
            refusals[int(uids[active[i]])] = (str(EventCapReached.code), texts.event_cap(int(over[0][i]), int(over[1][i]), ledger.max_events))
        active = active[~over[2]]
    served = np.zeros(n_users, dtype=bool)
    served[active] = True
    keep = served[owner]
    chosen_rows, owner, is_fresh = chosen_rows[keep], owner[keep], is_fresh[keep]
    selected = chosen_rows[is_fresh]
    # 5. the release
    started = time.perf_counter()
    released = labels.release(cohort.train_labels[selected], draws.rng)
    blocks = draws.release(randomizer, cohort, selected, released, labels.num_values)
    sums = None
    if summarise:  # each block summed while in cache: only the sums leave the node
        sums = reduce(operator.add, (ReportSums.of_reports(randomizer, r, y, labels.num_values) for r, y in blocks))
        reports, released = np.zeros((0, sums.second_moment.shape[0]), np.float32), np.zeros(0, np.int64)
    else:
        parts = list(blocks)
        reports, released = np.concatenate([r for r, _ in parts]), np.concatenate([y for _, y in parts])
    release_seconds = time.perf_counter() - started
    # 6. the charge and the step log
    n_chosen = np.bincount(owner, minlength=n_users)
    logged = user_cost(randomizer, labels, n_chosen)
    steps = [("train", randomizer.event)] + ([(LABELS, labels.event)] if labels.event is not None else [])
    charge(ledger, request.sampling, steps, events, cohort.train_column[selected], user_events, logged, idx, active)
    return TrainStep(
        reports=reports,
        labels=released,
        users=uids[owner[is_fresh]],
        fresh=selected,
        reused=chosen_rows[~is_fresh],
        refusals=refusals,
        release_seconds=release_seconds,
        sums=sums,
    )


def user_cost(
    randomizer: Randomizer, labels: PublicLabels | RandomizedResponse | None, reports: np.ndarray
) -> dict[PrivacyEvent, np.ndarray]:
    """The user-level cost of ``reports`` reports per user: each one run of its noise, and of a label
    (``labels``: the channel of a training release, None for a query release)."""
    cost = {randomizer.user_event: reports}
    if labels is not None and labels.event is not None:
        cost[labels.event] = cost.get(labels.event, 0) + reports
    return cost


def charge(
    ledger: CohortLedger,
    sampling: str,
    steps: list[tuple[str, PrivacyEvent]],
    events: list[PrivacyEvent],
    columns: np.ndarray,
    user_events: dict[PrivacyEvent, np.ndarray],
    reports: dict[PrivacyEvent, np.ndarray],
    idx: np.ndarray,
    active: np.ndarray,
) -> None:
    """The one charge of every release: one run of ``events`` on each of ``columns``, the reports' user-level
    events (``user_events``: count per position of ``idx``), then the step log of the served users
    (positions ``active`` of ``idx``): one step of each (kind, event) of ``steps``, and the ``reports`` that left."""
    users = idx[active]
    ledger.charge_columns(events, columns, {e: n[active] for e, n in user_events.items()}, users)
    for kind, event in steps:
        ledger.log_steps(kind, sampling, event, users)
    for event, n in reports.items():
        ledger.log_steps(REPORTS, sampling, event, users, n[active])


def over_cap(cohort: Cohort, ledger: CohortLedger, users: np.ndarray, events: list[PrivacyEvent]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per user (cohort indices ``users``): distinct events its ledger holds, how many of ``events`` are new
    to it, and whether holding them would pass the ledger's cap."""
    for event in events:
        ledger.row(event)
    columns, starts = cohort.columns_of(users)
    held = ledger.events_held(columns, starts, users)
    wanted = np.zeros(len(ledger.events), dtype=bool)
    wanted[[ledger.events.index(e) for e in events]] = True
    n_held = held.sum(axis=0)
    n_new = (wanted[:, None] & ~held).sum(axis=0)
    cap = ledger.max_events
    return n_held, n_new, (n_held + n_new > cap) if cap is not None else np.zeros(len(users), dtype=bool)


def refuse_past_cap(cohort: Cohort, ledger: CohortLedger, events: list[PrivacyEvent]) -> None:
    """EventCapReached, naming the counts, if holding ``events`` would pass the cap of a one-user ledger."""
    held, new, over = over_cap(cohort, ledger, np.zeros(1, np.int64), events)
    if over[0]:
        raise EventCapReached(texts.event_cap(int(held[0]), int(new[0]), int(ledger.max_events)))  # type: ignore[arg-type]


def release_blocks(
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
            return randomizer.randomize(_rows(rows, chosen), rng), chosen_labels
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


def _rows(rows: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """``rows[chosen]``: a read-only view where ``chosen`` is a run of consecutive rows (a scale-mode step
    that selects every record of its users in order), else the gathered copy. The same values either way;
    the view spares copying them, and a randomizer cannot write into the cohort's preprocessed rows through it."""
    n = len(chosen)
    if n and int(chosen[-1]) - int(chosen[0]) == n - 1 and bool((np.diff(chosen) == 1).all()):
        view = rows[int(chosen[0]) : int(chosen[0]) + n]
        view.flags.writeable = False
        return view
    return rows[chosen]
