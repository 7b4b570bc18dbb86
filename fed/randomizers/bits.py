"""Randomized binary encodings of representations (seed 004): z-score, fixed-point bits, then SUE/OUE/OME.

Encoding (seed 004 Algorithm 1): z-score each coordinate with public mean and std; clip to
the representable range +-(2^m - 2^-n); write each value as l = 1 + m + n bits: a sign bit
(1 for negative), m integer bits and n fraction bits (magnitude truncated to a multiple of
2^-n, most significant bit first). The r coordinates give one vector of r*l bits.

Perturbation: bit i is reported as 1 with probability p_i if it is 1, q_i if it is 0.

- SUE: p = e^{e'}/(1+e^{e'}), q = 1 - p;  OUE: p = 1/2, q = 1/(1+e^{e'});  e' = epsilon / (r*l).
  Seed 004 quotes Delta f = 2r for SUE and OUE, which is the one-hot (unary) encoding's
  diameter; on fixed-point bits every one of the r*l bits can differ, so Delta f = r*l here
  (with 2r the stated epsilon would be off by a factor l/2).
- OME (seed 004 Theorem 1, as published): p = lambda/(1+lambda) on even bit indices
  (0-based over the whole r*l vector), 1/(1+lambda^3) on odd ones; q = 1/(1+lambda e^{e'}).

Accounting (design.md section 2): the true pure epsilon is, per bit, the largest |log ratio|
of output probabilities over both input bit values, max(|log p/q|, |log (1-p)/(1-q)|), summed
over the r*l bits (two inputs can differ in all of them). For SUE that equals the stated
epsilon, for OUE it is below it, for OME with lambda > 1 it is far above (each even bit
alone costs about log lambda). The event carries the true figure; ``claimed_epsilon`` the
published one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from ldpfed.fed.privacy.events import BitFlipEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, pair_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.target import CalibrationTarget

PUBLISHED_INTEGER_BITS = 4
PUBLISHED_FRACTION_BITS = 5
PUBLISHED_OME_LAMBDA = 100.0
_CHUNK_ELEMENTS = 1 << 22


def fixed_point_bits(z: np.ndarray, integer_bits: int, fraction_bits: int) -> np.ndarray:
    """Bits (uint8) of shape (rows, r * (1 + m + n)): per value the sign, then |value| in m.n fixed point."""
    z = np.asarray(z, dtype=np.float64)
    m, n = integer_bits, fraction_bits
    largest = 2.0**m - 2.0**-n
    v = np.clip(z, -largest, largest)
    sign = (v < 0).astype(np.uint8)
    magnitude = np.floor(np.abs(v) * 2.0**n + 1e-9).astype(np.int64)
    magnitude = np.minimum(magnitude, 2 ** (m + n) - 1)
    shifts = np.arange(m + n - 1, -1, -1)
    digits = ((magnitude[..., None] >> shifts) & 1).astype(np.uint8)
    return np.concatenate([sign[..., None], digits], axis=-1).reshape(z.shape[0], -1)


def fixed_point_values(bits: np.ndarray, integer_bits: int, fraction_bits: int) -> np.ndarray:
    """Inverse of :func:`fixed_point_bits` (the truncated values), for tests and inspection."""
    bits = np.asarray(bits)
    l = 1 + integer_bits + fraction_bits
    b = bits.reshape(bits.shape[0], -1, l).astype(np.float64)
    weights = 2.0 ** np.arange(integer_bits - 1, -fraction_bits - 1, -1)
    return np.where(b[..., 0] > 0, -1.0, 1.0) * (b[..., 1:] @ weights)


def per_bit_epsilon(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """max(|log p/q|, |log (1-p)/(1-q)|) per bit: its worst-case log ratio over both input values."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return np.maximum(np.abs(np.log(p) - np.log(q)), np.abs(np.log1p(-p) - np.log1p(-q)))


def _stat(name: str, value: Any, dim: int, positive: bool) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(dim, float(arr))
    if arr.shape != (dim,) or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be a finite number or a list of {dim} finite numbers")
    if positive and (arr <= 0).any():
        raise ValueError(f"{name} must be positive")
    return arr


def _json_stat(arr: np.ndarray) -> float | list[float]:
    return float(arr[0]) if np.all(arr == arr[0]) else [float(v) for v in arr]


