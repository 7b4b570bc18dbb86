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

Privacy: every release of a true query is charged to the worst-case ledger; fictitious ones
cost nothing. Under ``--enforce worst-case`` a sampled true query whose ledger has no budget
left is replaced by a fresh fictitious item (the server sees the same number of reports).
Under ``--enforce amplified`` the step is served only if the PLD bound of the user's query
steps so far, plus this one, stays within budget (fed.privacy.accountants.enforced).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fed.privacy.accountants import enforced
from fed.privacy.events import PrivacyEvent
from fed.privacy.ledger import Budget, Ledger
from fed.randomizers.base import Randomizer
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.requests import ReleaseRequest, RequestRefused
from fed.sampling import TrainSampling, UpSampling

Kind = Literal["train", "query"]


class BudgetExhausted(RuntimeError):
    """The user has no budget left for the request; it refuses instead of releasing."""


class QueriesDone(RuntimeError):
    """Every true query already has its k answers (or the user has none); nothing to release."""


PENDING_FICTITIOUS, PENDING_ANSWERED = -1, -2


@dataclass(frozen=True)
class UserRecords:
    """A user's clean representations and labels; they never leave the user."""

    train: np.ndarray
    train_labels: np.ndarray
    query: np.ndarray
    query_labels: np.ndarray

    @property
    def num_records(self) -> int:
        """Training plus query records (ledger ids: training first, then queries)."""
        return len(self.train) + len(self.query)


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
    """What a user keeps between requests: its ledger and a release counter."""

    ledger: Ledger
    calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for the Flower node state and ledgers.json)."""
        return {"ledger": self.ledger.to_json(), "calls": self.calls, "extra": self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "UserState":
        """Rebuild from :meth:`to_json` output."""
        return cls(Ledger.from_json(data["ledger"]), data["calls"], data.get("extra", {}))


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
        Run seed for reproducible noise; None draws from the operating system.
    state:
        Ledger and counter carried over from earlier requests.
    enforce:
        ``worst-case`` (the ledger of actual releases) or ``amplified`` (the PLD bound of
        the Poisson-sampled schedule of steps served so far).
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
    ) -> None:
        if enforce not in ("worst-case", "amplified"):
            raise ValueError(f"enforce must be worst-case or amplified, got {enforce!r}")
        self.user_id = user_id
        self.records = records
        self.labels = labels
        self.seed = seed
        self.enforce = enforce
        self.state = state or UserState(Ledger(records.num_records, budget))
        if self.state.ledger.num_records != records.num_records:
            raise ValueError("the stored ledger does not match this user's records")

    def release(self, kind: Kind, request: ReleaseRequest) -> Release:
        """Serve one step of ``kind``: training sampling, or one up-sampled query step.

        Raises BudgetExhausted (or QueriesDone), having released nothing, when the user
        cannot or need not release anything. A Poisson step that samples no record releases
        an empty batch and still counts as a step.
        """
        if kind == "query":
            return self.query_step(request)
        randomizer = request.randomizer
        events: list[PrivacyEvent] = [randomizer.event]
        if self.labels.event is not None:
            events.append(self.labels.event)
        sampling = TrainSampling.parse(request.sampling)
        pool = np.arange(len(self.records.train))
        ledger = self.state.ledger
        if not len(pool):
            raise BudgetExhausted(f"user {self.user_id}: holds no train records")
        if self.enforce == "amplified":
            self._check_amplified("train", request.sampling, randomizer.event)
            candidates = pool
        else:
            candidates = ledger.remaining(events, pool)
        if not len(candidates):
            raise BudgetExhausted(f"user {self.user_id}: no train record has budget left")
        rng = self._rng()
        chosen = sampling.select(candidates, request.records, rng)
        needed = int(getattr(getattr(randomizer, "mixup", None), "k", 1))  # records mixed per report
        if needed > 1 and len(chosen) < needed:
            raise BudgetExhausted(f"user {self.user_id}: {randomizer.name} mixes {needed} records per report, {len(chosen)} chosen")
        if not ledger.user_can_afford(events, len(chosen)):
            raise BudgetExhausted(f"user {self.user_id}: user-level budget would be exceeded")
        labels = self.labels.release(self.records.train_labels[chosen], rng)
        if hasattr(randomizer, "release_with_labels"):
            # Mixup mechanisms mix the released labels with the reports' own coefficients.
            one_hot = np.eye(self.labels.num_values)[labels]
            reports, labels = randomizer.release_with_labels(self.records.train[chosen], one_hot, rng)
        else:
            reports = randomizer.release(self.records.train[chosen], rng)
        ledger.charge(events, chosen)
        ledger.log_step("train", request.sampling, randomizer.event)
        self.state.calls += 1
        return Release(self.user_id, reports.astype(np.float32), labels, events)

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
            raise QueriesDone(f"user {self.user_id}: holds no query records")
        st = self._query_state()
        counts = np.asarray(st["counts"], dtype=np.int64)
        if (counts >= up.k).all():
            raise QueriesDone(f"user {self.user_id}: every true query has {up.k} answers")
        ledger = self.state.ledger
        if self.enforce == "amplified":
            self._check_amplified("query", request.sampling, event)
        elif not len(ledger.remaining([event], n_train + np.flatnonzero(counts < up.k))):
            raise BudgetExhausted(f"user {self.user_id}: no query short of {up.k} answers has budget left")
        rng = self._rng()
        n_fict = up.fictitious(n_true)
        sampled = np.flatnonzero(rng.random(n_true + n_fict) < up.p)
        true_items = sampled[sampled < n_true]
        fict_items = sampled[sampled >= n_true] - n_true
        stand_ins = 0
        if self.enforce == "worst-case":
            allowed = ledger.remaining([event], n_train + true_items) - n_train
            stand_ins = len(true_items) - len(allowed)
            true_items = allowed
        if not ledger.user_can_afford([event], len(true_items)):
            raise BudgetExhausted(f"user {self.user_id}: user-level budget would be exceeded")
        fictitious = np.vstack(
            [self._fictitious(randomizer, n_fict)[fict_items], self._directions(randomizer, stand_ins, rng)]
        )
        clean = np.vstack([self.records.query[true_items], fictitious])
        items = np.concatenate([true_items, np.full(len(fictitious), PENDING_FICTITIOUS)]).astype(np.int64)
        order = rng.permutation(len(items))
        reports = randomizer.release(clean[order], rng)
        ledger.charge([event], n_train + true_items)
        ledger.log_step("query", request.sampling, event)
        st["pending"] = items[order].tolist()
        st["steps"] += 1
        st["released_true"] += int(len(true_items))
        st["released_fictitious"] += int(len(fictitious))
        self.state.calls += 1
        return Release(self.user_id, reports.astype(np.float32), None, [event], np.arange(len(items), dtype=np.int64))

    def check_answers(self, slots: np.ndarray) -> None:
        """RequestRefused unless every slot is a distinct, released, not yet answered one."""
        pending = np.asarray(self._query_state()["pending"], dtype=np.int64)
        slots = np.asarray(slots, dtype=np.int64)
        if len(np.unique(slots)) != len(slots):
            raise RequestRefused(f"user {self.user_id}: a slot is answered twice")
        if len(slots) and (slots.min() < 0 or slots.max() >= len(pending)):
            raise RequestRefused(f"user {self.user_id}: answer for a slot it did not release")
        if len(slots) and (pending[slots] == PENDING_ANSWERED).any():
            raise RequestRefused(f"user {self.user_id}: answer for a slot already answered")

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

    def _query_state(self) -> dict[str, Any]:
        n_true = len(self.records.query)
        st = self.state.extra.get("queries")
        if st is None:
            seed = int(self._rng(stream=1).integers(2**63 - 1))
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
        """The user's fixed fictitious queries: directions from its own secret seed, no data."""
        rng = np.random.default_rng(self._query_state()["fictitious_seed"])
        return self._directions(randomizer, count, rng)

    def _directions(self, randomizer: Randomizer, count: int, rng: np.random.Generator) -> np.ndarray:
        dim = self.records.query.shape[1]
        x = rng.standard_normal((count, dim))
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        return x * float(randomizer.params().get("clip", 1.0))

    def _check_amplified(self, kind: str, sampling: str, event: PrivacyEvent) -> None:
        """BudgetExhausted unless one more step keeps the amplified PLD bound within budget."""
        ledger = self.state.ledger
        try:
            groups = enforced.entries([*ledger.step_log(kind), (sampling, event, 1)])
        except ValueError as reason:
            raise BudgetExhausted(f"user {self.user_id}: {reason}") from None
        if not enforced.within_budget(groups, ledger.budget.delta, ledger.budget.epsilon_sentence):
            raise BudgetExhausted(f"user {self.user_id}: the amplified {kind} budget would be exceeded")

    def amplified_epsilon(self) -> float:
        """Sentence-level amplified PLD bound: max over training and query records."""
        ledger = self.state.ledger
        return max(
            enforced.pld_epsilon(enforced.entries(ledger.step_log(kind)), ledger.budget.delta)
            for kind in ("train", "query")
        )

    def summary(self, train_events: list[PrivacyEvent] | None = None) -> dict[str, float]:
        """The figures a user reports about its own ledger.

        With ``train_events`` (what one training release costs), also how many training
        records can still afford one: the server can infer it from the public dataset
        size and the reports it received, and uses it to sample users with budget left.
        """
        ledger = self.state.ledger
        figures = {
            "epsilon_sentence": ledger.sentence_epsilon(),
            "epsilon_user": ledger.user_epsilon(),
            "releases": float(ledger.releases()),
        }
        if train_events is not None:
            figures["train_records_left"] = float(len(ledger.remaining(train_events, np.arange(len(self.records.train)))))
        return figures

    def _rng(self, stream: int = 0) -> np.random.Generator:
        if self.seed is None:
            return np.random.default_rng()
        key = (self.user_id, self.state.calls) if stream == 0 else (self.user_id, self.state.calls, stream)
        return np.random.default_rng(np.random.SeedSequence(entropy=self.seed, spawn_key=key))
