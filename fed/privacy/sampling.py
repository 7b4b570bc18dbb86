"""How a user picks what it releases in one step (seed 000 Algs. 2 and 3).

Training (Alg. 2): per step a user picks records among those it may still release, either
all of them, each independently with probability p (Poisson), or m of them uniformly
without replacement (fixed size). Inference (Alg. 3): the user mixes its true queries with
fictitious ones it generates itself (true-data rate q), samples every item of the mixed set
with probability p_query per step, and repeats steps until each true query has k answers.

Specs are strings so they travel in requests and ledgers: ``all``, ``poisson:<p>``,
``fixed:<m>`` and ``upsample:<q>:<p_query>:<k>`` (``all`` for queries: q = p_query = k = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ldpfed.fed.privacy.solver import least_integer
from ldpfed.fed.privacy.validators import check_int

# Planned inference steps: every true query of the largest user gets k answers with at least
# this probability (the rest of the time a user runs past the plan and its budget stops it).
PLAN_CONFIDENCE = 0.99


@dataclass(frozen=True)
class TrainSampling:
    """Which records a user releases in one training step.

    ``kind`` is ``all``, ``poisson`` (rate ``p``) or ``fixed`` (size ``m``).
    """

    kind: str
    p: float = 1.0
    m: int = 0

    @classmethod
    def parse(cls, spec: str) -> "TrainSampling":
        """Parse ``all``, ``poisson:<p>`` with 0 < p <= 1, or ``fixed:<m>`` with m >= 1."""
        if not isinstance(spec, str):
            raise ValueError(f"sampling must be a string, got {spec!r}")
        kind, _, value = spec.partition(":")
        if kind == "all" and not value:
            return cls("all")
        if kind == "poisson":
            p = _float(value)
            if not (math.isfinite(p) and 0 < p <= 1):
                raise ValueError(f"poisson sampling needs a rate in (0, 1], got {spec!r}")
            return cls("poisson", p=p)
        if kind == "fixed":
            try:
                m = int(value)
            except ValueError:
                m = 0
            if m < 1 or str(m) != value.strip():
                raise ValueError(f"fixed-size sampling needs an integer size >= 1, got {spec!r}")
            return cls("fixed", m=m)
        raise ValueError(f"sampling must be 'all', 'poisson:<p>' or 'fixed:<m>', got {spec!r}")

    @property
    def spec(self) -> str:
        """Canonical string form."""
        if self.kind == "poisson":
            return f"poisson:{self.p!r}"
        if self.kind == "fixed":
            return f"fixed:{self.m}"
        return "all"

    def select(self, candidates: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
        """The sampled subset of ``candidates`` (sorted); ``cap`` > 0 bounds ``all`` only."""
        candidates = np.asarray(candidates, dtype=np.int64)
        if self.kind == "poisson":
            return np.sort(candidates[rng.random(len(candidates)) < self.p])
        size = len(candidates)
        if self.kind == "fixed":
            size = min(self.m, size)
        elif cap:
            size = min(cap, size)
        if size == len(candidates):
            return np.sort(candidates)
        return np.sort(rng.choice(candidates, size=size, replace=False))


@dataclass(frozen=True)
class UpSampling:
    """Inference up-sampling (seed 000 Alg. 3): true-data rate q, per-item rate p, k answers."""

    q: float = 1.0
    p: float = 1.0
    k: int = 1

    def __post_init__(self) -> None:
        for name in ("q", "p"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"up-sampling {name} must lie in (0, 1], got {value!r}")
        object.__setattr__(self, "k", check_int("up-sampling k", self.k, meaning="answers per true query"))

    @classmethod
    def parse(cls, spec: str) -> "UpSampling":
        """Parse ``upsample:<q>:<p>:<k>``, or ``all`` (every query once: q = p = k = 1)."""
        if spec == "all":
            return cls()
        parts = spec.split(":") if isinstance(spec, str) else []
        if len(parts) != 4 or parts[0] != "upsample":
            raise ValueError(f"query sampling must be 'upsample:<q>:<p>:<k>', got {spec!r}")
        try:
            k = int(parts[3])
        except ValueError:
            raise ValueError(f"up-sampling k must be an integer, got {spec!r}") from None
        return cls(_float(parts[1]), _float(parts[2]), k)

    @property
    def spec(self) -> str:
        """Canonical string form (``all`` for one plain release of every query)."""
        if not self.active:
            return "all"
        return f"upsample:{float(self.q)!r}:{float(self.p)!r}:{self.k}"

    @property
    def active(self) -> bool:
        """Whether this differs from one plain release of every query."""
        return (self.q, self.p, self.k) != (1.0, 1.0, 1)

    def fictitious(self, n_true: int) -> int:
        """Number of fictitious queries that make true ones a share q of the mixed set."""
        return int(round(n_true * (1 - self.q) / self.q))

    def planned_steps(self, n_true: int) -> int:
        """Steps after which all ``n_true`` true queries have k answers w.p. >= PLAN_CONFIDENCE."""
        return _planned_steps(self.p, self.k, max(int(n_true), 1), PLAN_CONFIDENCE)


@lru_cache(maxsize=256)
def _planned_steps(p: float, k: int, n: int, confidence: float) -> int:
    if p == 1:
        return k

    def ok(t: int) -> bool:
        from scipy.stats import binom  # imported where needed: device messages do not

        return float(binom.sf(k - 1, t, p)) ** n >= confidence

    # fewer than k steps cannot give k answers: k - 1 is not ok
    return least_integer(ok, k - 1, max(k, int(math.ceil(k / p))), grow=True)


def amplified_rate(spec: str) -> float:
    """Per-step probability that a given record is released, for the amplified accountants.

    ``all`` is 1; ``poisson:<p>`` is p; ``upsample:<q>:<p>:<k>`` is p (every item of the
    mixed set, true or fictitious, is sampled at p, so q does not lower a true query's rate).
    Fixed-size sampling has no Poisson rate and raises ValueError.
    """
    if spec.startswith("upsample:"):
        return UpSampling.parse(spec).p
    sampling = TrainSampling.parse(spec)
    if sampling.kind == "fixed":
        raise ValueError("fixed-size sampling has no Poisson rate (no PLD bound in dp_accounting)")
    return sampling.p


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return math.nan
