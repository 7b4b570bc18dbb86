"""Numerical upper bounds for the amplified model from dp_accounting (PLD and RDP).

Poisson sampling: T self-compositions of ``PoissonSampledDpEvent(q*p, GaussianDpEvent(z))``
under ADD_OR_REMOVE_ONE, as dp_accounting defines it. Fixed-size sampling without replacement
(m of n records per step, replace-one neighbours): ``SampledWithoutReplacementDpEvent``, which
dp_accounting 0.6.0 supports in its RDP accountant only.

Labels. With randomized-response labels a sampled record releases its report and its label
together, so one step is the Poisson-sampled composition of the two. dp_accounting 0.6.0 has
no event for that: its PLDAccountant samples only Gaussian and Laplace events, its
RdpAccountant only Gaussian ones, and both take randomized response under replace-one
neighbours only. The PLD figure builds that step's PLD itself (:func:`step_pld`) from
dp_accounting's pessimistic PLDs; the RDP figures cannot include the labels and say so.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import dp_accounting
import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ldpfed.fed.privacy.accountants.base import (
    UNLINKABLE_FIXED_SIZE,
    UNLINKABLE_POISSON,
    AccountantFigure,
    Schedule,
    package_version,
    reports_only,
)
from ldpfed.fed.privacy.composition import PLD_DISCRETIZATION
from ldpfed.fed.privacy.events import PrivacyEvent

VERSION = package_version("dp-accounting")
Relation = dp_accounting.NeighboringRelation
RDP_NO_LABELS = (
    "dp_accounting's RdpAccountant samples Gaussian events only and takes randomized response under "
    "replace-one neighbours only, so it cannot compose a report sampled together with its label"
)
LABELS_NOTE = (
    "includes each report's label: one step is the Poisson-sampled composition of the Gaussian report and "
    "the label's randomized response, its PLD built by ldpfed from dp_accounting's pessimistic PLDs"
)


def poisson_event(schedule: Schedule) -> dp_accounting.DpEvent:
    """T steps of the Poisson-sampled Gaussian at the per-record rate q*p (reports only, no labels)."""
    step = dp_accounting.PoissonSampledDpEvent(schedule.rate, dp_accounting.GaussianDpEvent(schedule.noise_multiplier))
    return dp_accounting.SelfComposedDpEvent(step, schedule.steps)


def fixed_size_event(schedule: Schedule) -> dp_accounting.DpEvent:
    """T steps of a Gaussian on a sample of m = round(q*p*n) of n records without replacement."""
    if schedule.dataset_size is None:
        raise ValueError("fixed-size sampling needs dataset_size")
    n = schedule.dataset_size
    m = min(max(round(schedule.rate * n), 1), n)
    step = dp_accounting.SampledWithoutReplacementDpEvent(
        n, m, dp_accounting.GaussianDpEvent(schedule.noise_multiplier)
    )
    return dp_accounting.SelfComposedDpEvent(step, schedule.steps)


def pld_accountant(value_discretization_interval: float = PLD_DISCRETIZATION) -> dp_accounting.PrivacyAccountant:
    """A fresh pessimistic PLD accountant under add-or-remove-one."""
    return dp_accounting.pld.PLDAccountant(Relation.ADD_OR_REMOVE_ONE, value_discretization_interval)


def rdp_accountant() -> dp_accounting.PrivacyAccountant:
    """A fresh RDP accountant (default orders) under add-or-remove-one."""
    return dp_accounting.rdp.RdpAccountant(neighboring_relation=Relation.ADD_OR_REMOVE_ONE)


def pld_epsilon(schedule: Schedule, value_discretization_interval: float = PLD_DISCRETIZATION) -> float:
    """Pessimistic PLD epsilon of the Poisson-sampled schedule (an upper bound at any interval).

    With ``schedule.labels`` every step releases the sampled record's label too. A coarser
    interval is faster and more pessimistic (1e-3 vs 1e-4: about 10 times faster and within
    0.05% at p = 0.01, T <= 10^4). Memoised per (z, rate, T, delta, interval, labels).
    """
    return _pld_epsilon(
        schedule.noise_multiplier,
        schedule.rate,
        schedule.steps,
        schedule.delta,
        value_discretization_interval,
        schedule.labels,
    )


@lru_cache(maxsize=4096)
def _pld_epsilon(
    noise_multiplier: float, rate: float, steps: int, delta: float, interval: float, labels: PrivacyEvent | None
) -> float:
    # Without labels, what PLDAccountant.compose(poisson_event(...)).get_epsilon(delta) computes, step
    # for step, with the one-step PLD memoised: a user's budget check at step T reuses it for every T.
    # One step is that PLD itself (the same epsilon to 1e-11 relative): composing it with the identity
    # costs as much again as building it, 25 s at noise multiplier 0.05 (epsilon 284) on this machine.
    step = step_pld(noise_multiplier, rate, labels, interval)
    if steps == 1:
        return float(step.get_epsilon_for_delta(delta))
    composed = pld_lib.identity(value_discretization_interval=interval).compose(step.self_compose(steps))
    return float(composed.get_epsilon_for_delta(delta))


@lru_cache(maxsize=256)
def step_pld(
    noise_multiplier: float, rate: float, labels: PrivacyEvent | None, interval: float = PLD_DISCRETIZATION
) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of one Poisson-sampled step: the report and, with ``labels``, its label.

    Without labels it is PLDAccountant's own. With labels, one unsampled release is the
    composition of the Gaussian (z, unit shift) and the label event (replace-one), and the
    step is that release Poisson-sampled at ``rate`` (:func:`poisson_sampled`); at rate 1 it is
    the release itself, the worst-case ledger's cost of one release. The Gaussian's losses are
    rounded up rather than connected (dp_accounting's default): a rounded-up PMF is that of a
    pair the release is a post-processing of, which reading the pair back from the PMF needs
    (the connected dots' PMF, read so, measured up to 10% looser after sampling).
    """
    if labels is None:
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=noise_multiplier,
            value_discretization_interval=interval,
            sampling_prob=rate,
            neighboring_relation=Relation.ADD_OR_REMOVE_ONE,
        )
    release = pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier, value_discretization_interval=interval, use_connect_dots=False
    ).compose(labels.to_pld(interval))
    return release if rate == 1 else poisson_sampled(release, rate)


