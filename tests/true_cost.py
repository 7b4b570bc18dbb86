"""The true cost of n releases through a mechanism, from its own parameters (issue 26).

Computed apart from the randomizer's event and the ledger's composition, so that a wrong event
(sensitivity C instead of 2C for replace-one under an L2 clip C) or a wrong composition is caught:
Gaussian in closed form (the analytic Gaussian mechanism, Balle and Wang 2018), Laplace through
dp_accounting's own Laplace PLD, pure epsilon-DP through the exact privacy loss of n-fold binary
randomized response (the worst case of any pure mechanism, Kairouz, Oh and Viswanath 2015).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln
from scipy.stats import norm

GAUSSIANS = ("gaussian", "gaussian-classical", "gaussian-analytic")


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon with Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) <= delta."""

    def excess(epsilon: float) -> float:
        return norm.cdf(mu / 2 - epsilon / mu) - math.exp(epsilon) * norm.cdf(-mu / 2 - epsilon / mu) - delta

    return 0.0 if excess(0.0) <= 0 else brentq(excess, 0.0, mu * mu + 10 * mu + 10, xtol=1e-12)


def pure_epsilon(epsilon: float, releases: int, delta: float) -> float:
    """Tight epsilon at ``delta`` of ``releases`` runs of an epsilon-DP mechanism."""
    n = releases
    l = np.arange(n + 1)
    log_p = -np.log1p(math.exp(-epsilon))  # log P[keep] of binary randomized response at epsilon
    log_q = -np.log1p(math.exp(epsilon))
    log_mass = gammaln(n + 1) - gammaln(l + 1) - gammaln(n - l + 1) + (n - l) * log_p + l * log_q
    loss = (n - 2 * l) * epsilon

    def excess(target: float) -> float:
        return float(np.sum(np.exp(log_mass) * np.maximum(0.0, -np.expm1(target - loss)))) - delta

    return 0.0 if excess(0.0) <= 0 else brentq(excess, 0.0, n * epsilon, xtol=1e-12)


def laplace_epsilon(sensitivity: float, scale: float, releases: int, delta: float) -> float:
    """dp_accounting's Laplace PLD at the mechanism's own scale and L1 sensitivity, composed."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    part = pld.from_laplace_mechanism(parameter=scale, sensitivity=sensitivity, value_discretization_interval=1e-4)
    return float(part.self_compose(releases).get_epsilon_for_delta(delta))


def true_epsilon(params: Mapping[str, Any], releases: int, delta: float) -> float | None:
    """Epsilon at ``delta`` of ``releases`` runs on one record, from the randomizer's ``params``
    (None: a mechanism this module does not derive)."""
    mechanism = params["mechanism"]
    if releases == 0:
        return 0.0
    if mechanism in GAUSSIANS:  # L2 clip C: replace-one moves a row by up to 2C
        return gaussian_epsilon(math.sqrt(releases) * 2 * params["clip"] / params["sigma"], delta)
    if mechanism == "laplace":  # L1 clip C: L1 diameter 2C
        return laplace_epsilon(2 * params["clip"], params["scale"], releases, delta)
    if mechanism == "dchi":  # d_chi privacy eta per unit of distance, diameter 2C
        return pure_epsilon(params["eta"] * 2 * params["clip"], releases, delta)
    return None
