"""Randomizers that clip each row to a norm ball and add i.i.d. noise: what they share.

The Gaussian and Laplace DP layers and the DP instance encodings differ only in the norm of
the clip, the noise distribution, and (for mixup) what happens between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpfed.fed.privacy.noise import add_gaussian, add_laplace
from ldpfed.fed.privacy.validators import check_positive
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params


def clip_l2(x: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L2 norm at most ``clip`` (seed 000 eq. 3)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]  # np.linalg.norm(x, axis=1), 4x faster
    return x * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


def clip_l1(x: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L1 norm at most ``clip``."""
    norms = np.abs(x).sum(axis=1, keepdims=True)
    return x * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


@dataclass(frozen=True)
class NoiseKind:
    """A clip norm and a noise distribution: the name of its scale, its sampler (fed.privacy.noise), its variance."""

    key: str
    clip_rows: Callable[[np.ndarray, float], np.ndarray]
    add: Callable[[np.ndarray, float, float, np.random.Generator], np.ndarray]
    """(x, scale, sensitivity the event states, rng) -> x plus noise."""
    variance: Callable[[float], float]


GAUSSIAN_NOISE = NoiseKind("sigma", clip_l2, add_gaussian, lambda s: s**2)
"""L2 clip, N(0, sigma^2) per coordinate."""
LAPLACE_NOISE = NoiseKind("scale", clip_l1, add_laplace, lambda b: 2 * b**2)
"""L1 clip, Laplace(scale) per coordinate."""


class ClipAndNoise(Randomizer):
    """Clip rows to radius ``clip`` in the kind's norm, then add its noise; decoded as is.

    Subclasses set ``noise_kind``, ``fields`` (the constructor's parameters, in order, as
    :meth:`params` writes them) and the event.
    """

    noise_kind: ClassVar[NoiseKind]
    fields: ClassVar[tuple[str, ...]]
    required_options: ClassVar[frozenset[str]] = frozenset({"clip"})
    batch_release: ClassVar[bool] = True
    decoded_as_sent: ClassVar[bool] = True
    audit_dimension_free: ClassVar[bool] = True
    """i.i.d. noise per coordinate at a scale the clip alone fixes: the worst pair +-C e_1 differs on the
    first axis only, where the likelihood ratio reads it; every other coordinate adds exactly 0."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "noise_kind" in cls.__dict__:
            cls.noise_key = cls.noise_kind.key

    def __init__(self, clip: float, noise: float) -> None:
        self.clip = check_positive("clip", clip)
        setattr(self, self.noise_kind.key, check_positive(self.noise_kind.key, noise))

    @property
    def noise(self) -> float:
        """The noise scale (sigma or the Laplace scale)."""
        return float(getattr(self, self.noise_kind.key))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "ClipAndNoise":
        check_params(params, set(cls.fields))
        return cls(*(params[name] for name in cls.fields))

    def params(self) -> dict[str, Any]:
        return {"mechanism": self.name, **{name: getattr(self, name) for name in self.fields}}

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        return self.noise_kind.clip_rows(check_finite_matrix(x), self.clip)

    def preprocess_key(self) -> tuple[str, float] | None:
        return self.noise_kind.key, self.clip

    def randomize(self, prepared: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``prepared`` plus fresh noise of this kind (on a device, from OpenDP: fed.privacy.noise)."""
        return self.noise_kind.add(prepared, self.noise, self.event.sensitivity, rng)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.randomize(self.preprocess(x), rng)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        return np.asarray(reports, dtype=np.float64), self.noise_kind.variance(self.noise)

    @property
    def additive(self) -> bool:
        return True
