"""The DP layer of seed 000: L2 clipping to C, then Gaussian noise N(0, sigma^2 I)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fed.privacy.events import GaussianEvent
from fed.privacy.validators import check_positive
from fed.randomizers.audit_pairs import Scores, antipodal_scores
from fed.randomizers.base import register
from fed.randomizers.clip_and_noise import GAUSSIAN_NOISE, ClipAndNoise, clip_l2
from fed.randomizers.target import CalibrationTarget

__all__ = ["GaussianRandomizer", "clip_l2"]


@register
class GaussianRandomizer(ClipAndNoise):
    """Clip rows to L2 radius ``clip`` and add N(0, sigma^2 I); sensitivity is 2 * clip."""

    name = "gaussian"
    noise_kind = GAUSSIAN_NOISE
    fields = ("clip", "sigma")
    sigma_settable = True

    def __init__(self, clip: float, sigma: float) -> None:
        super().__init__(clip, sigma)

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "GaussianRandomizer":
        clip = check_positive("clip", options["clip"])
        return cls(clip, target.gaussian_sigma(2 * clip))

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=2 * self.clip, sigma=self.sigma)

    def audit_scores(self, dim: int) -> Scores:
        """+-C e_1 (L2 distance 2C), scored by the Gaussian log-likelihood ratio."""
        from fed.privacy.audit import gaussian_llr  # SciPy on use: device messages audit nothing

        return antipodal_scores(self, dim, lambda y, x0, x1: gaussian_llr(y, x0, x1, self.sigma))
