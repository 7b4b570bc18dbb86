"""A linear softmax head trained by local SGD: the model of the central DP-FedAvg baseline.

Its parameters are a fed.learning.classifier.LinearModel (weights d x k, bias k), so local inference
scores it exactly as it scores the noise-aware discriminant of the local model.
"""

from __future__ import annotations

import numpy as np

from ldpfed.fed.learning.classifier import LinearModel

BATCH = 32
"""Records per local SGD step."""


def initial(dim: int, num_labels: int) -> LinearModel:
    """The all-zero head (uniform predictions): the first round's global model."""
    return LinearModel(np.zeros((dim, num_labels)), np.zeros(num_labels))


def local_sgd(
    model: LinearModel, x: np.ndarray, y: np.ndarray, lr: float, epochs: int, rng: np.random.Generator
) -> LinearModel:
    """``epochs`` passes of mini-batch SGD on the mean cross-entropy of ``x`` (n x d) with labels ``y``."""
    weights, bias = model.weights.astype(np.float64).copy(), model.bias.astype(np.float64).copy()
    x = np.asarray(x, dtype=np.float64)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            rows = order[start : start + BATCH]
            logits = x[rows] @ weights + bias
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            probs[np.arange(len(rows)), y[rows]] -= 1.0
            weights -= lr * x[rows].T @ probs / len(rows)
            bias -= lr * probs.mean(axis=0)
    return LinearModel(weights, bias)
