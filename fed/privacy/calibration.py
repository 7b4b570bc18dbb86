"""Noise calibration: the noise scale that meets a target (epsilon, delta).

Solved against the same composition that the ledger enforces, so a calibrated run never
trips its own budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping

from fed.privacy import gdp
from fed.privacy.composition import compose_epsilon
from fed.privacy.events import GaussianEvent, PrivacyEvent
from fed.privacy.figure_cache import cached_figure


def calibrate_gaussian_sigma(
    epsilon: float,
    delta: float,
    releases: int,
    sensitivity: float,
    other_events: Mapping[PrivacyEvent, int] | None = None,
) -> float:
    """Smallest sigma such that ``releases`` Gaussian runs (plus ``other_events``) meet the target.

    Parameters
    ----------
    epsilon, delta:
        Target worst-case epsilon at ``delta`` for one record.
    releases:
        Planned number of Gaussian releases of that record.
    sensitivity:
        L2 diameter of the randomizer's input domain (2C for clipping to C).
    other_events:
        Events charged alongside (e.g. randomized-response labels), composed in.
    """
    if int(releases) != releases or releases < 1:
        raise ValueError(f"releases must be a positive integer, got {releases!r}")
    other = {e: n for e, n in (other_events or {}).items() if n > 0}
    params = {
        "epsilon": float(epsilon), "delta": float(delta), "releases": int(releases), "sensitivity": float(sensitivity),
        "other": sorted([json.dumps(e.to_json(), sort_keys=True), int(n)] for e, n in other.items()),
    }
    return cached_figure("gaussian_sigma", params, lambda: _calibrate_gaussian_sigma(epsilon, delta, releases, sensitivity, other))


def _calibrate_gaussian_sigma(
    epsilon: float, delta: float, releases: int, sensitivity: float, other: Mapping[PrivacyEvent, int]
) -> float:
    # The Gaussian-only answer is a lower bound: other events only add cost.
    sigma = sensitivity * math.sqrt(releases) / gdp.mu_for_epsilon(epsilon, delta)
    if other:
        if compose_epsilon(other, delta) >= epsilon:
            raise ValueError(
                f"the other events alone already cost epsilon >= {epsilon}; no sigma meets the target"
            )
        sigma = solve_increasing(
            lambda s: -compose_epsilon({**other, GaussianEvent(sensitivity, s): releases}, delta),
            -epsilon,
            lo=sigma,
        )
    return _make_safe(sigma, lambda s: compose_epsilon({**other, GaussianEvent(sensitivity, s): releases}, delta), epsilon)


def solve_increasing(f: Callable[[float], float], target: float, lo: float, rel_tol: float = 1e-6) -> float:
    """Smallest x >= lo with f(x) >= target for a non-decreasing f, by bracketing and bisection."""
    hi = lo * 1.25
    while f(hi) < target:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            raise ValueError("no solution below 1e12")
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if f(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def _make_safe(sigma: float, epsilon_of: Callable[[float], float], target: float) -> float:
    """Nudge sigma up until the recomputed epsilon is at or below the target."""
    for attempt in range(60):
        if epsilon_of(sigma) <= target:
            return sigma
        sigma *= 1 + 1e-9 * 2**attempt
    raise RuntimeError("calibration did not converge")
