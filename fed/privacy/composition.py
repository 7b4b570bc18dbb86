"""Tight composition of a multiset of privacy events into an (epsilon, delta) figure.

Gaussian-only multisets compose exactly in Gaussian DP. Anything else composes through
dp_accounting's privacy loss distributions. The PLDs are built per event rather than
through ``PLDAccountant`` because that accountant ties Laplace to add-or-remove and
randomized response to replace-one neighbours, so it refuses a ledger holding both; each
event here already carries its replace-one sensitivity (the input domain's diameter), which
makes the per-event PLDs exact for replace-one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache

import numpy as np

from fed.privacy import gdp
from fed.privacy.events import GaussianEvent, PrivacyEvent, PureEvent

Multiset = frozenset[tuple[PrivacyEvent, int]]

PLD_DISCRETIZATION = 1e-4
PLD_FINE_RELEASES = 64
"""Up to this many composed events the PLD grid is PLD_DISCRETIZATION; beyond, it coarsens in
proportion, so that a user-level figure over thousands of pure-DP releases stays a second's work.
The discretization is pessimistic, so every figure remains an upper bound; its excess is at most
about the number of events times the grid step (at 64 events: 0.0064)."""


def compose_epsilon(counts: Mapping[PrivacyEvent, int], delta: float) -> float:
    """Epsilon at ``delta`` of running each event ``counts[event]`` times (replace-one)."""
    multiset: Multiset = frozenset((e, int(n)) for e, n in counts.items() if n > 0)
    if any(n < 0 for n in counts.values()):
        raise ValueError("event counts must be non-negative")
    return _compose_cached(multiset, float(delta))


def is_gaussian_only(counts: Mapping[PrivacyEvent, int]) -> bool:
    """Whether the closed-form GDP composition applies."""
    return all(isinstance(e, GaussianEvent) for e, n in counts.items() if n > 0)


def gaussian_mu(counts: Mapping[PrivacyEvent, int]) -> float:
    """mu of the GDP composition of a Gaussian-only multiset: sqrt(sum n mu_i^2)."""
    if not is_gaussian_only(counts):
        raise ValueError("gaussian_mu needs a Gaussian-only multiset")
    return math.sqrt(sum(n * e.mu * e.mu for e, n in counts.items() if n > 0))  # type: ignore[attr-defined]  (mu**2 raises on overflow; this gives inf)


@lru_cache(maxsize=65536)
def _compose_cached(multiset: Multiset, delta: float) -> float:
    if not multiset:
        return 0.0
    counts = dict(multiset)
    if is_gaussian_only(counts):
        return gdp.epsilon_for_delta(gaussian_mu(counts), delta)
    # Events whose PLD cannot be built (no privacy, or pure epsilon too large to discretise)
    # state `basic_epsilon`; they compose by basic composition, a valid upper bound.
    basic = {e: n for e, n in counts.items() if getattr(e, "basic_epsilon", None) is not None}
    if basic:
        rest = frozenset((e, n) for e, n in multiset if e not in basic)
        return math.fsum(n * e.basic_epsilon for e, n in basic.items()) + _compose_cached(rest, delta)
    step = PLD_DISCRETIZATION * max(1.0, sum(counts.values()) / PLD_FINE_RELEASES)
    total = None
    for event, n in sorted(multiset, key=lambda item: repr(item[0])):
        part = event.to_pld(step).self_compose(n)
        total = part if total is None else total.compose(part)
    # dp_accounting overflows (inf) once the composed epsilon passes ~709 (exp overflow); for
    # pure events basic composition is then the valid, and there nearly tight, figure.
    basic_bound = math.fsum(n * e.epsilon for e, n in multiset) if all(isinstance(e, PureEvent) for e in counts) else math.inf
    with np.errstate(over="ignore"):  # the overflow is the inf handled here
        epsilon = float(total.get_epsilon_for_delta(delta))
    return min(epsilon, basic_bound)
