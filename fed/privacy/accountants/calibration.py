"""Noise multiplier per step for a total (epsilon, delta), T and rates (seed 000 Algs. 2 and 3).

Solved against one chosen accountant, the one the run enforces, and verified by recomputing
epsilon from the result with that same accountant's figure code:

- ``worst-case``: k Gaussian releases, exact GDP (k = the record's planned releases, or the
  (1 - delta)-quantile of Binomial(T, q*p) when not given);
- ``clt``: seed 000 eqs. 8 and 9 inverted in closed form, Algs. 2 and 3 as published;
- ``pld`` / ``rdp``: dp_accounting's accountant on the Poisson-sampled Gaussian, solved by the one
  root solver (fed.privacy.solver); the PLD search runs at a coarse discretization
  (:data:`PLD_SEARCH_DISCRETIZATION`, faster and more pessimistic) and the result is then
  verified at the figure's own discretization.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any

import dp_accounting

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.accountants import amplified, clt, worst_case
from ldpfed.fed.privacy.accountants.base import Schedule
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.solver import nudge, within
from ldpfed.fed.privacy.validators import check_epsilon

ACCOUNTANTS = ("worst-case", "clt", "pld", "rdp")

PLD_SEARCH_DISCRETIZATION = 1e-3
AMPLIFIED: dict[str, tuple[Callable[[Schedule], float], Callable[[], dp_accounting.PrivacyAccountant]]] = {
    "pld": (amplified.pld_epsilon, lambda: amplified.pld_accountant(PLD_SEARCH_DISCRETIZATION)),
    "rdp": (amplified.rdp_epsilon, amplified.rdp_accountant),
}


@dataclass(frozen=True)
class Calibration:
    """A calibrated noise multiplier and the epsilon recomputed from it."""

    accountant: str
    noise_multiplier: float
    epsilon: float
    target_epsilon: float
    delta: float
    steps: int
    rate: float
    releases: int | None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


def calibrate_noise_multiplier(
    accountant: str,
    epsilon: float,
    delta: float,
    steps: int,
    p: float,
    q: float = 1.0,
    releases: int | None = None,
    dataset_size: int | None = None,
) -> Calibration:
    """Smallest noise multiplier (sigma / sensitivity) meeting (epsilon, delta) under ``accountant``.

    Parameters
    ----------
    accountant:
        One of :data:`ACCOUNTANTS`.
    epsilon, delta:
        Total budget for the T steps.
    steps, p, q:
        T, the sampling rate and the inference true-data rate (per-record rate q*p).
    releases:
        Planned releases of the record, for ``worst-case`` only.
    dataset_size:
        For ``rdp`` only: n, for fixed-size sampling of round(q*p*n) of n without replacement under
        replace-one neighbours (``amplified.fixed_size_event``) instead of Poisson sampling.
    """
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {accountant!r}; choose one of {ACCOUNTANTS}")
    check_epsilon(epsilon)
    # The noise multiplier 1.0 is a placeholder that lets Schedule validate the rest.
    if dataset_size is not None and accountant != "rdp":
        raise ValueError("dataset_size (fixed-size sampling) is calibrated with the rdp accountant only")
    schedule = Schedule(1.0, p, steps, delta, q=q, releases=releases, dataset_size=dataset_size)
    k = None
    if accountant == "worst-case":
        k = releases if releases is not None else worst_case.quantile_releases(schedule)
        if k == 0:
            raise ValueError("the record is released 0 times at this quantile; any noise meets the budget")

    @cache
    def epsilon_of(z: float) -> float:
        trial = replace(schedule, noise_multiplier=z)
        if accountant == "worst-case":
            return worst_case.epsilon_for_releases(z, k, delta)
        if accountant == "clt":
            return clt.epsilon(trial)
        if dataset_size is not None:
            return amplified.rdp_fixed_size_epsilon(trial)
        return AMPLIFIED[accountant][0](trial)

    guess = clt.noise_multiplier_for_mu_total(gdp.mu_for_epsilon(epsilon, delta), schedule.rate, steps)
    if accountant == "worst-case":
        z = calibrate_gaussian_sigma(epsilon, delta, k, sensitivity=1.0)
    elif accountant == "clt":
        z = guess
    else:
        make_accountant = AMPLIFIED[accountant][1] if dataset_size is None else amplified.rdp_replace_one_accountant
        sampled = amplified.poisson_event if dataset_size is None else amplified.fixed_size_event

        def event(z: float) -> dp_accounting.DpEvent:
            return sampled(replace(schedule, noise_multiplier=z))

        def coarse(z: float) -> float:
            return make_accountant().compose(event(z)).get_epsilon(delta)

        z = within(coarse, epsilon, guess, increasing=False, rel_tol=1e-4, high=1e6, name="noise multiplier")
    z = nudge(epsilon_of, epsilon, float(z), increasing=False)  # verified by the figure's own code
    return Calibration(accountant, z, epsilon_of(z), epsilon, delta, steps, schedule.rate, k)
