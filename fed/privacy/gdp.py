"""Closed-form Gaussian differential privacy (Dong, Roth and Su 2021).

Hand-written because dp_accounting has no closed-form GDP conversion; the PLD accountant
is used to check these formulas in the tests.
"""

from __future__ import annotations

import math


def delta_for_epsilon(mu: float, epsilon: float) -> float:
    """delta(eps) of a mu-GDP mechanism (seed 000 eq. 5)."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    from scipy.special import log_ndtr  # imported on use: a device message whose figures are cached skips SciPy

    # Phi(a) - exp(eps) Phi(b) = Phi(a) (1 - exp(gap)), all in log space: exp(eps) alone
    # overflows for large eps, and so does exp(eps + log Phi(b)) for a huge mu (sigma 1e-12).
    upper = float(log_ndtr(-epsilon / mu + mu / 2))
    gap = epsilon + float(log_ndtr(-epsilon / mu - mu / 2)) - upper  # < 0; rounding may bring it to 0
    return math.exp(upper) * -math.expm1(gap) if gap < 0 else 0.0


def epsilon_for_delta(mu: float, delta: float) -> float:
    """Smallest epsilon at which a mu-GDP mechanism is (epsilon, delta)-DP."""
    _check_delta(delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return math.inf
    if delta_for_epsilon(mu, 0.0) <= delta:
        return 0.0
    upper = 1.0
    while delta_for_epsilon(mu, upper) > delta:
        upper *= 2
        if math.isinf(upper):
            return math.inf
    from scipy.optimize import brentq  # imported on use: a device message that composes nothing skips it

    return float(brentq(lambda e: delta_for_epsilon(mu, e) - delta, 0.0, upper, xtol=1e-12))


def mu_for_epsilon(epsilon: float, delta: float) -> float:
    """Largest mu whose mu-GDP mechanism is (epsilon, delta)-DP."""
    _check_delta(delta)
    if not epsilon > 0 or math.isinf(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    upper = 1.0
    while delta_for_epsilon(upper, epsilon) < delta:
        upper *= 2
    from scipy.optimize import brentq  # imported on use: a device message that composes nothing skips it

    return float(brentq(lambda m: delta_for_epsilon(m, epsilon) - delta, 1e-12, upper, xtol=1e-14))


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
