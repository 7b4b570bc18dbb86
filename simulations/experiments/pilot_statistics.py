"""Statistics a pilot rule of pilot_dim reads from charged reports alone (issue 29, item 4): block energies with a
lower confidence bound, the noise's spread of their estimate, and the signal ratio of truncated pilot reports."""

from __future__ import annotations

import numpy as np

from ldpfed.fed.learning.classifier import class_means

CONFIDENCE = 2.0
"""Standard deviations of the noise's spread taken off each block's between-class energy (flat_statistics)."""


def flat_statistics(r: np.ndarray, y: np.ndarray, c: int, sigma: float, blocks: tuple[tuple[int, int], ...],
                    z: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Class means (c, d) and a flat within-class variance (d,) from unit-norm records' reports ``r`` of std ``sigma``.

    Per block of ``blocks``, the reports' class-mean deviations are scaled so that their between-class energy is the
    reports' less the noise's share and ``z`` standard deviations of the noise's spread, (sigma^2 + within)
    sqrt(2 (c - 1) m) for m coordinates (a lower confidence bound; pilot_dim.block_statistics' shrinkage instead
    scales the energy down by signal / (signal + noise)). The within-class variance is the records' energy 1 less
    the grand mean's and the between-class energy (each from the reports, the noise's share subtracted), spread evenly
    over the d coordinates.
    """
    n, d = r.shape
    counts = np.bincount(y, minlength=c).astype(float)
    means = class_means(r, y, c)
    grand = counts @ means / n
    deviation = means - grand
    observed = [float(np.sum(counts[:, None] * deviation[:, a:b] ** 2)) for a, b in blocks]
    between = sum(max(o - (c - 1) * (b - a) * sigma**2, 0.0) for o, (a, b) in zip(observed, blocks)) / n
    within = max(1.0 - max(float(grand @ grand) - d * sigma**2 / n, 0.0) - between, 0.0) / d
    shrunk = np.repeat(grand[None], c, axis=0)
    for o, (a, b) in zip(observed, blocks):
        noise, spread = (within + sigma**2) * np.array([(c - 1) * (b - a), np.sqrt(2 * (c - 1) * (b - a))])
        shrunk[:, a:b] += np.sqrt(max(o - noise - z * spread, 0.0) / max(o, 1e-12)) * deviation[:, a:b]
    return shrunk, np.full(d, within)


def pilot_spread(sigma: float, c: int, pilot: int, candidates: tuple[int, ...]) -> float:
    """The standard deviation the noise alone gives the pilot's estimate of the between-class energy in the top block
    (the last two candidates; inf with one candidate), sigma^2 sqrt(2 (c - 1) m) / pilot: known before any release."""
    if len(candidates) < 2:
        return float("inf")
    return sigma**2 * np.sqrt(2 * (c - 1) * (candidates[-1] - candidates[-2])) / pilot


def rescale(pilot: np.ndarray, y_pilot: np.ndarray, final: np.ndarray, y_final: np.ndarray, c: int, sigma: float
            ) -> float:
    """The factor by which the pilot's reports truncated to the final reports' k coordinates have their signal scaled
    down against the final reports (one unit-norm record truncated, against the truncated record at unit norm): the
    least-squares slope of the pilot's class means on the final reports' (the noise's share of their energy
    subtracted), in [0.05, 1]. Reads only reports and public labels."""
    k = final.shape[1]
    counts = np.bincount(y_pilot, minlength=c).astype(float)
    final_counts = np.maximum(np.bincount(y_final, minlength=c), 1)
    ours, theirs = class_means(pilot[:, :k], y_pilot, c), class_means(final, y_final, c)
    energy = float(np.sum(counts * (np.sum(theirs**2, axis=1) - k * sigma**2 / final_counts)))
    return float(np.clip(np.sum(counts[:, None] * ours * theirs) / max(energy, 1e-12), 0.05, 1.0))
