"""The amplified PLD bound a user enforces under ``--enforce amplified``.

How a record's amplified cost is computed, per user and per kind of record (training
records are only touched by training steps, query records by query steps):

- the user's ledger logs every step it served: its kind, sampling spec and randomizer event;
- each logged (spec, Gaussian event) group with n steps contributes n self-compositions of
  dp_accounting's ``PoissonSampledDpEvent(rate, GaussianDpEvent(z))`` with z = sigma /
  sensitivity and rate = the spec's per-step probability of releasing one given record
  (``poisson:<p>`` -> p, ``all`` -> 1, ``upsample:<q>:<p>:<k>`` -> p);
- the groups' pessimistic PLDs are composed, as dp_accounting's PLD accountant composes them,
  at the same discretization as the reported PLD figure and the calibration, so a run
  calibrated for T steps is never refused at step T or earlier by discretization error;
- every step counts, whether or not the record was sampled in it (the sampling coins are
  secret), and the budget check runs before the step: the step is served only when the
  bound over the steps so far plus this one stays within the sentence-level budget.

This bound assumes the server cannot link a report to its record; the worst-case ledger is
still kept and reported beside it. Enforcing it requires public labels (the run refuses
randomized-response labels with it); the report's per-user amplified figure passes the label
event of a randomized-response run, so that its training steps carry the labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from ldpfed.fed.privacy.accountants import amplified
from ldpfed.fed.privacy.accountants.base import Schedule
from ldpfed.fed.privacy.composition import PLD_DISCRETIZATION
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent
from ldpfed.fed.privacy.solver import least_integer
from ldpfed.fed.privacy.sampling import amplified_rate

Entry = tuple[float, float, int]  # (per-step rate, noise multiplier, steps)

# (rate, noise multiplier, delta, budget) -> (largest T known within budget, smallest T known above)
_KNOWN: dict[tuple[float, float, float, float], tuple[int, int | None]] = {}


def entries(log: Iterable[tuple[str, PrivacyEvent, int]]) -> tuple[Entry, ...]:
    """Merge a ledger's step log of one kind into sorted (rate, z, steps) groups.

    Raises ValueError for a step the amplified accountant cannot bound (fixed-size sampling
    or a non-Gaussian randomizer).
    """
    merged: dict[tuple[float, float], int] = {}
    for spec, event, n in log:
        if not isinstance(event, GaussianEvent):
            raise ValueError(f"the amplified PLD bound covers Gaussian releases only, not {event.mechanism}")
        key = (amplified_rate(spec), event.sigma / event.sensitivity)
        merged[key] = merged.get(key, 0) + int(n)
    return tuple(sorted((rate, z, n) for (rate, z), n in merged.items() if n > 0))


@lru_cache(maxsize=4096)
def pld_epsilon(groups: tuple[Entry, ...], delta: float, labels: PrivacyEvent | None = None) -> float:
    """Pessimistic PLD epsilon of the composed groups (0 for no steps).

    ``labels``: the label event every report of these steps carries (None: public labels).
    """
    if not groups:
        return 0.0
    if len(groups) == 1:
        rate, z, steps = groups[0]
        return amplified.pld_epsilon(Schedule(z, rate, steps, delta, labels=labels))
    composed = pld_lib.identity(value_discretization_interval=PLD_DISCRETIZATION)
    for rate, z, steps in groups:
        composed = composed.compose(amplified.step_pld(z, rate, labels).self_compose(steps))
    return float(composed.get_epsilon_for_delta(delta))


def within_budget(groups: tuple[Entry, ...], delta: float, budget: float) -> bool:
    """Whether the amplified bound of ``groups`` is at most ``budget``.

    For one homogeneous group the answer is monotone in the number of steps, so results are
    remembered per (rate, z): checking step T costs O(log T) PLD computations over a run.
    """
    if len(groups) != 1:
        return pld_epsilon(groups, delta) <= budget
    rate, z, steps = groups[0]
    key = (rate, z, delta, budget)
    ok, fail = _KNOWN.get(key, (0, None))
    if steps <= ok:
        return True
    if fail is not None and steps >= fail:
        return False
    probe = steps if fail is not None else max(steps, 2 * ok)
    if pld_epsilon(((rate, z, probe),), delta) <= budget:
        _KNOWN[key] = (probe, fail)
        return True
    # the fewest steps above budget, between ``ok`` (within, 0 trivially) and ``probe`` (above)
    over = least_integer(lambda t: pld_epsilon(((rate, z, t),), delta) > budget, ok, probe)
    _KNOWN[key] = (over - 1, over)
    return steps < over


def dp_event(groups: tuple[Entry, ...], delta: float) -> dp_accounting.DpEvent:
    """The composed dp_accounting event of ``groups`` (for anyone recomputing the figure)."""
    return dp_accounting.ComposedDpEvent(
        [amplified.poisson_event(Schedule(z, rate, steps, delta)) for rate, z, steps in groups]
    )
