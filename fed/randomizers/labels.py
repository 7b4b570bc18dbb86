"""Label release: k-ary randomized response, or labels the run declares public."""

from __future__ import annotations

import math

import numpy as np

from ldpfed.fed.privacy.events import RandomizedResponseEvent
from ldpfed.fed.randomizers.audit_pairs import Scores, label_scores


def check_labels(labels: np.ndarray, num_values: int) -> np.ndarray:
    """``labels`` as int64 in [0, num_values), or a ValueError naming the problem."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError("labels must be a 1-D integer array")
    if labels.size and (labels.min() < 0 or labels.max() >= num_values):
        raise ValueError(f"labels must lie in [0, {num_values})")
    return labels.astype(np.int64)


class RandomizedResponse:
    """k-ary randomized response with privacy ``epsilon`` per run."""

    name = "randomized-response"
    """Its name in the audit (fed.randomizers.auditing)."""

    def __init__(self, epsilon: float, num_values: int) -> None:
        self._event = RandomizedResponseEvent(epsilon=float(epsilon), num_values=int(num_values))

    @property
    def event(self) -> RandomizedResponseEvent:
        return self._event

    @property
    def num_values(self) -> int:
        """Number of label values k."""
        return self._event.num_values

    @property
    def keep_probability(self) -> float:
        """Probability that the true value is reported."""
        e, k = math.exp(self._event.epsilon), self._event.num_values
        return e / (e + k - 1)

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Report each label truthfully w.p. ``keep_probability``, else another value uniformly."""
        k = self._event.num_values
        labels = check_labels(labels, k)
        flip = rng.random(labels.size) >= self.keep_probability
        other = (labels + rng.integers(1, k, size=labels.size)) % k
        return np.where(flip, other, labels)

    def params(self) -> dict[str, float | int | str]:
        """Plain-JSON description, as sent to the server with the labels."""
        return {"mechanism": "randomized_response", "epsilon": self._event.epsilon, "num_values": self._event.num_values}

    def audit_scores(self, dim: int) -> Scores:
        """Labels 0 and 1, scored by the log ratio of the transition matrix (``dim`` is not used)."""
        return label_scores(self)

    def transition_matrix(self) -> np.ndarray:
        """P[reported = j | true = i]."""
        k = self._event.num_values
        keep = self.keep_probability
        matrix = np.full((k, k), (1 - keep) / (k - 1))
        np.fill_diagonal(matrix, keep)
        return matrix


class PublicLabels:
    """Labels the run declares public: released as they are, at no privacy cost."""

    event = None

    def __init__(self, num_values: int) -> None:
        self.num_values = int(num_values)

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return check_labels(labels, self.num_values)

    def params(self) -> dict[str, float | int | str]:
        """Plain-JSON description, as sent to the server with the labels."""
        return {"mechanism": "public", "num_values": self.num_values}

    def transition_matrix(self) -> np.ndarray:
        """P[reported = j | true = i]: the identity."""
        return np.eye(self.num_values)


def make_label_release(params: dict) -> PublicLabels | RandomizedResponse:
    """Rebuild a label channel from its ``params()``; ValueError on anything else."""
    kind = params.get("mechanism")
    if kind == "public" and set(params) == {"mechanism", "num_values"}:
        return PublicLabels(params["num_values"])
    if kind == "randomized_response" and set(params) == {"mechanism", "epsilon", "num_values"}:
        return RandomizedResponse(params["epsilon"], params["num_values"])
    raise ValueError(f"unknown label channel {params!r}")
