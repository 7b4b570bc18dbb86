"""Laplace noise on representations: the correct L1 mechanism, and seed 002's Theorem 3 for the audit.

``laplace``: clip each row to L1 norm at most C1 and add i.i.d. Laplace(b) noise. The L1
diameter of the clipped domain is 2*C1, so one run is pure (2*C1/b)-DP (LaplaceEvent,
exact for replace-one).

``laplace-seed002``: exactly seed 002 Theorem 3, L2 clip to C and Laplace noise of scale
2C/epsilon per coordinate, which the paper states to be epsilon-DP. An L2 ball of radius C
has L1 diameter 2*C*sqrt(d), so the true cost is sqrt(d) * epsilon. Its event states that
true cost; ``params()`` carries the stated epsilon beside it. It exists for the audit only:
``from_params`` and ``calibrated`` refuse it unless ``allow_invalid`` is true, so a run must
opt in explicitly (and is then still charged the true cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpfed.fed.privacy.noise import add_laplace
from ldpfed.fed.privacy.events import LaplaceEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, antipodal_scores, pair_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.clip_and_noise import LAPLACE_NOISE, ClipAndNoise, clip_l1, clip_l2
from ldpfed.fed.randomizers.target import CalibrationTarget

__all__ = ["LaplaceRandomizer", "Seed002LaplaceRandomizer", "clip_l1"]


@register
class LaplaceRandomizer(ClipAndNoise):
    """Clip rows to L1 radius ``clip`` and add i.i.d. Laplace(``scale``); L1 sensitivity 2 * clip."""

    name = "laplace"
    noise_kind = LAPLACE_NOISE
    fields = ("clip", "scale")

    def __init__(self, clip: float, scale: float) -> None:
        super().__init__(clip, scale)

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "LaplaceRandomizer":
        clip = check_positive("clip", options["clip"])
        # x = 1/scale; pure composition gives a starting point that already meets the target.
        inverse = target.largest(lambda x: LaplaceEvent(2 * clip, 1 / x), target.epsilon / (2 * clip * target.releases))
        return cls(clip, 1 / inverse)

    @property
    def event(self) -> LaplaceEvent:
        return LaplaceEvent(sensitivity=2 * self.clip, scale=self.scale)

    def audit_scores(self, dim: int) -> Scores:
        """+-C1 e_1 (L1 distance 2 C1), scored by the Laplace log-likelihood ratio."""
        from ldpfed.fed.privacy.audit import laplace_llr  # SciPy on use: device messages audit nothing

        return antipodal_scores(self, dim, lambda y, x0, x1: laplace_llr(y, x0, x1, self.scale))


@register
class Seed002LaplaceRandomizer(Randomizer):
    """Seed 002 Theorem 3 as published: L2 clip C, Laplace(2C / stated_epsilon) per coordinate.

    Invalid: its true pure epsilon is sqrt(dim) * stated_epsilon (L1 diameter of the L2 ball
    2*C*sqrt(dim)), which is what its event states. Built only with ``allow_invalid=True``.
    """

    name = "laplace-seed002"
    required_options = frozenset({"clip", "dim"})
    optional_options = frozenset({"allow_invalid"})
    invalid = True

    def __init__(self, clip: float, stated_epsilon: float, dim: int, allow_invalid: bool = False) -> None:
        if allow_invalid is not True:
            raise ValueError(
                "laplace-seed002 under-noises by sqrt(dim) (seed 002 Theorem 3 takes the L1 "
                "sensitivity of an L2 ball to be 2C); it is for the audit only: pass "
                "allow_invalid=true to use it anyway (the ledger then charges its true cost)"
            )
        self.clip = check_positive("clip", clip)
        self.stated_epsilon = check_positive("stated_epsilon", stated_epsilon)
        self.dim = check_int("dim", dim)

    @property
    def scale(self) -> float:
        """Laplace scale of Theorem 3: 2C / stated epsilon."""
        return 2 * self.clip / self.stated_epsilon

    @property
    def true_epsilon(self) -> float:
        """Pure epsilon actually achieved: sqrt(dim) * stated epsilon."""
        return self.event.epsilon

    @property
    def claimed_epsilon(self) -> float:
        """The epsilon Theorem 3 states."""
        return self.stated_epsilon

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "Seed002LaplaceRandomizer":
        check_params(params, {"clip", "stated_epsilon", "dim"}, {"allow_invalid", "true_epsilon"})
        return cls(params["clip"], params["stated_epsilon"], params["dim"], params.get("allow_invalid", False))

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "Seed002LaplaceRandomizer":
        """As published: stated epsilon = epsilon / releases (the paper's basic composition).

        The returned instance does NOT meet the target; its event says by how much.
        """
        return cls(options["clip"], target.epsilon / target.releases, options["dim"], options.get("allow_invalid", False))

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "clip": self.clip,
            "stated_epsilon": self.stated_epsilon,
            "dim": self.dim,
            "allow_invalid": True,
            "true_epsilon": self.true_epsilon,
        }

    @property
    def event(self) -> LaplaceEvent:
        return LaplaceEvent(sensitivity=2 * self.clip * math.sqrt(self.dim), scale=self.scale)

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        x = check_finite_matrix(x)
        if x.shape[1] != self.dim:
            raise ValueError(f"laplace-seed002 was set up for dim {self.dim}, got rows of length {x.shape[1]}")
        return clip_l2(x, self.clip)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return add_laplace(self.preprocess(x), self.scale, self.event.sensitivity, rng)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        return np.asarray(reports, dtype=np.float64), 2 * self.scale**2

    @property
    def additive(self) -> bool:
        return True

    def audit_scores(self, dim: int) -> Scores:
        """+-(C / sqrt d) (1, ..., 1): the L1 diameter 2 C sqrt(d) of the L2 ball, scored by the Laplace ratio."""
        from ldpfed.fed.privacy.audit import laplace_llr  # SciPy on use: device messages audit nothing

        if dim != self.dim:
            raise ValueError(f"laplace-seed002 was built for dim {self.dim}, audit asks for {dim}")
        x0 = np.full((1, dim), self.clip / math.sqrt(dim))
        x1 = -x0
        return pair_scores(self, x0, x1, lambda y: laplace_llr(y, x0, x1, self.scale), dim)
