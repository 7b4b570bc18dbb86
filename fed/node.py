"""The users one Flower node hosts, and how they answer each kind of server message.

One node hosts one user (deployment) or a cohort of users (scale mode); the code is the
same. Everything here is plain Python and numpy, so the ClientApp stays a thin adapter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fed.classifier import LinearModel
from fed.evaluation import local_correct
from fed.plan import PrivacyPlan
from fed.privacy.events import PrivacyEvent
from fed.requests import RequestRefused, parse_release_request
from fed.user import BudgetExhausted, Kind, QueriesDone, User, UserRecords, UserState

MAX_SCORES = 10_000_000


@dataclass
class NodeReply:
    """Reports of every user that released, plus what the server needs to read them."""

    reports: np.ndarray
    labels: np.ndarray
    users: np.ndarray
    slots: np.ndarray
    randomizer: dict[str, Any]
    label_channel: dict[str, Any]
    refusals: dict[int, str] = field(default_factory=dict)
    ledgers: dict[int, dict[str, float]] = field(default_factory=dict)


class NodeHost:
    """A cohort of users on one node, with their ledgers carried between messages.

    Parameters
    ----------
    records:
        Clean records per hosted user id.
    plan:
        The run's privacy plan (budget, label channel, the user's noise floors).
    seed:
        Run seed (None: noise from the operating system, as on a real device).
    states:
        JSON states of the users from earlier messages (ledgers and counters).
    """

    def __init__(
        self,
        records: Mapping[int, UserRecords],
        plan: PrivacyPlan,
        seed: int | None,
        states: Mapping[int, dict[str, Any]] | None = None,
    ) -> None:
        states = states or {}
        self.plan = plan
        self.users = {
            uid: User(
                uid,
                rec,
                plan.budget,
                plan.labels,
                seed,
                UserState.from_json(states[uid]) if uid in states else None,
                plan.enforce,
            )
            for uid, rec in records.items()
        }

    def release(self, kind: Kind, raw_request: Mapping[str, Any]) -> NodeReply:
        """Serve a train or query release request; refused requests release nothing.

        Raises RequestRefused for a malformed or hostile request (for every user). A user
        out of budget is listed in ``refusals`` and the others still answer.
        """
        request = parse_release_request(raw_request, self.plan.limits(kind))
        unknown = [u for u in request.users if u not in self.users]
        if unknown:
            raise RequestRefused(f"users {unknown[:5]} are not hosted on this node")
        parts: list[tuple[int, Any]] = []
        refusals: dict[int, str] = {}
        for uid in request.users:
            try:
                parts.append((uid, self.users[uid].release(kind, request)))
            except (BudgetExhausted, QueriesDone) as reason:
                refusals[uid] = str(reason)
        dim = request.randomizer.preprocess(np.zeros((1, self.dim))).shape[1]
        reports = np.concatenate([r.reports for _, r in parts]) if parts else np.zeros((0, dim), np.float32)
        sizes = [len(r.reports) for _, r in parts]
        return NodeReply(
            reports=reports,
            labels=_stack_labels([r.labels for _, r in parts]) if kind == "train" and parts else np.zeros(0, np.int64),
            users=np.repeat([uid for uid, _ in parts], sizes).astype(np.int64),
            slots=np.concatenate([r.slots for _, r in parts]).astype(np.int64)
            if kind == "query" and parts
            else np.zeros(0, np.int64),
            randomizer=request.randomizer.params(),
            label_channel=self.plan.labels.params(),
            refusals=refusals,
            ledgers={uid: self.users[uid].summary(self._train_events()) for uid in request.users},
        )

    def evaluate(self, models: Mapping[str, LinearModel]) -> tuple[dict[str, int], int]:
        """Local inference: correct counts of each model on every user's clean queries."""
        totals: dict[str, int] = {name: 0 for name in models}
        count = 0
        for user in self.users.values():
            x = self.plan.query.preprocess(user.records.query) if len(user.records.query) else user.records.query
            for name, value in local_correct(models, x, user.records.query_labels).items():
                totals[name] += value
            count += len(user.records.query_labels)
        return totals, count

    def answer(self, users: np.ndarray, slots: np.ndarray, scores: np.ndarray) -> list[int]:
        """Remote inference: take the server's scores for released query slots.

        Everything is checked before any user's state changes (RequestRefused otherwise).
        Returns the users whose true queries now all have k answers.
        """
        users, slots, scores = np.asarray(users), np.asarray(slots), np.asarray(scores)
        if scores.ndim != 2 or scores.size > MAX_SCORES or len(users) != len(scores) or len(slots) != len(scores):
            raise RequestRefused("answer arrays must align: users, slots and a 2-D score matrix")
        if scores.shape[1] != self.plan.labels.num_values:
            raise RequestRefused(f"answers must have {self.plan.labels.num_values} scores per slot, got {scores.shape[1]}")
        if not np.isfinite(scores).all():
            raise RequestRefused("answer scores contain NaN or infinite values")
        if not (np.issubdtype(users.dtype, np.integer) and np.issubdtype(slots.dtype, np.integer)):
            raise RequestRefused("users and slots must be integer arrays")
        groups: dict[int, np.ndarray] = {}
        for uid in np.unique(users).tolist():
            if uid not in self.users:
                raise RequestRefused(f"answer for a user not hosted here ({uid})")
            rows = np.flatnonzero(users == uid)
            self.users[uid].check_answers(slots[rows])
            groups[uid] = rows
        k = self.plan.upsampling.k
        return [uid for uid, rows in groups.items() if self.users[uid].take_answers(slots[rows], scores[rows], k)]

    def score(self) -> dict[str, int]:
        """Remote-inference outcome summed over the hosted users (a simulation metric)."""
        totals: dict[str, int] = {}
        steps_max = 0
        for user in self.users.values():
            result = user.query_result(self.plan.upsampling.k)
            steps_max = max(steps_max, result.pop("steps"))
            for key, value in result.items():
                totals[key] = totals.get(key, 0) + value
        totals["steps_max"] = steps_max
        return totals

    def _train_events(self) -> list[PrivacyEvent]:
        """What one planned training release costs a record (representation and label)."""
        label = self.plan.labels.event
        return [self.plan.train.event] + ([label] if label is not None else [])

    def states(self) -> dict[int, dict[str, Any]]:
        """JSON states of every hosted user, to be kept until the next message."""
        return {uid: user.state.to_json() for uid, user in self.users.items()}

    def states_json(self) -> str:
        """:meth:`states` as one JSON string."""
        return json.dumps({str(k): v for k, v in self.states().items()})

    @property
    def model_dim(self) -> int:
        """Dimension of the classifier's input: the query randomizer's preprocess of a record."""
        return int(self.plan.query.preprocess(np.zeros((1, self.dim))).shape[1])

    @property
    def dim(self) -> int:
        """Dimension of the clean records (after any shipped projection)."""
        user = next(iter(self.users.values()))
        return user.records.train.shape[1]


def states_from_json(text: str) -> dict[int, dict[str, Any]]:
    """Inverse of :meth:`NodeHost.states_json`."""
    return {int(k): v for k, v in json.loads(text).items()}


def _stack_labels(parts: list[np.ndarray]) -> np.ndarray:
    """Users' released labels in one array: class ids (int64), or mixed soft labels (float64 rows)."""
    labels = np.concatenate(parts)
    return labels.astype(np.int64) if labels.ndim == 1 else labels.astype(np.float64)
