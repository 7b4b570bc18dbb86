"""One simulated or real user: its clean records, its ledger, and what it releases.

Training (seed 000 Alg. 2): per step the user samples records by the run's sampling scheme
among those it may still release, and releases the sampled ones through the randomizer.

Inference (seed 000 Alg. 3, :meth:`User.query_step`): the user mixes its true queries with
fictitious ones it makes itself, with no private data (random directions of norm C, the
clipping radius, passed through the same randomizer with the same dimension), so that true
queries are a share q of the mixed set. Each step samples every mixed item with probability
p_query; the sampled items are shuffled and released, and the server sees only slot numbers.
The user alone keeps which slot was which query (its state). Answers to true queries are
summed per query; fictitious answers are dropped. Steps repeat until every true query has
k answers; a query's prediction is the argmax of the mean of its answers.

Privacy: every release of a true query is a fresh draw, charged to the worst-case ledger (never
memoized: a stored report would repeat where a fictitious one does not); fictitious ones cost
nothing. Under ``--enforce worst-case`` a sampled true query whose ledger has no budget left
is replaced by a fresh fictitious item (the server sees the same number of reports).
Under ``--enforce amplified`` the step is served only if the PLD bound of the user's query
steps so far, plus this one, stays within budget (fed.privacy.accountants.enforced).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ldpfed.fed.runtime.cohort import Cohort, summaries
from ldpfed.fed.device.entropy import generator
from ldpfed.fed.privacy.noise import SecureGenerator
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.ledger import ONE, Budget, Ledger
from ldpfed.fed.privacy.store import Memo
from ldpfed.fed.randomizers.base import Randomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.runtime.requests import ReleaseRequest
from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.refusals import BudgetExhausted, QueriesDone, RequestRefused
from ldpfed.fed.runtime.release import UserDraws, charge, refuse_past_cap, train_step, user_cost
from ldpfed.fed.privacy.sampling import UpSampling

Kind = Literal["train", "query"]

PENDING_FICTITIOUS, PENDING_ANSWERED = -1, -2


@dataclass(frozen=True)
class UserRecords:
    """A user's clean representations and labels; they never leave the user."""

    train: np.ndarray
    train_labels: np.ndarray
    query: np.ndarray
    query_labels: np.ndarray
    ids: np.ndarray | None = None
    """Stable id of every record (training first, then queries); default: their positions."""

    @property
    def num_records(self) -> int:
        """Training plus query records (ledger ids: training first, then queries)."""
        return len(self.train) + len(self.query)

    @property
    def record_ids(self) -> np.ndarray:
        """:attr:`ids`, or the positions as strings when none were given."""
        return self.ids if self.ids is not None else np.arange(self.num_records).astype(str).astype(object)


class MemoBook:
    """Stored training reports of one user (RAPPOR's permanent randomized response), read and written in its transaction.

    Parameters
    ----------
    get, put:
        ``get(record_id, memo_key) -> Memo | None`` and ``put(record_id, memo_key, report, label)``.
    bundle:
        Fingerprint of the setup bundle the records were encoded with (part of every memo key).
    """

    def __init__(self, get: Any, put: Any, bundle: str) -> None:
        self.get, self.put, self.bundle = get, put, bundle


@dataclass
class Release:
    """What leaves the user for one request."""

    user: int
    reports: np.ndarray
    labels: np.ndarray | None
    events: list[PrivacyEvent]
    slots: np.ndarray | None = None


@dataclass
class UserState:
    """What a user holds while serving a request: its ledger (from the node's store), a release counter
    and its remote-inference session (both kept between messages in the node's state)."""

    ledger: Ledger
    calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def session_json(self) -> dict[str, Any]:
        """The counter and session as plain JSON (the ledger lives in the node's store)."""
        return {"calls": self.calls, "extra": self.extra}


