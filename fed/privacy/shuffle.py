"""Amplification by shuffling: the central (epsilon, delta) of n shuffled eps0-LDP reports.

Feldman, McMillan and Talwar, "Hiding among the clones" (FOCS 2021), numerical analysis
(their Theorem 3.2 and Appendix E). Shuffling n reports, each the output of an eps0-DP local
randomizer (adaptively chosen ones allowed) on one data point, is (eps, delta)-DP for neighbouring
datasets that differ in one data point, with delta the hockey-stick divergence between

- P: with C ~ Bin(n-1, e^-eps0) and A ~ Bin(C, 1/2), the pair (A+1, C-A) with probability
  alpha = e^eps0 / (e^eps0 + 1), else (A, C-A+1);
- Q: the same with alpha and 1-alpha swapped.

Conditioned on C = c the likelihood ratio P/Q grows with the first count, so each conditional
divergence is two binomial tails; here every c in 0..n-1 is summed exactly (the reference
implementation of the paper steps over c and bounds each step by its end points). The result
is an upper bound on the shuffled mechanism's delta at ``epsilon``; :func:`shuffled_epsilon`
inverts it with the one root solver (fed.privacy.solver), on the private side: the epsilon it
returns has a delta at most the target.

Conditions: the reports must be pure eps0-LDP (a Gaussian report is not; the paper's extension
to approximate LDP is not implemented here), each data point gives one report to the shuffled
batch, and the server sees the batch only as a multiset (no origin, uniformly permuted).
Several shuffled batches (rounds) compose; :func:`composed` uses basic composition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ldpfed.fed.privacy.solver import within
from ldpfed.fed.privacy.validators import check_delta, check_int

TOLERANCE = 2.0**-40
"""The solve's tolerance on epsilon, relative to eps0 (as 40 bisection steps on [0, eps0])."""


def shuffled_delta(n: int, eps0: float, epsilon: float) -> float:
    """Upper bound on delta at ``epsilon`` after shuffling ``n`` reports of an ``eps0``-LDP randomizer."""
    _check(n, eps0)
    if epsilon >= eps0:
        return 0.0  # shuffling never costs more than one report's own epsilon
    alpha = math.exp(eps0) / (math.exp(eps0) + 1.0)
    # P/Q > e^eps  <=>  b(a-1)/b(a) = a/(c-a+1) > r, the ratio where alpha r + 1-alpha = e^eps (alpha + (1-alpha) r).
    r = (math.exp(epsilon) * alpha - (1.0 - alpha)) / (alpha - math.exp(epsilon) * (1.0 - alpha))
    beta = r / (1.0 + r)
    c = np.arange(n, dtype=np.float64)
    weight = stats.binom.pmf(c, n - 1, math.exp(-eps0))
    cut = np.floor(beta * (c + 1.0))  # first counts a > cut have P/Q > e^eps
    tail = stats.binom.sf(cut - 1.0, c, 0.5)  # Pr[A >= cut]
    tail_next = stats.binom.sf(cut, c, 0.5)  # Pr[A >= cut + 1]
    p_mass = alpha * tail + (1.0 - alpha) * tail_next  # P(first count > cut): A+1 > cut or A > cut
    q_mass = (1.0 - alpha) * tail + alpha * tail_next
    forward = np.maximum(p_mass - math.exp(epsilon) * q_mass, 0.0)
    return float(min(np.sum(weight * forward), 1.0))


def shuffled_epsilon(n: int, eps0: float, delta: float) -> float:
    """Smallest epsilon (within :data:`TOLERANCE` times eps0, rounded up) whose :func:`shuffled_delta` is at most
    ``delta``; at most eps0, whose delta is 0."""
    _check(n, eps0)
    check_delta(delta)
    return within(
        lambda epsilon: shuffled_delta(n, eps0, epsilon), delta, eps0, increasing=False, floor=0.0,
        xtol=TOLERANCE * eps0, rel_tol=TOLERANCE, name="epsilon",
    )


@dataclass(frozen=True)
class ShuffledFigure:
    """The central epsilon of a run's shuffled rounds, with what it assumes."""

    epsilon: float | None
    delta: float
    eps0: float | None
    batches: list[int]
    note: str

    def to_json(self) -> dict[str, object]:
        """Plain-JSON form."""
        return {"epsilon": self.epsilon, "delta": self.delta, "eps0": self.eps0, "batch_sizes": self.batches, "note": self.note}


ASSUMPTION = (
    "FMT21 numerical bound (Theorem 3.2): each round's reports are shuffled together by a party the server does "
    "not control, which strips their origin; each report is pure eps0-LDP for its record; a record gives at most one "
    "report per round; rounds compose by basic composition (epsilons and deltas add)"
)


def composed(batches: list[int], eps0: float | None, delta: float) -> ShuffledFigure:
    """Sentence-level central epsilon of ``batches`` (reports per shuffled round) at total ``delta``.

    Each round gets delta / rounds; ``eps0`` None (a randomizer that is not pure LDP) gives no figure.
    """
    batches = [int(b) for b in batches if b > 0]
    if eps0 is None:
        return ShuffledFigure(None, delta, None, batches, "not available: the reports are not pure eps0-LDP of one "
                              "record each (e.g. Gaussian, or mixed records); FMT21's numerical bound needs that")
    if not batches:
        return ShuffledFigure(0.0, delta, eps0, batches, "no report was shuffled")
    per_round = delta / len(batches)
    total = sum(shuffled_epsilon(n, eps0, per_round) for n in batches)
    return ShuffledFigure(total, delta, eps0, batches, ASSUMPTION)


def _check(n: int, eps0: float) -> None:
    check_int("n", n, meaning="reports in the shuffled batch")
    if not (math.isfinite(eps0) and eps0 > 0):
        raise ValueError(f"eps0 must be a positive finite local epsilon, got {eps0!r}")
