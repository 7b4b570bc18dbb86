"""Tight composition of a multiset of privacy events into an (epsilon, delta) figure.

Gaussian-only multisets compose exactly in Gaussian DP. Anything else composes through
dp_accounting's privacy loss distributions. The PLDs are built per event rather than
through ``PLDAccountant`` because that accountant ties Laplace to add-or-remove and
randomized response to replace-one neighbours, so it refuses a ledger holding both; each
event here already carries its replace-one sensitivity (the input domain's diameter), which
makes the per-event PLDs exact for replace-one.

Figures are cached in the process, and on a device in its state folder as well
(fed.privacy.figure_cache): a device's message runs in a fresh process, and a mixed ledger's
composition costs it a second or more of CPU.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent, PureEvent
from ldpfed.fed.privacy import figure_cache

Multiset = frozenset[tuple[PrivacyEvent, int]]

PLD_DISCRETIZATION = 1e-4
PLD_FINE_RELEASES = 64
"""Up to this many composed events the PLD grid is PLD_DISCRETIZATION; beyond, it coarsens in
proportion, so that a user-level figure over thousands of pure-DP releases stays a second's work.
The discretization is pessimistic, so every figure remains an upper bound; its excess is at most
about the number of events times the grid step (at 64 events: 0.0064)."""
GDP_LOOKAHEAD = 32
"""On a device, a Gaussian-only figure computed afresh comes with those of the next this many
steps (every count + 1, + 2, ...): a closed form, milliseconds once SciPy is loaded, which
later messages (each a fresh process) then read from the store without loading SciPy at all.
The message that computes them pays SciPy's import: one train message in 33 of a device serving
one record per step (with 8 steps, one in 9; simulations.benchmarks.message_cpu)."""


def compose_epsilon(counts: Mapping[PrivacyEvent, int], delta: float) -> float:
    """Epsilon at ``delta`` of running each event ``counts[event]`` times (replace-one)."""
    multiset: Multiset = frozenset((e, int(n)) for e, n in counts.items() if n > 0)
    if any(n < 0 for n in counts.values()):
        raise ValueError("event counts must be non-negative")
    return _compose_cached(multiset, float(delta))


def is_gaussian_only(counts: Mapping[PrivacyEvent, int]) -> bool:
    """Whether the closed-form GDP composition applies."""
    return all(isinstance(e, GaussianEvent) for e, n in counts.items() if n > 0)


def gaussian_mu(counts: Mapping[PrivacyEvent, int]) -> float:
    """mu of the GDP composition of a Gaussian-only multiset: sqrt(sum n mu_i^2)."""
    if not is_gaussian_only(counts):
        raise ValueError("gaussian_mu needs a Gaussian-only multiset")
    return math.sqrt(sum(n * e.mu * e.mu for e, n in counts.items() if n > 0))  # type: ignore[attr-defined]  (mu**2 raises on overflow; this gives inf)


@lru_cache(maxsize=65536)
def _compose_cached(multiset: Multiset, delta: float) -> float:
    if not multiset:
        return 0.0
    return figure_cache.cached_figure("compose", _params(multiset, delta), lambda: _compose_ahead(multiset, delta))


def _params(multiset: Multiset, delta: float) -> dict[str, Any]:
    """A figure's parameters as the store keys them: delta and each event's exact parameters and count."""
    return {"delta": delta, "events": sorted([json.dumps(e.to_json(), sort_keys=True), n] for e, n in multiset)}


def _compose_ahead(multiset: Multiset, delta: float) -> float:
    """:func:`_compose`; on a device, a Gaussian-only multiset's next steps are stored as well (:data:`GDP_LOOKAHEAD`)."""
    epsilon = _compose(multiset, delta)
    if figure_cache.storing() and is_gaussian_only(dict(multiset)):
        with figure_cache.batch():
            for i in range(1, GDP_LOOKAHEAD + 1):
                ahead = frozenset((e, n + i) for e, n in multiset)
                figure_cache.cached_figure("compose", _params(ahead, delta), lambda: _compose(ahead, delta))  # noqa: B023 - called at once
    return epsilon


@lru_cache(maxsize=32)
def _event_pld(event: PrivacyEvent, step: float) -> Any:
    """One run's PLD on the grid ``step``, built once per process (a Gaussian's costs ~0.4 s; 0.5-3.4 MB at the
    finest grid, so at most about 110 MB for 32). With 8, a process composing many events' figures (the hostile-message
    campaigns) built 93 PLDs where 54 were distinct."""
    return event.to_pld(step)


def _compose(multiset: Multiset, delta: float) -> float:
    counts = dict(multiset)
    if is_gaussian_only(counts):
        return gdp.epsilon_for_delta(gaussian_mu(counts), delta)
    # Events whose PLD cannot be built (no privacy, or pure epsilon too large to discretise)
    # state `basic_epsilon`; they compose by basic composition, a valid upper bound.
    basic = {e: n for e, n in counts.items() if getattr(e, "basic_epsilon", None) is not None}
    if basic:
        rest = frozenset((e, n) for e, n in multiset if e not in basic)
        return math.fsum(n * e.basic_epsilon for e, n in basic.items()) + _compose_cached(rest, delta)
    step = PLD_DISCRETIZATION * max(1.0, sum(counts.values()) / PLD_FINE_RELEASES)
    total = None
    for event, n in sorted(multiset, key=lambda item: repr(item[0])):
        part = _event_pld(event, step).self_compose(n)
        total = part if total is None else total.compose(part)
    # dp_accounting overflows (inf) once the composed epsilon passes ~709 (exp overflow); for
    # pure events basic composition is then the valid, and there nearly tight, figure.
    basic_bound = math.fsum(n * e.epsilon for e, n in multiset) if all(isinstance(e, PureEvent) for e in counts) else math.inf
    with np.errstate(over="ignore"):  # the overflow is the inf handled here
        epsilon = float(total.get_epsilon_for_delta(delta))
    return min(epsilon, basic_bound)
