"""Helpers shared by the randomizers: parameter checks and calibration against the ledger's accountant."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return int(value)


def check_releases(releases: Any) -> int:
    return positive_int("releases", releases)


def check_target(epsilon: float, delta: float) -> tuple[float, float]:
    """A finite positive epsilon and a delta in (0, 1), or a ValueError."""
    epsilon, delta = float(epsilon), float(delta)
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return epsilon, delta


def largest_within(f: Callable[[float], float], target: float, start: float, rel_tol: float = 1e-6) -> float:
    """Largest x > 0 with f(x) <= target for a non-decreasing f (to ``rel_tol``), never one above it.

    Used with x = a privacy parameter that grows as the noise shrinks (1/scale, eta, the
    published epsilon); ``start`` is any positive guess. Brent's method on a bracket, then a
    check that the answer itself meets the target (PLD figures move in small steps).
    """
    lo = hi = float(start)
    while f(lo) > target:
        lo /= 1.5
        if lo < 1e-15:
            raise ValueError("the target cannot be met: the cost stays above it as the noise grows")
    hi = lo * 1.5
    while f(hi) <= target:
        lo, hi = hi, hi * 1.5
        if hi > 1e15:
            return lo  # effectively free; never happens for a real mechanism
    from scipy.optimize import brentq  # SciPy on use: device messages calibrate nothing

    x = brentq(lambda v: f(v) - target, lo, hi, xtol=rel_tol * lo, rtol=rel_tol, maxiter=200)
    for attempt in range(60):
        if f(x) <= target:
            return max(x, lo)
        x = max(lo, x * (1 - rel_tol * 2**attempt))
    return lo


def calibrate_parameter(
    make_event: Callable[[float], PrivacyEvent],
    epsilon: float,
    delta: float,
    releases: int,
    other_events: Mapping[PrivacyEvent, int] | None,
    start: float,
) -> float:
    """Largest privacy parameter x whose ``releases`` runs of ``make_event(x)`` (plus others) meet the target.

    Solved against :func:`compose_epsilon`, the composition the ledger enforces.
    """
    epsilon, delta = check_target(epsilon, delta)
    releases = check_releases(releases)
    other = {e: n for e, n in (other_events or {}).items() if n > 0}
    if other and compose_epsilon(other, delta) >= epsilon:
        raise ValueError(f"the other events alone already cost epsilon >= {epsilon}; no noise meets the target")

    def cost(x: float) -> float:
        return compose_epsilon({**other, make_event(x): releases}, delta)

    return largest_within(cost, epsilon, start)
