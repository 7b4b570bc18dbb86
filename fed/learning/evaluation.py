"""Accuracy bookkeeping for local and remote inference: what leaves a node, and how the server pools it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ldpfed.fed.learning.server_classifier import Model


@dataclass(frozen=True)
class UserOutcomes:
    """Exact local-inference outcomes of each user (simulation only: never built on a device).

    ``users`` are the hosted users with at least one query, ``queries`` how many each has, and
    ``correct[name]`` how many of them model ``name`` predicts correctly.
    """

    users: np.ndarray
    queries: np.ndarray
    correct: dict[str, np.ndarray]


@dataclass(frozen=True)
class Outcomes:
    """Evaluation outcomes that leave the node: exact counts (simulation only) or randomized bits.

    ``correct[name]`` counts correct predictions (exact), or reported-correct bits after binary
    randomized response with ``keep_probability`` (noisy); ``total[name]`` how many queries each covers.
    ``per_user`` splits exact counts by user (simulation only; refused with randomized bits).
    """

    correct: dict[str, int]
    total: dict[str, int]
    exact: bool
    keep_probability: float = 1.0
    per_user: UserOutcomes | None = None

    def __post_init__(self) -> None:
        if self.per_user is not None and not self.exact:
            raise ValueError("per-user outcomes are exact counts: simulation only, never beside randomized bits")

    def estimated_correct(self) -> dict[str, float]:
        """Unbiased estimates of the correct counts (the counts themselves when exact)."""
        if self.exact:
            return {k: float(v) for k, v in self.correct.items()}
        p = self.keep_probability
        return {k: (v - (1 - p) * self.total[k]) / (2 * p - 1) for k, v in self.correct.items()}


def accuracy(outcomes: Iterable[Outcomes]) -> dict[str, float]:
    """Accuracy per model pooled over nodes: estimated correct counts over the queries they cover."""
    correct: dict[str, float] = {}
    total: dict[str, int] = {}
    for outcome in outcomes:
        for name, value in outcome.estimated_correct().items():
            correct[name] = correct.get(name, 0.0) + value
            total[name] = total.get(name, 0) + outcome.total[name]
    return {name: correct[name] / total[name] for name in correct if total[name]}


def local_outcomes(
    models: Mapping[str, Model], x: Mapping[str, np.ndarray], y: np.ndarray, users: np.ndarray, starts: np.ndarray
) -> Outcomes:
    """Exact outcomes of each model on stacked query records (simulation only: nothing leaves the node).

    User ``users[i]``'s queries are rows ``starts[i]:starts[i + 1]`` of ``x[name]`` (model ``name``'s
    input: the clean records' features, or denoised releases) and ``y``; the per-user counts come
    from one prediction per model and cumulative sums.
    """
    starts = np.asarray(starts, dtype=np.int64)
    queries = np.diff(starts)
    held = queries > 0
    correct: dict[str, np.ndarray] = {}
    for name, model in models.items():
        hits = np.concatenate(([0], np.cumsum(model.predict(x[name]) == y))) if len(y) else np.zeros(1, np.int64)
        correct[name] = (hits[starts[1:]] - hits[starts[:-1]])[held].astype(np.int64)
    per_user = UserOutcomes(np.asarray(users, dtype=np.int64)[held], queries[held], correct)
    total = int(queries.sum())
    return Outcomes(
        {name: int(c.sum()) for name, c in correct.items()}, dict.fromkeys(models, total), exact=True, per_user=per_user
    )