class BitEncodingRandomizer(Randomizer):
    """Shared z-score + fixed-point encoding and bit flipping; subclasses set p and q.

    Parameters
    ----------
    epsilon:
        The protocol's published per-release epsilon (its parameter, not necessarily its cost).
    dim:
        Number of coordinates r of the representation.
    mean, std:
        Public z-score statistics: one number, or one per coordinate.
    integer_bits, fraction_bits:
        m and n of the fixed-point code (published: 4 and 5, so l = 10).
    """

    name: ClassVar[str]
    batch_release: ClassVar[bool] = True
    size_params = ("dim",)

    def __init__(
        self,
        epsilon: float,
        dim: int,
        mean: float | Sequence[float] = 0.0,
        std: float | Sequence[float] = 1.0,
        integer_bits: int = PUBLISHED_INTEGER_BITS,
        fraction_bits: int = PUBLISHED_FRACTION_BITS,
    ) -> None:
        self.epsilon = check_positive("epsilon", epsilon)
        self.dim = check_int("dim", dim)
        self.integer_bits = check_int("integer_bits", integer_bits, minimum=0)
        self.fraction_bits = check_int("fraction_bits", fraction_bits, minimum=0)
        if self.integer_bits + self.fraction_bits < 1 or self.integer_bits + self.fraction_bits > 30:
            raise ValueError("integer_bits + fraction_bits must lie in [1, 30]")
        self.mean = _stat("mean", mean, self.dim, positive=False)
        self.std = _stat("std", std, self.dim, positive=True)
        try:
            self.p, self.q = self._probabilities()
        except OverflowError:
            named = "epsilon or lambda" if hasattr(self, "lam") else "epsilon"
            raise ValueError(f"{self.name}: {named} too large, its bit probabilities overflow") from None
        if np.any(self.p == self.q):
            raise ValueError(f"{self.name}: some bits would be reported independently of their value (p == q)")

    # -- protocol ------------------------------------------------------------------------
    @property
    def bits_per_value(self) -> int:
        """l = 1 + m + n."""
        return 1 + self.integer_bits + self.fraction_bits

    @property
    def num_bits(self) -> int:
        """r * l, the length of the bit vector (and its Hamming diameter)."""
        return self.dim * self.bits_per_value

    @property
    def per_bit_budget(self) -> float:
        """epsilon / (r*l), the per-bit share of the published epsilon."""
        return self.epsilon / self.num_bits

    def _probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    @property
    def true_epsilon(self) -> float:
        """Sum over bits of the per-bit worst-case |log ratio| (design.md section 2).

        Rounded to 12 significant digits so that floating-point error in the logs (about
        1e-16 per bit) does not push a figure such as SUE's exact epsilon onto the next grid
        point of the accountant (whose own rounding is pessimistic, by up to 1e-4).
        """
        return float(f"{math.fsum(per_bit_epsilon(self.p, self.q)):.12g}")

    # -- construction ---------------------------------------------------------------------
    _extra_params: ClassVar[tuple[str, ...]] = ()
    required_options = frozenset({"dim"})
    optional_options = frozenset({"mean", "std", "integer_bits", "fraction_bits"})

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "BitEncodingRandomizer":
        required = {"epsilon", "dim"} | set(cls._extra_params)
        check_params(params, required, {"mean", "std", "integer_bits", "fraction_bits", "true_epsilon"})
        kwargs = {k: params[k] for k in ("mean", "std", "integer_bits", "fraction_bits") if k in params}
        extra = {k.replace("lambda", "lam"): params[k] for k in cls._extra_params}
        return cls(params["epsilon"], params["dim"], **kwargs, **extra)

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "BitEncodingRandomizer":
        """The largest published epsilon whose TRUE cost over the planned releases meets the target."""
        fixed = {k.replace("lambda", "lam"): v for k, v in options.items() if k != "dim"}

        def build(published: float) -> "BitEncodingRandomizer":
            return cls(published, options["dim"], **fixed)

        floor = build(1e-9).true_epsilon
        if floor * target.releases >= target.epsilon:
            raise ValueError(
                f"{cls.name} costs a true epsilon of at least {floor:.4g} per release however small its "
                f"published epsilon is, so {target.releases} release(s) cannot meet epsilon {target.epsilon}"
            )
        return build(target.largest(lambda e: build(e).event, target.epsilon / target.releases))

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "dim": self.dim,
            "mean": _json_stat(self.mean),
            "std": _json_stat(self.std),
            "integer_bits": self.integer_bits,
            "fraction_bits": self.fraction_bits,
        }
        out.update(self._extra_json())
        out["true_epsilon"] = self.true_epsilon
        return out

    def _extra_json(self) -> dict[str, Any]:
        return {}

    @property
    def event(self) -> BitFlipEvent:
        return BitFlipEvent(
            protocol=self.name, epsilon=self.true_epsilon, claimed_epsilon=self.claimed_epsilon, bits=self.num_bits
        )

    @property
    def claimed_epsilon(self) -> float:
        """The published epsilon (the protocol's parameter)."""
        return self.epsilon

    def audit_scores(self, dim: int) -> Scores:
        """The inputs whose bit vectors are all 0 and all 1 (z = 0 and the most negative representable
        value), which differ in every bit; scored by the bit-flip log-likelihood ratio."""
        from ldpfed.fed.privacy.audit import bitflip_llr  # SciPy on use: device messages audit nothing

        x0 = self.mean[None, :].copy()
        x1 = (self.mean - self.std * 2.0**self.integer_bits)[None, :]
        b0, b1 = self.preprocess(x0)[0], self.preprocess(x1)[0]
        p, q = self.p, self.q
        return pair_scores(self, x0, x1, lambda y: bitflip_llr(y, b0, b1, p, q), self.num_bits)

    # -- data path ------------------------------------------------------------------------
    def preprocess(self, x: np.ndarray) -> np.ndarray:
        """The clean bit vector (as float 0/1) of each row: z-score, clip, fixed point."""
        x = check_finite_matrix(x)
        if x.shape[1] != self.dim:
            raise ValueError(f"{self.name} was set up for dim {self.dim}, got rows of length {x.shape[1]}")
        z = (x - self.mean) / self.std
        return fixed_point_bits(z, self.integer_bits, self.fraction_bits).astype(np.float64)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        bits = self.preprocess(x)
        out = np.empty(bits.shape, dtype=np.float64)
        step = max(1, _CHUNK_ELEMENTS // max(1, bits.shape[1]))
        for start in range(0, bits.shape[0], step):
            chunk = bits[start : start + step]
            u = rng.random(chunk.shape)
            out[start : start + step] = np.where(chunk > 0.5, u < self.p, u < self.q)
        return out

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unbiased bit estimates (y - q) / (p - q), and each bit's noise variance.

        A reported bit's variance depends on the clean bit b: pi_b (1 - pi_b) / (p - q)^2 with
        pi_1 = p, pi_0 = q. It is linear in b, so the mean estimate of each bit (kept in
        [0, 1]) gives an unbiased estimate of that bit's noise variance over the reports;
        without reports, the variance of a bit that is 1 half the time. Per bit, because
        the probabilities may differ between bits (OME alternates them).
        """
        reports = np.asarray(reports, dtype=np.float64)
        if reports.ndim != 2 or reports.shape[1] != self.num_bits:
            raise ValueError(f"reports must have shape (n, {self.num_bits})")
        gap = self.p - self.q
        estimate = (reports - self.q) / gap
        var0 = self.q * (1 - self.q) / gap**2
        var1 = self.p * (1 - self.p) / gap**2
        share = np.clip(estimate.mean(axis=0), 0.0, 1.0) if len(reports) else np.full(self.num_bits, 0.5)
        return estimate, var0 + share * (var1 - var0)


@register
class SUERandomizer(BitEncodingRandomizer):
    """Symmetric unary encoding on fixed-point bits: p = e^{e'}/(1+e^{e'}), q = 1 - p."""

    name = "sue"

    def _probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        e = self.per_bit_budget
        p = np.full(self.num_bits, 1.0 / (1.0 + math.exp(-e)))
        return p, 1.0 - p


@register
class OUERandomizer(BitEncodingRandomizer):
    """Optimized unary encoding on fixed-point bits: p = 1/2, q = 1/(1+e^{e'})."""

    name = "oue"

    def _probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        e = self.per_bit_budget
        return np.full(self.num_bits, 0.5), np.full(self.num_bits, 1.0 / (1.0 + math.exp(e)))


@register
class OMERandomizer(BitEncodingRandomizer):
    """Optimized multiple encoding, exactly as seed 004 Theorem 1 publishes it.

    Its claim (epsilon-LDP) is false for lambda > 1: the event states the true cost.
    """

    name = "ome"
    _extra_params = ("lambda",)
    required_options = frozenset({"dim", "lambda"})
    default_options = MappingProxyType({"lambda": PUBLISHED_OME_LAMBDA})

    @classmethod
    def fixed_params(cls, epsilon: float, options: Mapping[str, Any]) -> dict[str, Any]:
        """Always as published: ``epsilon`` is OME's published parameter (its true cost is its event's)."""
        return {"mechanism": cls.name, "epsilon": epsilon, **options}

    def __init__(self, *args: Any, lam: float = PUBLISHED_OME_LAMBDA, **kwargs: Any) -> None:
        """As :class:`BitEncodingRandomizer`, plus the randomization factor ``lam`` (lambda)."""
        self.lam = check_positive("lambda", lam)
        super().__init__(*args, **kwargs)

    def _probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        lam, e = self.lam, self.per_bit_budget
        even = np.arange(self.num_bits) % 2 == 0
        p = np.where(even, lam / (1.0 + lam), 1.0 / (1.0 + lam**3))
        q = np.full(self.num_bits, 1.0 / (1.0 + lam * math.exp(e)))
        return p, q

    def _extra_json(self) -> dict[str, Any]:
        return {"lambda": self.lam}
