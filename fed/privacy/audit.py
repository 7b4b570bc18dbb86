"""Empirical lower bounds on epsilon from a distinguishing test (Nasr et al. 2021).

A test that tells neighbouring inputs apart with false-positive rate a and false-negative
rate b proves epsilon >= log((1 - delta - b) / a) (and symmetrically); Clopper-Pearson
upper bounds on a and b make the figure a lower bound at the given confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """One-sided upper confidence bound on a binomial rate."""
    if successes >= trials:
        return 1.0
    return float(beta.ppf(1 - alpha, successes + 1, trials - successes))


def epsilon_lower_bound(
    scores_null: np.ndarray,
    scores_alt: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    thresholds: int = 200,
) -> float:
    """Largest epsilon lower bound over threshold tests 'score > t' separating the two samples.

    Parameters
    ----------
    scores_null, scores_alt:
        Test statistics of releases on the first and second neighbouring input; larger
        means "second".
    delta:
        The delta of the claim being audited.
    confidence:
        Confidence of the bound, shared (Bonferroni) across the thresholds tried.
    """
    scores_null, scores_alt = np.sort(scores_null), np.sort(scores_alt)
    candidates = np.quantile(np.concatenate([scores_null, scores_alt]), np.linspace(0, 1, thresholds))
    alpha = (1 - confidence) / (2 * thresholds)
    n0, n1 = len(scores_null), len(scores_alt)
    best = 0.0
    for t in candidates:
        false_pos = n0 - np.searchsorted(scores_null, t, side="right")
        false_neg = np.searchsorted(scores_alt, t, side="right")
        fpr = clopper_pearson_upper(int(false_pos), n0, alpha)
        fnr = clopper_pearson_upper(int(false_neg), n1, alpha)
        for a, b in ((fpr, fnr), (fnr, fpr)):
            if a > 0 and 1 - delta - b > 0:
                best = max(best, math.log((1 - delta - b) / a))
    return best


# --------------------------------------------------------------------------------------
# Likelihood-ratio tests for the multivariate randomizers, and an audit summary.
# A likelihood-ratio test is the optimal test (Neyman-Pearson) for a fixed pair of
# neighbouring inputs, so thresholding the log-likelihood ratio gives the tightest
# FPR/FNR trade-off any attacker can reach on that pair.
# --------------------------------------------------------------------------------------


def gaussian_llr(reports: np.ndarray, x0: np.ndarray, x1: np.ndarray, sigma: float) -> np.ndarray:
    """log p(y | x1) / p(y | x0) under isotropic N(x, sigma^2 I) noise, per row of ``reports``."""
    x0, x1 = np.ravel(x0), np.ravel(x1)
    return (np.asarray(reports) @ (x1 - x0) - (x1 @ x1 - x0 @ x0) / 2) / sigma**2


def laplace_llr(reports: np.ndarray, x0: np.ndarray, x1: np.ndarray, scale: float) -> np.ndarray:
    """log p(y | x1) / p(y | x0) under i.i.d. Laplace(scale) noise per coordinate.

    Summed per coordinate, so a coordinate where x0 and x1 agree adds exactly 0 (a difference
    of two sums would smear the ratio's atoms at +-||x1 - x0||_1 / scale by rounding).
    """
    reports = np.asarray(reports)
    return (np.abs(reports - np.ravel(x0)) - np.abs(reports - np.ravel(x1))).sum(axis=1) / scale


def dchi_llr(reports: np.ndarray, x0: np.ndarray, x1: np.ndarray, eta: float) -> np.ndarray:
    """log p(y | x1) / p(y | x0) under d_chi noise with density proportional to exp(-eta ||z||)."""
    reports = np.asarray(reports)
    return eta * (np.linalg.norm(reports - np.ravel(x0), axis=1) - np.linalg.norm(reports - np.ravel(x1), axis=1))


def bitflip_llr(
    reports: np.ndarray, bits0: np.ndarray, bits1: np.ndarray, p: np.ndarray, q: np.ndarray
) -> np.ndarray:
    """log P(y | bits1) / P(y | bits0) when bit i is reported 1 w.p. p_i if it is 1 and q_i if 0."""
    bits0, bits1 = np.ravel(bits0) > 0.5, np.ravel(bits1) > 0.5
    one0, one1 = np.where(bits0, p, q), np.where(bits1, p, q)
    w1 = np.log(one1) - np.log(one0)
    w0 = np.log1p(-one1) - np.log1p(-one0)
    reports = np.asarray(reports, dtype=np.float64)
    return reports @ w1 + (1.0 - reports) @ w0


def lr_epsilon_lower_bound(
    scores_null: np.ndarray,
    scores_alt: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    resolution: float = 1e-9,
) -> float:
    """:func:`epsilon_lower_bound` with thresholds that also resolve both tails.

    Large epsilons are only visible at tiny false-positive (or false-negative) rates, so
    besides evenly spaced quantiles the candidate thresholds include geometrically spaced
    quantiles down to 1/n in the upper tail of the null scores and the lower tail of the
    alternative ones. Bonferroni over all candidates keeps the stated confidence.

    Scores are first rounded to multiples of ``resolution``: a likelihood ratio with atoms
    (e.g. d_chi noise in one dimension, whose ratio is exactly +-eta * 2C on half-lines) is
    computed with rounding errors that differ between the two inputs, and thresholds
    between such split atoms would report leakage that is only floating-point noise.
    """
    scores_null = np.sort(np.round(np.asarray(scores_null, dtype=np.float64) / resolution) * resolution)
    scores_alt = np.sort(np.round(np.asarray(scores_alt, dtype=np.float64) / resolution) * resolution)
    n0, n1 = len(scores_null), len(scores_alt)
    if not n0 or not n1:
        raise ValueError("need scores for both neighbouring inputs")
    tails = np.geomspace(1.0 / max(n0, n1), 0.2, 60)
    candidates = np.unique(
        np.concatenate(
            [
                np.quantile(np.concatenate([scores_null, scores_alt]), np.linspace(0, 1, 81)),
                np.quantile(scores_null, 1 - tails),
                np.quantile(scores_null, tails),
                np.quantile(scores_alt, tails),
                np.quantile(scores_alt, 1 - tails),
            ]
        )
    )
    alpha = (1 - confidence) / (2 * len(candidates))
    false_pos = n0 - np.searchsorted(scores_null, candidates, side="right")
    false_neg = np.searchsorted(scores_alt, candidates, side="right")
    fpr, fnr = _clopper_pearson_upper_many(false_pos, n0, alpha), _clopper_pearson_upper_many(false_neg, n1, alpha)
    best = 0.0
    for a, b in ((fpr, fnr), (fnr, fpr)):
        ok = (a > 0) & (1 - delta - b > 0)
        if ok.any():
            best = max(best, float(np.max(np.log((1 - delta - b[ok]) / a[ok]))))
    return best


def _clopper_pearson_upper_many(successes: np.ndarray, trials: int, alpha: float) -> np.ndarray:
    """:func:`clopper_pearson_upper` for an array of success counts."""
    successes = np.asarray(successes)
    out = np.ones(successes.shape)
    inside = successes < trials
    out[inside] = beta.ppf(1 - alpha, successes[inside] + 1, trials - successes[inside])
    return out


@dataclass(frozen=True)
class AuditResult:
    """Claimed, accounted and audited epsilon of one randomizer configuration.

    ``claimed_epsilon`` is what the mechanism (or its paper) states; ``accounted_epsilon``
    what its event costs in the ledger at ``delta``; ``lower_bound`` the audited epsilon,
    valid with probability ``confidence``.
    """

    mechanism: str
    claimed_epsilon: float
    accounted_epsilon: float
    delta: float
    lower_bound: float
    samples: int
    confidence: float

    @property
    def verdict(self) -> str:
        """'claim violated' when the audit proves more leakage than claimed, else 'pass'."""
        return "claim violated" if self.lower_bound > self.claimed_epsilon else "pass"

    def to_json(self) -> dict[str, float | int | str]:
        return {
            "mechanism": self.mechanism,
            "claimed_epsilon": self.claimed_epsilon,
            "accounted_epsilon": self.accounted_epsilon,
            "delta": self.delta,
            "audited_lower_bound": self.lower_bound,
            "samples": self.samples,
            "confidence": self.confidence,
            "verdict": self.verdict,
        }
