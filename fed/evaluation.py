"""Accuracy bookkeeping for local and remote inference: what leaves a node, and how the server pools it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from fed.classifier import LinearModel


def local_correct(models: Mapping[str, LinearModel], x: np.ndarray, y: np.ndarray) -> dict[str, int]:
    """Correct predictions of each model on a user's clean query records (no privacy cost)."""
    return {name: int((model.predict(x) == y).sum()) for name, model in models.items()} if len(y) else {}


@dataclass(frozen=True)
class Outcomes:
    """Evaluation outcomes that leave the node: exact counts (simulation only) or randomized bits.

    ``correct[name]`` counts correct predictions (exact), or reported-correct bits after binary
    randomized response with ``keep_probability`` (noisy); ``total[name]`` how many queries each covers.
    """

    correct: dict[str, int]
    total: dict[str, int]
    exact: bool
    keep_probability: float = 1.0

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
