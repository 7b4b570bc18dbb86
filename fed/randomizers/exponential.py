"""The exponential mechanism (seed 001) as a label channel, beside k-ary randomized response.

Report r with probability proportional to exp(epsilon * u(y, r) / (2 * Delta_u)), with
Delta_u = max_r max_{y, y'} |u(y, r) - u(y', r)|. Its published guarantee is epsilon-DP.

The event states the exact cost of this channel, which can be lower: with the default 0/1
utility (u = 1 iff r = y) the normaliser does not depend on y and the channel is exactly
k-ary randomized response at epsilon / 2 (RandomizedResponseEvent, exact PLD). For any other
utility matrix the event is pure with epsilon = the largest log ratio max_{r,y,y'} log
P[r | y] / P[r | y'] (at most the published epsilon).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldpfed.fed.privacy.events import PrivacyEvent, PureEpsilonEvent, RandomizedResponseEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, label_scores
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse, check_labels, make_label_release


class ExponentialMechanism:
    """Label channel: the exponential mechanism with utility matrix ``utility[y, r]``.

    Parameters
    ----------
    epsilon:
        The mechanism's published epsilon (its parameter).
    num_values:
        Number of label values k.
    utility:
        k x k utility matrix; None means the 0/1 utility (identity).
    """

    name = "exponential"
    """Its name in the audit (fed.randomizers.auditing)."""

    def __init__(self, epsilon: float, num_values: int, utility: Sequence[Sequence[float]] | None = None) -> None:
        self.epsilon = check_positive("epsilon", epsilon)
        self.num_values = check_int("num_values", num_values, 2)
        k = self.num_values
        self.utility = None if utility is None else np.asarray(utility, dtype=np.float64)
        u = np.eye(k) if self.utility is None else self.utility
        if u.shape != (k, k) or not np.isfinite(u).all():
            raise ValueError(f"utility must be a finite {k} x {k} matrix")
        self.sensitivity = float((u.max(axis=0) - u.min(axis=0)).max())
        if self.sensitivity <= 0:
            raise ValueError("utility must depend on the label (its sensitivity is 0)")
        logits = self.epsilon * u / (2 * self.sensitivity)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        self._matrix = probs / probs.sum(axis=1, keepdims=True)

    @property
    def event(self) -> PrivacyEvent:
        if self.utility is None:
            return RandomizedResponseEvent(epsilon=self.epsilon / 2, num_values=self.num_values)
        return PureEpsilonEvent(epsilon=self.exact_epsilon)

    @property
    def exact_epsilon(self) -> float:
        """max over r, y, y' of log P[r | y] / P[r | y']."""
        logp = np.log(self._matrix)
        return float((logp.max(axis=0) - logp.min(axis=0)).max())

    def release(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Sample each reported label from its row of the transition matrix."""
        labels = check_labels(labels, self.num_values)
        cumulative = np.cumsum(self._matrix, axis=1)[labels]
        u = rng.random(labels.size)[:, None]
        return np.minimum((u > cumulative).sum(axis=1), self.num_values - 1).astype(np.int64)

    def audit_scores(self, dim: int) -> Scores:
        """Labels 0 and 1, scored by the log ratio of the transition matrix (``dim`` is not used)."""
        return label_scores(self)

    def transition_matrix(self) -> np.ndarray:
        """P[reported = j | true = i]."""
        return self._matrix.copy()

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": "exponential", "epsilon": self.epsilon, "num_values": self.num_values}
        if self.utility is not None:
            out["utility"] = self.utility.tolist()
        return out


def make_label_channel(params: dict) -> PublicLabels | RandomizedResponse | ExponentialMechanism:
    """Rebuild any label channel from its ``params()``, the exponential mechanism included."""
    if params.get("mechanism") == "exponential":
        if not set(params) - {"utility"} == {"mechanism", "epsilon", "num_values"}:
            raise ValueError(f"unknown label channel {params!r}")
        return ExponentialMechanism(params["epsilon"], params["num_values"], params.get("utility"))
    return make_label_release(params)


__all__ = ["ExponentialMechanism", "make_label_channel"]
