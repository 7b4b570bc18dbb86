"""Seed 000's amplified figure: Gaussian DP with the central limit theorem (eqs. 8 and 9).

Per step a record is released with probability r = q*p through a (1/z)-GDP Gaussian, whose
trade-off function is r*G_mu + (1 - r)*Id. Bu et al. (2020)'s CLT says the T-fold
composition tends to G_mu_tot with mu_tot = r * sqrt(T * (exp(mu^2) - 1)), read at delta by
eq. 5. This is a limit, not a bound: at finite T it under-states the true amplified epsilon,
so every figure from here is labelled an estimate. Hand-written because no library
implements this CLT (dp_accounting has neither GDP nor the CLT). It covers Gaussian steps
only: a schedule whose releases carry randomized-response labels gets a figure for the
reports alone, marked as leaving the labels out.
"""

from __future__ import annotations

import math

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.accountants.base import UNLINKABLE_POISSON, AccountantFigure, Schedule, reports_only

VERSION = "closed form (ldpfed, seed 000 eqs. 5, 8, 9)"
NOTE = (
    "approximation, not a bound: the central limit theorem's limit under-states the amplified "
    "epsilon at finite T (measured against the PLD upper bound: by ~11% at p=0.01, T=1000, "
    "z=1 and by up to ~80% at small T)"
)
NO_LABELS = (
    "eqs. 8 and 9 are the central limit theorem for sampled Gaussian (GDP) steps; a step that also releases "
    "a randomized-response label is not of that form"
)


def mu_total(noise_multiplier: float, rate: float, steps: int) -> float:
    """mu_tot = r * sqrt(T * (exp(mu^2) - 1)) with mu = 1/z (seed 000 eq. 8; eq. 9 with r = q*p).

    Infinite when exp(mu^2) exceeds the float range (z below about 0.0376: almost no noise).
    """
    if rate == 0 or steps == 0:
        return 0.0
    exponent = noise_multiplier**-2
    if exponent > 709.0:  # math.expm1 overflows past log(float max) = 709.78
        return math.inf
    return rate * math.sqrt(steps * math.expm1(exponent))


def noise_multiplier_for_mu_total(mu_tot: float, rate: float, steps: int) -> float:
    """The inverse of :func:`mu_total` in z (seed 000 Algs. 2 and 3, step 2)."""
    return 1.0 / math.sqrt(math.log1p(mu_tot**2 / (rate**2 * steps)))


def epsilon(schedule: Schedule) -> float:
    """CLT estimate of the amplified epsilon at the schedule's delta."""
    mu = mu_total(schedule.noise_multiplier, schedule.rate, schedule.steps)
    return gdp.epsilon_for_delta(mu, schedule.delta)


def figure(schedule: Schedule) -> AccountantFigure:
    """The GDP + CLT figure; eq. 8 when q = 1 (training), eq. 9 otherwise (inference); reports only."""
    equation = "eq. 8, training" if schedule.q == 1 else "eq. 9, inference"
    estimate = AccountantFigure(
        key="clt",
        name=f"GDP + CLT (seed 000 {equation})",
        version=VERSION,
        kind="estimate",
        epsilon=epsilon(schedule),
        delta=schedule.delta,
        assumption=UNLINKABLE_POISSON,
        parameters={
            "noise_multiplier": schedule.noise_multiplier,
            "rate": schedule.rate,
            "steps": schedule.steps,
            "mu_total": mu_total(schedule.noise_multiplier, schedule.rate, schedule.steps),
        },
        note=NOTE,
    )
    return reports_only(estimate, schedule, NO_LABELS)
