"""Calibration variants of the Gaussian DP layer (seed 001): classical and analytic.

Same noise as ``gaussian`` (L2 clip to C, N(0, sigma^2 I)) and the same exact event
(GaussianEvent with sensitivity 2C); only the way sigma is chosen differs:

- ``gaussian-classical``: sigma = sqrt(2 ln(1.25/delta)) * Delta / epsilon (Dwork & Roth
  2014, Thm A.1), valid for epsilon < 1 only; larger targets are refused.
- ``gaussian-analytic``: the analytic Gaussian mechanism (Balle & Wang 2018, Algorithm 1),
  the least sigma for which the Gaussian mechanism is (epsilon, delta)-DP at any epsilon.

``releases`` Gaussian runs on the same record are one Gaussian run with sensitivity
sqrt(releases) * Delta, so both formulas apply to a whole plan with that sensitivity. The
analytic calibration is then exactly the GDP calibration of ``gaussian``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.solver import within
from ldpfed.fed.privacy.validators import check_positive, check_target
from ldpfed.fed.randomizers.base import register
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.target import CalibrationTarget


_TOL = {"xtol": 1e-14, "rel_tol": 1e-14}
"""Brent's tolerances for the analytic calibration's roots."""


CLASSICAL_MAX_EPSILON = 1.0
"""The classical calibration (Dwork & Roth 2014, Thm A.1) holds for epsilon below this only."""


def classical_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sqrt(2 ln(1.25/delta)) * sensitivity / epsilon; ValueError unless 0 < epsilon < 1."""
    epsilon, delta = check_target(epsilon, delta)
    if epsilon >= CLASSICAL_MAX_EPSILON:
        raise ValueError(
            f"the classical Gaussian calibration (Dwork & Roth 2014, Thm A.1) holds only for "
            f"epsilon < 1, got {epsilon}; use gaussian-analytic or gaussian"
        )
    return math.sqrt(2 * math.log(1.25 / delta)) * check_positive("sensitivity", sensitivity) / epsilon


def _exp_phi(epsilon: float, x: float) -> float:
    """e^epsilon * Phi(x), computed in log space so that large epsilon does not overflow."""
    from scipy.stats import norm  # SciPy on use: device messages calibrate nothing
    return math.exp(epsilon + norm.logcdf(x))


def analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Least sigma of an (epsilon, delta)-DP Gaussian mechanism (Balle & Wang 2018, Algorithm 1).

    Each root is taken on its private side (a v no larger, a u no smaller than the exact one),
    so the sigma returned is never below the least one.
    """
    from scipy.stats import norm  # SciPy on use: device messages calibrate nothing

    epsilon, delta = check_target(epsilon, delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    delta_0 = norm.cdf(0.0) - _exp_phi(epsilon, -math.sqrt(2 * epsilon))
    if delta >= delta_0:
        # B+(v) = Phi(sqrt(eps v)) - e^eps Phi(-sqrt(eps (v + 2))), increasing; v* = sup{B+ <= delta}.
        def b_plus(v: float) -> float:
            return norm.cdf(math.sqrt(epsilon * v)) - _exp_phi(epsilon, -math.sqrt(epsilon * (v + 2)))

        v = within(b_plus, delta, 1.0, increasing=True, floor=0.0, **_TOL) if b_plus(0.0) < delta else 0.0
        alpha = math.sqrt(1 + v / 2) - math.sqrt(v / 2)
    else:
        # B-(u) = Phi(-sqrt(eps u)) - e^eps Phi(-sqrt(eps (u + 2))), decreasing; u* = inf{B- <= delta}.
        def b_minus(u: float) -> float:
            return norm.cdf(-math.sqrt(epsilon * u)) - _exp_phi(epsilon, -math.sqrt(epsilon * (u + 2)))

        u = within(b_minus, delta, 1.0, increasing=False, floor=0.0, **_TOL)
        alpha = math.sqrt(1 + u / 2) + math.sqrt(u / 2)
    return alpha * sensitivity / math.sqrt(2 * epsilon)


def _split_for_other_events(
    epsilon: float, delta: float, other_events: Mapping[PrivacyEvent, int] | None
) -> tuple[float, float]:
    """Budget left for the Gaussian runs by basic composition with the other events at delta/2."""
    other = {e: n for e, n in (other_events or {}).items() if n > 0}
    if not other:
        return epsilon, delta
    spent = compose_epsilon(other, delta / 2)
    if spent >= epsilon:
        raise ValueError(f"the other events alone cost epsilon {spent:.4g} >= {epsilon} at delta/2")
    return epsilon - spent, delta / 2


@register
class ClassicalGaussianRandomizer(GaussianRandomizer):
    """``gaussian`` noise with sigma from the classical formula (epsilon < 1 only).

    With other events (e.g. label randomized response) the classical formula has no
    composition rule of its own: they are charged by basic composition at delta/2 and the
    Gaussian runs get the rest. The ledger still accounts the exact event.
    """

    name = "gaussian-classical"

    @classmethod
    def calibrates(cls, epsilon: float) -> bool:
        """The classical formula holds for epsilon < 1 only."""
        return epsilon < CLASSICAL_MAX_EPSILON

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "ClassicalGaussianRandomizer":
        clip = check_positive("clip", options["clip"])
        eps_left, delta_left = _split_for_other_events(target.epsilon, target.delta, target.other_events)
        return cls(clip, classical_sigma(eps_left, delta_left, 2 * clip * math.sqrt(target.releases)))


@register
class AnalyticGaussianRandomizer(GaussianRandomizer):
    """``gaussian`` noise with sigma from the analytic Gaussian mechanism (Balle & Wang 2018).

    With other events the analytic mechanism has no composition rule of its own, so sigma
    is then solved against the ledger's accountant, as ``gaussian`` does.
    """

    name = "gaussian-analytic"

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "AnalyticGaussianRandomizer":
        clip = check_positive("clip", options["clip"])
        if target.other_events:
            return cls(clip, target.gaussian_sigma(2 * clip))
        return cls(clip, analytic_sigma(target.epsilon, target.delta, 2 * clip * math.sqrt(target.releases)))


__all__ = ["AnalyticGaussianRandomizer", "ClassicalGaussianRandomizer", "analytic_sigma", "classical_sigma"]
