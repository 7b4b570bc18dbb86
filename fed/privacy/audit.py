"""Empirical lower bounds on epsilon from a distinguishing test (Nasr et al. 2021).

A test that tells neighbouring inputs apart with false-positive rate a and false-negative
rate b proves epsilon >= log((1 - delta - b) / a) (and symmetrically); Clopper-Pearson
upper bounds on a and b make the figure a lower bound at the given confidence.
"""

from __future__ import annotations

import math

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
