"""Closed-form Gaussian differential privacy (Dong, Roth and Su 2021).

Hand-written because dp_accounting has no closed-form GDP conversion; the PLD accountant
is used to check these formulas in the tests.
"""

from __future__ import annotations

import math

from ldpfed.fed.privacy.solver import within
from ldpfed.fed.privacy.validators import check_delta, check_epsilon

_LARGEST = 2.0**1023
"""The largest power of two a float holds: an epsilon not reached below it is infinite."""
_RTOL = 4 * 2.0**-52
"""Brent's least relative tolerance (four machine epsilons)."""


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
    """Smallest epsilon at which a mu-GDP mechanism is (epsilon, delta)-DP (rounded up, never down)."""
    check_delta(delta)
    if mu <= 0:
        return 0.0
    if math.isinf(mu) or delta_for_epsilon(mu, _LARGEST) > delta:
        return math.inf
    return within(
        lambda e: delta_for_epsilon(mu, e), delta, 1.0, increasing=False, floor=0.0, xtol=1e-12, rel_tol=_RTOL,
        high=_LARGEST, name="epsilon",
    )


def mu_for_epsilon(epsilon: float, delta: float) -> float:
    """Largest mu whose mu-GDP mechanism is (epsilon, delta)-DP (rounded down, never up)."""
    check_delta(delta)
    check_epsilon(epsilon)
    return within(
        lambda m: delta_for_epsilon(m, epsilon), delta, 1.0, increasing=True, floor=1e-12, xtol=1e-14, rel_tol=_RTOL,
        name="mu",
    )
