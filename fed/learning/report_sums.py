"""Sums of a batch of decoded reports: all the classifier needs of them, and mergeable.

A node that hosts many simulated users may send these instead of the reports (the server
asks, fed.runtime.requests ``summarise``): they are a function of the released reports, so sending
them is post-processing and reveals no more than the reports would.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ldpfed.fed.randomizers.base import Randomizer

GRAM_BLOCK = 8192
"""Rows per float32 block of a second moment; blocks are summed in float64 (see :meth:`ReportSums.of`)."""


@dataclass(frozen=True)
class ReportSums:
    """Per reported label: the sum of reports and their count; the sum of outer products; how many.

    Labels are as released (before any label-channel unmixing, which is linear and the
    server's to apply).
    """

    class_sums: np.ndarray
    """(num_classes, dim): the sum of the reports of each reported label (soft labels weight them)."""
    label_counts: np.ndarray
    """(num_classes,): how many reports carry each label (soft labels: their summed weights)."""
    second_moment: np.ndarray
    """(dim, dim): the sum of the reports' outer products."""
    count: int
    """How many reports were summed."""

    @classmethod
    def of(cls, reports: np.ndarray, labels: np.ndarray, num_classes: int) -> "ReportSums":
        """The sums of ``reports`` (n, d) with class ids or soft labels (n, num_classes).

        float32 reports (as they travel) are summed in float32 over blocks of GRAM_BLOCK rows
        and the blocks in float64: twice as fast as float64, and the rounding (about 1e-5 of
        an entry) is far below the sampling error of the noise in the same entry (about
        sqrt(2 / n) of it). Other reports are summed in float64.
        """
        if reports.ndim != 2:
            raise ValueError(f"reports must be a matrix, got shape {reports.shape}")
        if not np.isfinite(reports).all():
            raise ValueError("reports contain NaN or infinite values")
        n, dim = reports.shape
        one_hot = soft_labels(labels, n, num_classes)
        if reports.dtype != np.float32:
            reports = np.asarray(reports, dtype=np.float64)
            return cls(one_hot.T @ reports, one_hot.sum(axis=0), reports.T @ reports, n)
        sums, second = np.zeros((num_classes, dim)), np.zeros((dim, dim))
        for start in range(0, n, GRAM_BLOCK):
            block, weights = reports[start : start + GRAM_BLOCK], one_hot[start : start + GRAM_BLOCK].astype(np.float32)
            sums += weights.T @ block
            second += block.T @ block
        return cls(sums, one_hot.sum(axis=0), second, n)

    @classmethod
    def of_reports(cls, randomizer: "Randomizer", reports: np.ndarray, labels: np.ndarray, num_classes: int) -> "ReportSums":
        """The sums of ``randomizer``'s reports once decoded (as the server would decode them)."""
        estimates = reports if randomizer.decoded_as_sent else randomizer.decode(reports)[0]
        return cls.of(np.asarray(estimates, dtype=np.float32), labels, num_classes)

    def __add__(self, other: "ReportSums") -> "ReportSums":
        """The sums of both batches of reports."""
        return ReportSums(
            self.class_sums + other.class_sums,
            self.label_counts + other.label_counts,
            self.second_moment + other.second_moment,
            self.count + other.count,
        )

    def check(self, dim: int, num_classes: int) -> None:
        """Raise ValueError unless these are sums of real reports of this shape (e.g. received from a node)."""
        shapes = (np.shape(self.class_sums), np.shape(self.label_counts), np.shape(self.second_moment))
        if shapes != ((num_classes, dim), (num_classes,), (dim, dim)):
            raise ValueError(f"report sums have shapes {shapes}, expected {((num_classes, dim), (num_classes,), (dim, dim))}")
        if isinstance(self.count, bool) or not isinstance(self.count, (int, np.integer)) or self.count < 0:
            raise ValueError(f"report sums count must be a non-negative integer, got {self.count!r}")
        parts = (self.class_sums, self.label_counts, self.second_moment)
        if not all(np.isfinite(p).all() for p in parts):
            raise ValueError("report sums contain NaN or infinite values")
        if not np.isclose(float(np.sum(self.label_counts)), self.count, rtol=1e-9, atol=1e-6):
            raise ValueError(f"report sums: label counts add to {np.sum(self.label_counts)}, not the count {self.count}")


def soft_labels(labels: np.ndarray, n: int, num_classes: int) -> np.ndarray:
    """One-hot rows of class ids, or soft labels (n, num_classes) as they are."""
    labels = np.asarray(labels)
    if labels.shape == (n, num_classes):
        if not np.isfinite(labels).all():
            raise ValueError("soft labels contain NaN or infinite values")
        return labels.astype(np.float64)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be {n} class ids or an ({n}, {num_classes}) soft-label array")
    if n and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes})")
    return np.eye(num_classes)[labels]
