"""Baselines: basic and advanced composition of the per-step amplified guarantee.

Per step, the Gaussian with noise multiplier z is (eps0, delta0)-DP on its exact privacy
profile (seed 000 eq. 5) (when each report carries a randomized-response label, the report
and label together are, on their PLD's profile); Poisson sampling at rate r makes that step
(log(1 + r*(exp(eps0) - 1)), r*delta0)-DP under add-or-remove (Balle, Barthe and Gaboardi
2018, Thm. 8). T steps then compose

- basically (seed 001): (T*eps_s, T*delta_s), so delta0 = delta / (T*r);
- advancedly (Dwork, Rothblum and Vadhan 2010; seed 000 eq. 10, seed 001):
  (eps_s*sqrt(2T ln(1/delta')) + T*eps_s*(exp(eps_s) - 1), T*delta_s + delta'),
  with the split of delta between T*delta_s and delta' chosen to minimise epsilon.

Hand-written: dp_accounting applies the sampling lemma only inside its PLD/RDP accountants,
and its ``advanced_composition`` is Kairouz-Oh-Viswanath's optimal theorem (a different,
tighter bound that takes O(T^2) time and overflows for large T), not eq. 10.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
from scipy.optimize import minimize_scalar

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.accountants import amplified
from ldpfed.fed.privacy.accountants.base import UNLINKABLE_POISSON, AccountantFigure, Schedule
from ldpfed.fed.privacy.events import PrivacyEvent

VERSION = "closed form (ldpfed; per-step sampling lemma + seed 000 eq. 10 / seed 001)"


def amplified_step(
    noise_multiplier: float, rate: float, delta0: float, labels: PrivacyEvent | None = None
) -> tuple[float, float]:
    """(eps_s, delta_s) of one Poisson-sampled step whose unsampled run has delta0.

    The run is the Gaussian report, with ``labels`` also its label.
    """
    delta0 = min(delta0, 1 - 1e-12)
    if labels is None:
        eps0 = gdp.epsilon_for_delta(1.0 / noise_multiplier, delta0)
    else:
        eps0 = float(amplified.step_pld(noise_multiplier, 1.0, labels).get_epsilon_for_delta(delta0))
    # log(1 + r (e^eps0 - 1)) = eps0 + log(r + (1 - r) e^-eps0): the same, without overflow at large eps0
    eps = 0.0 if rate == 0 else math.inf if math.isinf(eps0) else eps0 + math.log(rate + (1 - rate) * math.exp(-eps0))
    return eps, rate * delta0


def _expm1(x: float) -> float:
    """exp(x) - 1, infinite past the float range instead of raising."""
    return math.expm1(x) if x < 709.0 else math.inf


def basic_epsilon(schedule: Schedule) -> float:
    """Basic composition: T * eps_s with T * delta_s = delta."""
    t, r = schedule.steps, schedule.rate
    eps_s, _ = amplified_step(schedule.noise_multiplier, r, schedule.delta / (t * r), schedule.labels)
    return t * eps_s


def advanced_epsilon(schedule: Schedule) -> float:
    """Advanced composition (eq. 10), minimised over the split of delta."""
    t, r, delta = schedule.steps, schedule.rate, schedule.delta

    def eps_at(logit: float) -> float:
        share = 1.0 / (1.0 + math.exp(-logit))  # share of delta that is delta'
        eps_s, _ = amplified_step(schedule.noise_multiplier, r, (1 - share) * delta / (t * r), schedule.labels)
        return eps_s * math.sqrt(2 * t * math.log(1 / (share * delta))) + t * eps_s * _expm1(eps_s)

    grid = np.linspace(-12.0, 12.0, 49)
    values = [eps_at(x) for x in grid]
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    refined = minimize_scalar(eps_at, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    return float(min(values[best], refined.fun))


def figures(schedule: Schedule) -> list[AccountantFigure]:
    """The advanced- and basic-composition figures (both upper bounds, both loose)."""
    labelled = "" if schedule.labels is None else "; each step's run is the report and its label (included)"
    bound = partial(
        AccountantFigure,
        version=VERSION,
        kind="upper bound",
        delta=schedule.delta,
        assumption=UNLINKABLE_POISSON,
        parameters={"noise_multiplier": schedule.noise_multiplier, "rate": schedule.rate, "steps": schedule.steps},
    )
    return [
        bound(
            key="advanced_composition",
            name="advanced composition (seed 000 eq. 10)",
            epsilon=advanced_epsilon(schedule),
            note="baseline: per-step sampling lemma, Dwork-Rothblum-Vadhan composition, delta split optimised"
            + labelled,
        ),
        bound(
            key="basic_composition",
            name="basic composition (seed 001)",
            epsilon=basic_epsilon(schedule),
            note="baseline: per-step sampling lemma, epsilons and deltas add up" + labelled,
        ),
    ]
