"""Noise calibration: the noise that meets a target (epsilon, delta) after a planned number of releases.

Solved against the same composition that the ledger enforces (:func:`compose_epsilon`), so a
calibrated run never trips its own budget, and by the one root solver (fed.privacy.solver),
which answers on the private side: never less noise than the target needs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent
from ldpfed.fed.privacy.figure_cache import cached_figure
from ldpfed.fed.privacy.solver import nudge, within
from ldpfed.fed.privacy.validators import check_int, check_target


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
    releases = check_int("releases", releases)
    other = {e: n for e, n in (other_events or {}).items() if n > 0}
    params = {
        "epsilon": float(epsilon), "delta": float(delta), "releases": int(releases), "sensitivity": float(sensitivity),
        "other": sorted([json.dumps(e.to_json(), sort_keys=True), int(n)] for e, n in other.items()),
    }
    return cached_figure("gaussian_sigma", params, lambda: _calibrate_gaussian_sigma(epsilon, delta, releases, sensitivity, other))


def _calibrate_gaussian_sigma(
    epsilon: float, delta: float, releases: int, sensitivity: float, other: Mapping[PrivacyEvent, int]
) -> float:
    def cost(sigma: float) -> float:
        return compose_epsilon({**other, GaussianEvent(sensitivity, sigma): releases}, delta)

    # The Gaussian-only answer (exact GDP) is a lower bound: other events only add cost.
    sigma = sensitivity * math.sqrt(releases) / gdp.mu_for_epsilon(epsilon, delta)
    if not other:
        return nudge(cost, epsilon, sigma, increasing=False)  # checked against the ledger's own figure
    _check_others(other, epsilon, delta)
    return within(cost, epsilon, 1.25 * sigma, increasing=False, floor=sigma, name="sigma")


def calibrate_parameter(
    make_event: Callable[[float], PrivacyEvent],
    epsilon: float,
    delta: float,
    releases: int,
    other_events: Mapping[PrivacyEvent, int] | None,
    start: float,
) -> float:
    """Largest privacy parameter x (1/scale, eta, a published epsilon) whose ``releases`` runs of
    ``make_event(x)`` (plus ``other_events``) meet the target; ``start`` is any positive guess."""
    epsilon, delta = check_target(epsilon, delta)
    releases = check_int("releases", releases)
    other = {e: n for e, n in (other_events or {}).items() if n > 0}
    _check_others(other, epsilon, delta)

    def cost(x: float) -> float:
        return compose_epsilon({**other, make_event(x): releases}, delta)

    return within(cost, epsilon, start, increasing=True, growth=1.5, name="privacy parameter (1/noise)")


def _check_others(other: Mapping[PrivacyEvent, int], epsilon: float, delta: float) -> None:
    """ValueError where the events charged alongside already spend the whole target."""
    if other and compose_epsilon(other, delta) >= epsilon:
        raise ValueError(f"the other events alone already cost epsilon >= {epsilon}; no noise meets the target")
