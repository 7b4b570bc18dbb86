"""Denoised class statistics of mixed reports (instance encoding, seed 002) for NoiseAwareLDA.

A mixed report is r = sum_t lambda_t x_t + e: k clipped records x_t = mu_{y_t} + w_t (within-class
covariance S) mixed with coefficients lambda on the simplex, plus noise e of variance v per
coordinate; its soft label is s = sum_t lambda_t onehot(y_t). Hence E[r | s] = s^T M for the class
means M, and the residual r - s^T M has covariance (sum_t lambda_t^2) S + v I. So, from the reports
R (n, d) and soft labels S (n, classes) alone:

- class means by least squares, M = (S^T S)^-1 S^T R (averaging the reports by their soft labels
  instead draws every class mean towards the others);
- within-class covariance (U^T U / n - v I) / kappa, U = R - S M the residuals and kappa =
  E[sum_t lambda_t^2] a public property of the mixing (``Mixup.square_share``).

:func:`add_mixed` hands NoiseAwareLDA these as the sums of an equivalent unmixed problem: class sums
unmixed by the label channel T = diag(1 / S^T 1) S^T S (each row sums to one, so it is one), and a
second moment and noise variance v / kappa chosen so that the group's denoised covariance is the one
above. The server needs nothing but the reports, their soft labels and the public noise and mixing.
"""

from __future__ import annotations

import numpy as np

from ldpfed.fed.learning.classifier import NoiseAwareLDA
from ldpfed.fed.learning.report_sums import ReportSums


def mixing_transition(soft: np.ndarray) -> np.ndarray:
    """The label channel of mixed soft labels, T = diag(1 / S^T 1) S^T S: (classes, classes), rows summing to one.

    Undoing it (NoiseAwareLDA's label unmixing) turns soft-label class sums into least-squares class means.
    """
    soft = np.asarray(soft, dtype=np.float64)
    gram = soft.T @ soft
    return gram / np.maximum(soft.sum(axis=0), 1e-12)[:, None]


def mixed_sums(reports: np.ndarray, soft: np.ndarray, square_share: float) -> tuple[ReportSums, np.ndarray]:
    """Sums of mixed reports as NoiseAwareLDA reads unmixed ones, and the label channel to add them with.

    Add them with noise std sqrt(v / square_share) for reports of noise variance v (see the module
    docstring): the group's denoised covariance is then the clean records' within-class covariance.
    """
    if not 0 < square_share <= 1:
        raise ValueError(f"square_share must lie in (0, 1], got {square_share!r}")
    soft = np.asarray(soft, dtype=np.float64)
    if soft.ndim != 2:
        raise ValueError(f"soft labels must be (reports, classes), got shape {soft.shape}")
    raw = ReportSums.of(np.asarray(reports, dtype=np.float64), soft, soft.shape[1])
    transition = mixing_transition(soft)
    gram = soft.T @ soft
    means = np.linalg.solve(gram, raw.class_sums)  # least squares: (S^T S)^-1 S^T R
    residual = raw.second_moment - means.T @ gram @ means  # U^T U, as U^T S = 0
    second = residual / square_share + means.T @ (raw.label_counts[:, None] * means)
    return ReportSums(raw.class_sums, raw.label_counts, second, raw.count), transition


def add_mixed(lda: NoiseAwareLDA, reports: np.ndarray, soft: np.ndarray, noise_std: float, square_share: float) -> None:
    """Add mixed reports (noise std ``noise_std`` per coordinate) and their soft labels to ``lda``, denoised."""
    sums, transition = mixed_sums(reports, soft, square_share)
    lda.add(sums, noise_std / np.sqrt(square_share), transition)
