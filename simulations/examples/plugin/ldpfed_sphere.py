"""An ldpfed plugin in one file: a randomizer, an encoder and a heterogeneity axis (docs/plugins.md).

- ``sphere-gaussian``: each row scaled to L2 norm exactly ``clip`` (its direction only), then
  N(0, sigma^2 I). The inputs lie on a sphere of radius ``clip``, whose diameter 2 * clip is the
  sensitivity its Gaussian event states.
- ``hashed-words[:<dim>]``: a bag of words hashed into ``dim`` signed buckets (default 64), unit length.
- ``cohorts``: ``--cohorts K`` puts user u in cohort u mod K and groups the reports by it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpfed.plugins import (
    CalibrationTarget,
    GaussianEvent,
    HeterogeneityAxis,
    Option,
    Randomizer,
    Scores,
    add_gaussian,
    antipodal_scores,
    check_finite_matrix,
    check_params,
    check_positive,
    gaussian_llr,
)


class SphereGaussian(Randomizer):
    """Scale rows to L2 norm ``clip``, add N(0, sigma^2 I); sensitivity 2 * clip."""

    name = "sphere-gaussian"
    noise_key = "sigma"
    required_options = frozenset({"clip"})
    float_safe = True  # its noise comes from add_gaussian: OpenDP's sampler on a device
    batch_release = True  # each report depends on its own row and fresh noise only
    decoded_as_sent = True
    audit_dimension_free = True  # the pair +-clip e_1 differs on one axis only

    def __init__(self, clip: float, sigma: float) -> None:
        self.clip = check_positive("clip", clip)
        self.sigma = check_positive("sigma", sigma)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> SphereGaussian:
        check_params(params, {"clip", "sigma"})
        return cls(params["clip"], params["sigma"])

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> SphereGaussian:
        clip = check_positive("clip", options["clip"])
        return cls(clip, target.gaussian_sigma(2 * clip))

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, "clip": self.clip, "sigma": self.sigma}

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=2 * self.clip, sigma=self.sigma)

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        x = check_finite_matrix(x)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        direction = np.where(norms > 0, x / np.maximum(norms, 1e-300), np.eye(1, x.shape[1]))  # zero rows: e_1
        return self.clip * direction

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return add_gaussian(self.preprocess(x), self.sigma, self.event.sensitivity, rng)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        return np.asarray(reports, dtype=np.float64), self.sigma**2

    @property
    def additive(self) -> bool:
        return True

    def audit_scores(self, dim: int) -> Scores:
        """+-clip e_1 (L2 distance 2 * clip, the sphere's diameter), scored by the Gaussian likelihood ratio
        log p(y | x1) / p(y | x0): larger means "released from x1", the direction the audit reads."""
        return antipodal_scores(self, dim, lambda y, x0, x1: gaussian_llr(y, x0, x1, self.sigma))


class HashedWords:
    """Lower-cased words hashed into ``dim`` signed buckets, summed, scaled to unit length."""

    def __init__(self, dim: str | int = 64, max_words: int | None = None) -> None:
        self._dim = int(dim)
        if not 2 <= self._dim <= 4096:
            raise ValueError(f"hashed-words: dim must be in [2, 4096], got {dim!r}")
        self.max_words = max_words

    @property
    def name(self) -> str:
        return f"hashed-words:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def fingerprint(self) -> str:
        return hashlib.sha256(f"hashed-words/1:{self._dim}:{self.max_words}".encode()).hexdigest()

    def truncated(self, max_length: int) -> HashedWords:
        return HashedWords(self._dim, max_length)

    def encode(
        self, texts: Sequence[str], texts2: Sequence[str] | None = None, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+", (text + " " + (texts2[row] if texts2 is not None else "")).lower())
            for word in words[: self.max_words]:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                out[row, int.from_bytes(digest[:4], "little") % self._dim] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


class CohortAxis(HeterogeneityAxis):
    """``--cohorts K``: user u belongs to cohort u mod K; the reports group users by cohort (0: off)."""

    name = "cohorts"
    options = (Option("cohorts", int, 0, "cohorts of users (u mod K) the reports group users by; 0: none"),)

    def parse(self, values: Mapping[str, Any]) -> int | None:
        k = values["cohorts"]
        if k < 0:
            raise ValueError(f"--cohorts must be at least 0, got {k}")
        return k or None

    def assign(self, setting: int, users: int, seed: int) -> np.ndarray:
        return np.arange(users) % setting

    def group_names(self, setting: int) -> tuple[str, ...]:
        return tuple(f"cohort{i}" for i in range(setting))