class User:
    """A user that serves release requests within its budget.

    Parameters
    ----------
    user_id:
        The user's id in the federation.
    records:
        Clean representations and labels.
    budget:
        The budgets enforced before any release.
    labels:
        How training labels leave the user (public, or randomized response).
    seed:
        Run seed; honoured only inside the simulation engine (fed.device.entropy), else the OS draws.
    state:
        Ledger and counter carried over from earlier requests.
    enforce:
        ``worst-case`` (the ledger of actual releases) or ``amplified`` (the PLD bound of
        the Poisson-sampled schedule of steps served so far).
    memo:
        Stored reports to answer repeated requests from at no cost (None: every release is fresh).
    """

    def __init__(
        self,
        user_id: int,
        records: UserRecords,
        budget: Budget,
        labels: PublicLabels | RandomizedResponse,
        seed: int | None,
        state: UserState | None = None,
        enforce: str = "worst-case",
        memo: MemoBook | None = None,
    ) -> None:
        if enforce not in ("worst-case", "amplified"):
            raise ValueError(f"enforce must be worst-case or amplified, got {enforce!r}")
        self.user_id = user_id
        self.records = records
        self.labels = labels
        self.seed = seed
        self.enforce = enforce
        self.memo = memo
        self.state = state or UserState(Ledger(records.num_records, budget))
        if self.state.ledger.num_records != records.num_records:
            raise ValueError("the stored ledger does not match this user's records")

    def release(self, kind: Kind, request: ReleaseRequest) -> Release:
        """Serve one step of ``kind``: training sampling, or one up-sampled query step.

        Raises BudgetExhausted (or QueriesDone), having released nothing, when the user
        cannot or need not release anything. A Poisson step that samples no record releases
        an empty batch and still counts as a step. A record already released under the same
        randomizer is answered from its stored report, at no cost, when memoization is on
        (training only: :meth:`query_step` draws every report fresh).
        """
        if kind == "query":
            return self.query_step(request)
        randomizer = request.randomizer
        events: list[PrivacyEvent] = [randomizer.event]
        if self.labels.event is not None:
            events.append(self.labels.event)
        memo_key = self._memo_key(randomizer)
        stored = self._stored(np.arange(len(self.records.train)), memo_key)
        stored_rows = np.zeros(len(self.records.train), dtype=bool)
        stored_rows[list(stored)] = True

        def amplified(_uid: int) -> str | None:
            if len(self.records.train) < 2:
                return texts.amplified_needs_two(self.user_id, "train")
            return self._amplified_refusal("train", request.sampling, randomizer.event)

        step = train_step(
            self.cohort(),
            self.state.ledger,
            replace(request, users=(self.user_id,)),
            self.labels,
            UserDraws(self.rng()),
            stored=stored_rows if stored else None,
            amplified=amplified if self.enforce == "amplified" else None,
        )
        if self.user_id in step.refusals:
            raise texts.as_error(*step.refusals[self.user_id])
        reports, labels = step.reports, step.labels
        self._remember(step.fresh, memo_key, reports, labels)
        self.state.calls += 1
        reused = step.reused.tolist()
        if reused:
            reports = np.vstack([reports, np.stack([stored[i].report for i in reused])])
            labels = np.concatenate([labels, np.array([stored[i].label for i in reused], dtype=np.int64)])
        return Release(self.user_id, reports.astype(np.float32), labels, events)

    def cohort(self) -> Cohort:
        """This user's records as a cohort of one (what the release pipeline serves)."""
        return Cohort.of_user(self.user_id, self.records, self.state.ledger.columns)

    def _memo_key(self, randomizer: Randomizer) -> str | None:
        """The key of stored training reports under ``randomizer``: all a report depends on besides its
        record (bundle, dimension, randomizer, label channel). None: no memoization for it."""
        if self.memo is None or randomizer.records_per_report != 1:
            return None
        scope = {"kind": "train", "bundle": self.memo.bundle, "dim": int(self.records.train.shape[1])}
        return json.dumps({**scope, "randomizer": randomizer.params(), "labels": self.labels.params()}, sort_keys=True)

    def _stored(self, records: np.ndarray, memo_key: str | None) -> dict[int, Memo]:
        """Stored reports of ``records`` (indices) under ``memo_key``."""
        if memo_key is None:
            return {}
        ids = self.records.record_ids
        found = {int(i): self.memo.get(str(ids[i]), memo_key) for i in records.tolist()}
        return {i: m for i, m in found.items() if m is not None}

    def _remember(self, records: np.ndarray, memo_key: str | None, reports: np.ndarray, labels: np.ndarray | None) -> None:
        if memo_key is None:
            return
        ids = self.records.record_ids
        for row, i in enumerate(records.tolist()):
            self.memo.put(str(ids[i]), memo_key, reports[row], None if labels is None else int(labels[row]))

    # -- remote inference with up-sampling (seed 000 Alg. 3) ----------------------------
    def query_step(self, request: ReleaseRequest) -> Release:
        """One up-sampling step: sample the mixed query set, release the sampled items shuffled.

        The returned ``slots`` number the reports 0..m-1; which slot holds which true query, or
        a fictitious one, stays in the user's state.
        """
        randomizer = request.randomizer
        event = randomizer.event
        up = UpSampling.parse(request.sampling)
        n_true, n_train = len(self.records.query), len(self.records.train)
        if n_true == 0:
            raise QueriesDone(texts.no_query_records(self.user_id))
        st = self._query_state()
        counts = np.asarray(st["counts"], dtype=np.int64)
        if (counts >= up.k).all():
            raise QueriesDone(texts.queries_answered(self.user_id, up.k))
        ledger = self.state.ledger
        if self.enforce == "amplified":
            reason = (
                texts.amplified_needs_two(self.user_id, "query")
                if n_true + up.fictitious(n_true) < 2
                else self._amplified_refusal("query", request.sampling, event)
            )
            if reason is not None:
                raise BudgetExhausted(reason)
        elif not len(ledger.remaining([event], n_train + np.flatnonzero(counts < up.k))):
            raise BudgetExhausted(texts.no_query_budget(self.user_id, up.k))
        rng = self.rng()
        n_fict = up.fictitious(n_true)
        sampled = np.flatnonzero(rng.random(n_true + n_fict) < up.p)
        true_items = sampled[sampled < n_true]
        fict_items = sampled[sampled >= n_true] - n_true
        stand_ins = 0
        if self.enforce == "worst-case":
            affordable = ledger.remaining([event], n_train + true_items) - n_train
            stand_ins = len(true_items) - len(affordable)
            true_items = affordable
        user_events = user_cost(randomizer, None, np.array([len(true_items)]))
        if not ledger.users_can_afford(user_events, ONE)[0]:
            raise BudgetExhausted(texts.user_budget(self.user_id))
        refuse_past_cap(self.cohort(), ledger, [event, *user_events])
        fictitious = np.vstack(
            [self._fictitious(randomizer, n_fict)[fict_items], self._directions(randomizer, stand_ins, rng)]
        )
        items = np.concatenate([true_items, np.full(len(fictitious), PENDING_FICTITIOUS)]).astype(np.int64)
        clean = np.vstack([self.records.query[true_items], fictitious])
        order = rng.permutation(len(items))
        reports = randomizer.release(clean[order], rng).astype(np.float32)
        logged = user_cost(randomizer, None, np.array([len(items)]))
        charge(ledger, request.sampling, [("query", event)], [event], ledger.columns[n_train + true_items], user_events, logged, ONE, ONE)
        st["pending"] = items[order].tolist()
        st["steps"] += 1
        st["released_true"] += int(len(true_items))
        st["released_fictitious"] += int(len(fictitious))
        self.state.calls += 1
        return Release(self.user_id, reports, None, [event], np.arange(len(items), dtype=np.int64))

    def check_answers(self, slots: np.ndarray) -> None:
        """RequestRefused unless the slots are exactly the last step's, each once, none answered yet.

        A step's answers come in one message covering every slot it released: answered one slot at
        a time, the step after which the user is finished would tell the server which slot held its
        true query (issue 39, finding 2)."""
        pending = np.asarray(self._query_state()["pending"], dtype=np.int64)
        slots = np.asarray(slots, dtype=np.int64)
        if len(np.unique(slots)) != len(slots):
            raise RequestRefused(f"user {self.user_id}: a slot is answered twice")
        if len(slots) and (slots.min() < 0 or slots.max() >= len(pending)):
            raise RequestRefused(f"user {self.user_id}: answer for a slot it did not release")
        if len(slots) and (pending[slots] == PENDING_ANSWERED).any():
            raise RequestRefused(f"user {self.user_id}: answer for a slot already answered")
        if len(slots) != len(pending):
            raise RequestRefused(texts.whole_step_answers(self.user_id, len(pending), len(slots)))

    def take_answers(self, slots: np.ndarray, scores: np.ndarray, k: int) -> bool:
        """Add the server's scores for released slots (checked first); True once all have k answers."""
        self.check_answers(slots)
        st = self._query_state()
        pending = np.asarray(st["pending"], dtype=np.int64)
        slots = np.asarray(slots, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        items = pending[slots]
        true = items >= 0
        n_true = len(self.records.query)
        sums = np.asarray(st["sums"], dtype=np.float64) if st["sums"] else np.zeros((n_true, scores.shape[1]))
        if sums.shape[1] != scores.shape[1]:
            raise RequestRefused(f"user {self.user_id}: answers have {scores.shape[1]} scores, earlier {sums.shape[1]}")
        counts = np.asarray(st["counts"], dtype=np.int64)
        first = np.asarray(st["first"], dtype=np.int64)
        for item, row in zip(items[true].tolist(), scores[true]):
            if counts[item] == 0:
                first[item] = int(row.argmax())
            sums[item] += row
            counts[item] += 1
        pending[slots] = PENDING_ANSWERED
        st.update(sums=sums.tolist(), counts=counts.tolist(), first=first.tolist(), pending=pending.tolist())
        return bool((counts >= k).all())

    def query_result(self, k: int) -> dict[str, int]:
        """Remote-inference outcome: combined and single-answer correct counts, and effort."""
        n_true = len(self.records.query)
        st = self._query_state()
        counts = np.asarray(st["counts"], dtype=np.int64)
        labels = self.records.query_labels
        answered = counts > 0
        correct = correct_single = 0
        if st["sums"] and n_true:
            predicted = np.asarray(st["sums"]).argmax(axis=1)  # argmax of the mean of the answers
            correct = int(((predicted == labels) & answered).sum())
            correct_single = int(((np.asarray(st["first"]) == labels) & answered).sum())
        return {
            "correct": correct,
            "correct_single": correct_single,
            "total": n_true,
            "answered": int(answered.sum()),
            "complete": int((counts >= k).sum()),
            "answers": int(counts.sum()),
            "steps": int(st["steps"]),
            "released_true": int(st["released_true"]),
            "released_fictitious": int(st["released_fictitious"]),
        }

    def query_correct(self) -> np.ndarray:
        """Per true query: 1 if the combined remote answer is correct, 0 if not, -1 if unanswered."""
        st = self._query_state()
        counts = np.asarray(st["counts"], dtype=np.int64)
        flags = np.full(len(self.records.query), -1, dtype=np.int64)
        if st["sums"]:
            predicted = np.asarray(st["sums"]).argmax(axis=1)
            flags[counts > 0] = (predicted == self.records.query_labels)[counts > 0]
        return flags

    def _query_state(self) -> dict[str, Any]:
        n_true = len(self.records.query)
        st = self.state.extra.get("queries")
        if st is None:
            seed = int.from_bytes(self.rng(stream=1).bytes(32), "little")  # a 256-bit key
            st = {
                "fictitious_seed": seed,
                "sums": [],
                "counts": [0] * n_true,
                "first": [-1] * n_true,
                "pending": [],
                "steps": 0,
                "released_true": 0,
                "released_fictitious": 0,
            }
            self.state.extra["queries"] = st
        return st

    def _fictitious(self, randomizer: Randomizer, count: int) -> np.ndarray:
        """The user's fixed fictitious queries: directions from ChaCha20 under its own secret key, no data."""
        rng = SecureGenerator.keyed(self._query_state()["fictitious_seed"])
        return self._directions(randomizer, count, rng)

    def _directions(self, randomizer: Randomizer, count: int, rng: np.random.Generator) -> np.ndarray:
        dim = self.records.query.shape[1]
        x = rng.standard_normal((count, dim))
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x * float(randomizer.params().get("clip", 1.0))

    def _amplified_refusal(self, kind: str, sampling: str, event: PrivacyEvent) -> str | None:
        """Why one more step would not keep the amplified PLD bound within budget (None: it would)."""
        from ldpfed.fed.privacy.accountants import enforced  # dp_accounting: only under --enforce amplified

        ledger = self.state.ledger
        try:
            groups = enforced.entries([*ledger.step_log(kind), (sampling, event, 1)])
        except ValueError as reason:
            return texts.amplified_invalid(self.user_id, reason)
        if not enforced.within_budget(groups, ledger.budget.delta, ledger.budget.epsilon_sentence):
            return texts.amplified_budget(self.user_id, kind)
        return None

    def amplified_epsilon(self) -> float:
        """Sentence-level amplified PLD bound: max over training and query records."""
        from ldpfed.fed.privacy.accountants import enforced  # dp_accounting: only under --enforce amplified

        ledger = self.state.ledger
        return max(
            enforced.pld_epsilon(enforced.entries(ledger.step_log(kind)), ledger.budget.delta)
            for kind in ("train", "query")
        )

    def summary(self, train_events: list[PrivacyEvent] | None = None) -> dict[str, float]:
        """The figures a simulated user reports about its own ledger (a device reports only
        :meth:`fed.privacy.ledger.Ledger.served_figures`, a function of the requests it served).

        With ``train_events`` (what one training release costs), also how many training
        records can still afford one: the server can infer it from the public dataset
        size and the reports it received, and uses it to sample users with budget left.
        """
        figures = summaries(self.cohort(), self.state.ledger, ONE, np.array([self.user_id]), train_events or [])[self.user_id]
        if train_events is None:
            del figures["train_records_left"]
        return figures

    def rng(self, stream: int = 0) -> np.random.Generator:
        """The generator of this user's next draw (the run seed only inside the simulation engine)."""
        key = (self.user_id, self.state.calls) if stream == 0 else (self.user_id, self.state.calls, stream)
        return generator(self.seed, key)
