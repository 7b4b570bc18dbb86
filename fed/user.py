"""One simulated or real user: its clean records, its ledger, and what it releases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fed.privacy.events import PrivacyEvent
from fed.privacy.ledger import Budget, Ledger
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.requests import ReleaseRequest

Kind = Literal["train", "query"]


class BudgetExhausted(RuntimeError):
    """The user has no budget left for the request; it refuses instead of releasing."""


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
    query_ids: np.ndarray | None = None


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
    """

    def __init__(
        self,
        user_id: int,
        records: UserRecords,
        budget: Budget,
        labels: PublicLabels | RandomizedResponse,
        seed: int | None,
        state: UserState | None = None,
    ) -> None:
        self.user_id = user_id
        self.records = records
        self.labels = labels
        self.seed = seed
        self.state = state or UserState(Ledger(records.num_records, budget))
        if self.state.ledger.num_records != records.num_records:
            raise ValueError("the stored ledger does not match this user's records")

    def release(self, kind: Kind, request: ReleaseRequest) -> Release:
        """Randomize up to ``request.records`` records of ``kind`` that still have budget.

        Raises BudgetExhausted, having released nothing, when no record can be released.
        """
        randomizer = request.randomizer
        events: list[PrivacyEvent] = [randomizer.event]
        if kind == "train" and self.labels.event is not None:
            events.append(self.labels.event)
        n_train = len(self.records.train)
        pool = np.arange(n_train) if kind == "train" else n_train + np.arange(len(self.records.query))
        ledger = self.state.ledger
        candidates = ledger.remaining(events, pool)
        rng = self._rng()
        wanted = len(candidates) if request.records == 0 else min(request.records, len(candidates))
        if wanted == 0:
            raise BudgetExhausted(f"user {self.user_id}: no {kind} record has budget left")
        if not ledger.user_can_afford(events, wanted):
            raise BudgetExhausted(f"user {self.user_id}: user-level budget would be exceeded")
        chosen = np.sort(rng.choice(candidates, size=wanted, replace=False))
        if kind == "train":
            clean, labels = self.records.train[chosen], self.labels.release(self.records.train_labels[chosen], rng)
        else:
            clean, labels = self.records.query[chosen - n_train], None
        reports = randomizer.release(clean, rng)
        ledger.charge(events, chosen)
        self.state.calls += 1
        query_ids = chosen - n_train if kind == "query" else None
        return Release(self.user_id, reports.astype(np.float32), labels, events, query_ids)

    def summary(self) -> dict[str, float]:
        """The figures a user reports about its own ledger."""
        ledger = self.state.ledger
        return {
            "epsilon_sentence": ledger.sentence_epsilon(),
            "epsilon_user": ledger.user_epsilon(),
            "releases": float(ledger.releases()),
        }

    def _rng(self) -> np.random.Generator:
        if self.seed is None:
            return np.random.default_rng()
        seq = np.random.SeedSequence(entropy=self.seed, spawn_key=(self.user_id, self.state.calls))
        return np.random.default_rng(seq)
