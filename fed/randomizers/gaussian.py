"""The DP layer of seed 000: L2 clipping to C, then Gaussian noise N(0, sigma^2 I)."""

from __future__ import annotations

import numpy as np

from fed.privacy.events import GaussianEvent, _positive
from fed.randomizers.base import Randomizer, check_finite_matrix


def clip_l2(x: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L2 norm at most ``clip`` (seed 000 eq. 3)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


class GaussianRandomizer(Randomizer):
    """Clip rows to L2 radius ``clip`` and add N(0, sigma^2 I); sensitivity is 2 * clip."""

    def __init__(self, clip: float, sigma: float) -> None:
        self.clip = _positive("clip", clip)
        self.sigma = _positive("sigma", sigma)

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=2 * self.clip, sigma=self.sigma)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = clip_l2(check_finite_matrix(x), self.clip)
        return x + rng.normal(0.0, self.sigma, size=x.shape)
