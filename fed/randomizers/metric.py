"""Metric DP (seed 003): d_chi Laplace noise in R^d on (token) embeddings, as in TokEmbPriv.

Noise density proportional to exp(-eta * ||z||_2): a radius drawn from Gamma(d, 1/eta)
times a direction uniform on the unit sphere. (Seed 003 writes "uniformly sampled from the
unit ball"; a direction inside the ball would not give that density. The sphere is right.)

Inputs are first clipped to L2 radius C, so the domain actually used has diameter 2C and
one run is pure (eta * 2C)-DP: the privacy loss eta * (||y - x'|| - ||y - x||) reaches
eta * ||x - x'|| far along x - x'. Optionally the noisy vector is clipped again to
``post_clip`` (seed 003 eq. 3), which is post-processing and costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpfed.fed.privacy.events import MetricDPEvent
from ldpfed.fed.privacy.validators import check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, antipodal_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.clip_and_noise import clip_l2
from ldpfed.fed.randomizers.target import CalibrationTarget


def dchi_noise(rows: int, dim: int, eta: float, rng: np.random.Generator) -> np.ndarray:
    """``rows`` draws of d_chi Laplace noise in R^dim: Gamma(dim, 1/eta) radius times a uniform direction."""
    radius = rng.gamma(shape=dim, scale=1.0 / eta, size=rows)
    direction = rng.standard_normal((rows, dim))
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-300)
    return radius[:, None] * direction


def dchi_coordinate_variance(dim: int, eta: float) -> float:
    """Variance of one coordinate of d_chi noise: E||z||^2 / d = (d + 1) / eta^2."""
    return (dim + 1) / eta**2


@register
class DChiRandomizer(Randomizer):
    """Clip rows to L2 radius ``clip``, add d_chi noise with parameter ``eta``, optionally clip to ``post_clip``.

    Event: MetricDPEvent(eta, diameter=2*clip, tokens=1), pure epsilon = eta * 2 * clip.
    """

    name = "dchi"
    noise_key = "eta"
    batch_release = True
    float_safe = False  # no well-kept sampler of d_chi noise exists: a device runs it only if its policy names it
    required_options = frozenset({"clip"})
    optional_options = frozenset({"post_clip"})

    def __init__(self, clip: float, eta: float, post_clip: float | None = None) -> None:
        self.clip = check_positive("clip", clip)
        self.eta = check_positive("eta", eta)
        self.post_clip = None if post_clip is None else check_positive("post_clip", post_clip)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "DChiRandomizer":
        check_params(params, {"clip", "eta"}, {"post_clip", "epsilon_per_token"})
        return cls(params["clip"], params["eta"], params.get("post_clip"))

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "DChiRandomizer":
        clip = check_positive("clip", options["clip"])
        eta = target.largest(lambda e: MetricDPEvent(e, 2 * clip), target.epsilon / (2 * clip * target.releases))
        return cls(clip, eta, options.get("post_clip"))

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.name, "clip": self.clip, "eta": self.eta}
        if self.post_clip is not None:
            out["post_clip"] = self.post_clip
        out["epsilon_per_token"] = self.event.epsilon_per_token
        return out

    @property
    def event(self) -> MetricDPEvent:
        return MetricDPEvent(eta=self.eta, diameter=2 * self.clip, tokens=1)

    @property
    def claimed_epsilon(self) -> float:
        """The per-token epsilon eta * 2C that a given eta states."""
        return self.event.epsilon_per_token

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        return clip_l2(check_finite_matrix(x), self.clip)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = self.preprocess(x)
        y = x + dchi_noise(x.shape[0], x.shape[1], self.eta, rng)
        return y if self.post_clip is None else clip_l2(y, self.post_clip)

    @property
    def additive(self) -> bool:
        """Without a post-noise clip only (the clip after the noise is not additive)."""
        return self.post_clip is None

    def audit_scores(self, dim: int) -> Scores:
        """+-C e_1 (distance 2C), scored by the d_chi log-likelihood ratio."""
        from ldpfed.fed.privacy.audit import dchi_llr  # SciPy on use: device messages audit nothing

        return antipodal_scores(self, dim, lambda y, x0, x1: dchi_llr(y, x0, x1, self.eta))

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        """Reports as they are; the noise variance per coordinate is (d + 1) / eta^2.

        Unbiased only without ``post_clip`` (clipping the noisy vector shrinks it).
        """
        reports = np.asarray(reports, dtype=np.float64)
        return reports, dchi_coordinate_variance(reports.shape[1], self.eta)