def poisson_sampled(release: pld_lib.PrivacyLossDistribution, rate: float) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of ``release`` run on a record Poisson-sampled at ``rate`` < 1.

    ``release`` is read as its pair (A, B): A the record's output, B the reference record's,
    with loss l = log(A/B), l's law under A its removal PMF and under B that law times e^-l
    (B's remaining mass lies where A has none). Sampling gives the pair (rA + (1-r)B, B) for
    removal and (B, rA + (1-r)B) for addition (the dominating pairs of Poisson subsampling, Zhu,
    Dong and Wang 2022), with losses +-log(1 - r + r e^l); they are rounded up onto the grid,
    which keeps the bound pessimistic.
    """
    pmf = release._pmf_remove.to_dense_pmf()  # dp_accounting has no public accessor for a PLD's PMF
    interval = pmf._discretization
    loss = (pmf._lower_loss + np.arange(pmf.size)) * interval
    under_a = np.maximum(pmf._probs, 0.0)
    with np.errstate(divide="ignore"):
        under_b = np.exp(np.minimum(np.log(under_a) - loss, 0.0))
    b_only = max(0.0, 1.0 - float(under_b.sum()))
    floor = math.log1p(-rate)  # the sampled loss of an outcome B alone gives
    sampled = np.append(np.logaddexp(floor, math.log(rate) + loss), floor)
    remove = _rounded_up(sampled, np.append(rate * under_a + (1 - rate) * under_b, (1 - rate) * b_only), interval)
    add = _rounded_up(-sampled, np.append(under_b, b_only), interval)
    return pld_lib.PrivacyLossDistribution(
        pld_pmf.DensePLDPmf(interval, *remove, rate * pmf._infinity_mass, pessimistic_estimate=True),
        pld_pmf.DensePLDPmf(interval, *add, 0.0, pessimistic_estimate=True),
    )


def _rounded_up(losses: np.ndarray, masses: np.ndarray, interval: float) -> tuple[int, np.ndarray]:
    """(lowest grid index, dense masses) of ``masses`` at ``losses`` rounded up onto the grid."""
    index = np.ceil(losses / interval).astype(np.int64)
    low = int(index.min())
    return low, np.bincount(index - low, weights=masses)


def rdp_epsilon(schedule: Schedule) -> float:
    """RDP epsilon of the Poisson-sampled schedule (an upper bound, looser than PLD)."""
    return float(rdp_accountant().compose(poisson_event(schedule)).get_epsilon(schedule.delta))


def rdp_replace_one_accountant() -> dp_accounting.PrivacyAccountant:
    """A fresh RDP accountant (default orders) under replace-one, the only relation of fixed-size sampling."""
    return dp_accounting.rdp.RdpAccountant(neighboring_relation=Relation.REPLACE_ONE)


def rdp_fixed_size_epsilon(schedule: Schedule) -> float:
    """RDP epsilon of the fixed-size sampled schedule under replace-one."""
    return float(rdp_replace_one_accountant().compose(fixed_size_event(schedule)).get_epsilon(schedule.delta))


def figures(schedule: Schedule) -> list[AccountantFigure]:
    """PLD and RDP for Poisson sampling; with ``dataset_size``, the fixed-size figures too."""
    bound = partial(AccountantFigure, version=VERSION, kind="upper bound", delta=schedule.delta)
    base = {"noise_multiplier": schedule.noise_multiplier, "rate": schedule.rate, "steps": schedule.steps}
    result = [
        bound(
            key="pld",
            name="PLD, Poisson sampling",
            epsilon=pld_epsilon(schedule),
            assumption=UNLINKABLE_POISSON,
            parameters={**base, "value_discretization_interval": PLD_DISCRETIZATION, "pessimistic": True},
            note="" if schedule.labels is None else LABELS_NOTE,
        ),
        reports_only(
            bound(
                key="rdp",
                name="RDP, Poisson sampling",
                epsilon=rdp_epsilon(schedule),
                assumption=UNLINKABLE_POISSON,
                parameters={**base, "orders": "dp_accounting default"},
            ),
            schedule,
            RDP_NO_LABELS,
        ),
    ]
    if schedule.dataset_size is None:
        return result
    n = schedule.dataset_size
    fixed = {**base, "dataset_size": n, "sample_size": fixed_size_event(schedule).event.sample_size}
    return [
        *result,
        reports_only(
            bound(
                key="rdp_fixed_size",
                name="RDP, fixed-size sampling without replacement",
                epsilon=rdp_fixed_size_epsilon(schedule),
                assumption=UNLINKABLE_FIXED_SIZE,
                parameters=fixed,
            ),
            schedule,
            RDP_NO_LABELS,
        ),
        bound(
            key="pld_fixed_size",
            name="PLD, fixed-size sampling without replacement",
            epsilon=None,
            assumption=UNLINKABLE_FIXED_SIZE,
            parameters=fixed,
            unavailable=f"{VERSION}'s PLDAccountant does not support SampledWithoutReplacementDpEvent",
        ),
    ]
