"""Accuracy bookkeeping for local and remote inference."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from fed.classifier import LinearModel


def local_correct(models: Mapping[str, LinearModel], x: np.ndarray, y: np.ndarray) -> dict[str, int]:
    """Correct predictions of each model on a user's clean query records (no privacy cost)."""
    return {name: int((model.predict(x) == y).sum()) for name, model in models.items()} if len(y) else {}


def accuracy(counts: Iterable[Mapping[str, int]], totals: Iterable[int]) -> dict[str, float]:
    """Pooled accuracy per model from per-user correct counts and query totals."""
    correct: dict[str, int] = {}
    for c in counts:
        for name, value in c.items():
            correct[name] = correct.get(name, 0) + value
    total = sum(totals)
    return {name: value / total for name, value in correct.items()} if total else {}

