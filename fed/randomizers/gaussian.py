"""The DP layer of seed 000: L2 clipping to C, then Gaussian noise N(0, sigma^2 I)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fed.privacy.calibration import calibrate_gaussian_sigma
from fed.privacy.events import GaussianEvent, PrivacyEvent, check_positive
from fed.randomizers.base import Randomizer, check_finite_matrix, check_params, clip_option, register


def clip_l2(x: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L2 norm at most ``clip`` (seed 000 eq. 3)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


@register
class GaussianRandomizer(Randomizer):
    """Clip rows to L2 radius ``clip`` and add N(0, sigma^2 I); sensitivity is 2 * clip."""

    name = "gaussian"

    def __init__(self, clip: float, sigma: float) -> None:
        self.clip = check_positive("clip", clip)
        self.sigma = check_positive("sigma", sigma)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "GaussianRandomizer":
        check_params(params, {"clip", "sigma"})
        return cls(params["clip"], params["sigma"])

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        releases: int,
        options: Mapping[str, Any],
        other_events: Mapping[PrivacyEvent, int] | None = None,
    ) -> "GaussianRandomizer":
        clip = clip_option(cls.name, options)
        return cls(clip, calibrate_gaussian_sigma(epsilon, delta, releases, 2 * clip, other_events))

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "clip": self.clip, "sigma": self.sigma}

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=2 * self.clip, sigma=self.sigma)

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        return clip_l2(check_finite_matrix(x), self.clip)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = self.preprocess(x)
        return x + rng.normal(0.0, self.sigma, size=x.shape)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        return np.asarray(reports, dtype=np.float64), self.sigma**2
