"""The downstream classifier: noise-aware linear discriminant analysis.

The server sees reports x = clip(f(s)) + N(0, sigma^2 I) with known sigma, and labels that
are either public or passed through randomized response with a known transition matrix.
Class means are unbiased under the noise; the pooled covariance is not, so the known noise
variance is subtracted, and label noise is undone by inverting the transition matrix.
Trained from sufficient statistics, so "everything received so far" costs O(d^2) memory.
Hand-written because no library fits a discriminant from noisy sufficient statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fed.report_sums import ReportSums, soft_labels


@dataclass(frozen=True)
class LinearModel:
    """Scores = x @ weights + bias; predicted class = argmax."""

    weights: np.ndarray
    bias: np.ndarray

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Class scores (logits up to a constant) for each row."""
        return np.asarray(x, dtype=np.float64) @ self.weights + self.bias

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted class of each row."""
        return self.scores(x).argmax(axis=1)


SCREENING = ("auto", "on", "off")
"""Public screening of coordinates: always, never, or when noise dominates (see NoiseAwareLDA)."""


class NoiseAwareLDA:
    """Sufficient statistics of noisy reports and the discriminant they imply.

    Parameters
    ----------
    dim, num_classes:
        Report dimension and number of classes.
    shrinkage:
        Weight of the scaled identity mixed into the denoised covariance, which keeps it
        positive definite when the noise dominates; negative chooses it from the data
        (Ledoit-Wolf intensity, with the sampling error of the noisy covariance).
    target:
        Covariance to shrink towards, e.g. the within-class covariance of the server's
        clean public data; None uses a scaled identity.
    public_means:
        Class means (num_classes, dim) of the server's clean public data, used to screen
        coordinates; None disables screening.
    screening:
        ``on``: fit on the coordinates that maximise the expected Fisher ratio of a discriminant
        built from noisy class means, D^2 / (D + N), with D = sum over class pairs of the public
        gap's squared Mahalanobis norm and N = tr(S^-1 V) the spread the noise of the private
        gap estimates V adds (S: the public within-class covariance, else the denoised one);
        coordinates are ranked by their own ratio and the best leading set is kept, the rest
        get zero weight. ``auto``: the same, but only when the noise term outweighs the signal
        on all coordinates (N > D), e.g. bit encodings, whose hundreds of coordinates each
        carry a tiny share of epsilon. ``off``: every coordinate.
    """

    def __init__(
        self,
        dim: int,
        num_classes: int,
        shrinkage: float = -1.0,
        target: np.ndarray | None = None,
        public_means: np.ndarray | None = None,
        screening: str = "auto",
    ) -> None:
        if shrinkage > 1:
            raise ValueError("shrinkage must be at most 1 (negative: automatic)")
        if screening not in SCREENING:
            raise ValueError(f"screening must be one of {SCREENING}, got {screening!r}")
        self.dim, self.num_classes, self.shrinkage, self.screening = dim, num_classes, shrinkage, screening
        if target is not None and np.shape(target) != (dim, dim):
            raise ValueError(f"target covariance must have shape ({dim}, {dim})")
        if public_means is not None and np.shape(public_means) != (num_classes, dim):
            raise ValueError(f"public class means must have shape ({num_classes}, {dim})")
        self.target, self.public_means = target, public_means
        self.class_sums = np.zeros((num_classes, dim))
        self.class_counts = np.zeros(num_classes)
        self.second_moment = np.zeros((dim, dim))
        self.noise_variance = np.zeros(dim)  # per coordinate: sum over reports of its noise variance
        self.count = 0

    def update(
        self,
        reports: np.ndarray,
        labels: np.ndarray,
        noise_std: float | np.ndarray,
        label_transition: np.ndarray | None = None,
    ) -> None:
        """Add a batch of reports that share one noise scale and one label channel.

        ``noise_std`` is the noise's standard deviation: one number, or one per coordinate.

        ``labels`` are class ids, or soft labels of shape (n, num_classes) (e.g. mixup).
        ``label_transition[i, j]`` is P[reported label j | true label i]; None means the
        labels are exact.
        """
        reports = np.asarray(reports, dtype=np.float64)
        if reports.ndim != 2 or reports.shape[1] != self.dim:
            raise ValueError(f"reports must have shape (n, {self.dim}), got {reports.shape}")
        self.add(ReportSums.of(reports, labels, self.num_classes), noise_std, label_transition)

    def add(self, sums: ReportSums, noise_std: float | np.ndarray, label_transition: np.ndarray | None = None) -> None:
        """Add the sums of a batch of reports that share one noise scale and one label channel (see :meth:`update`)."""
        sums.check(self.dim, self.num_classes)
        class_sums, counts = sums.class_sums, np.asarray(sums.label_counts, dtype=np.float64)
        if label_transition is not None:
            unmix = np.linalg.inv(np.asarray(label_transition, dtype=np.float64).T)
            class_sums, counts = unmix @ class_sums, unmix @ counts
        self.class_sums += class_sums
        self.class_counts += counts
        self.second_moment += sums.second_moment
        self.noise_variance += sums.count * _per_coordinate(noise_std, self.dim) ** 2
        self.count += int(sums.count)

    def fit(self) -> LinearModel:
        """The discriminant for clean inputs, from everything added so far."""
        return self.model_for(query_noise_std=0.0)

    def coordinates(self) -> np.ndarray:
        """Boolean mask of the coordinates the discriminant uses (see ``screening``)."""
        keep = np.ones(self.dim, dtype=bool)
        if self.public_means is None or self.screening == "off" or self.count == 0:
            return keep
        counts = np.maximum(self.class_counts, 1.0)
        per_report = self.noise_variance / self.count
        pairs = [(a, b) for a in range(self.num_classes) for b in range(a + 1, self.num_classes)]
        gaps = np.array([self.public_means[a] - self.public_means[b] for a, b in pairs])  # (pairs, d)
        noise = np.array([per_report * (1 / counts[a] + 1 / counts[b]) for a, b in pairs])  # (pairs, d)
        within = _denoised_within(self.class_sums, self.class_counts, self.second_moment, per_report, self.count)
        cov = _shrunk(within, per_report, self.target, self.shrinkage, self.count)

        own_signal = (gaps**2).sum(axis=0) / np.diag(cov)
        own_spread = noise.sum(axis=0) / np.diag(cov)
        order = np.argsort(-(own_signal**2 / (own_signal + own_spread + 1e-300)), kind="stable")
        try:
            d, n = _leading_signal_and_noise(cov[np.ix_(order, order)], gaps[:, order], noise[:, order].sum(axis=0))
        except np.linalg.LinAlgError:  # not positive definite: no Fisher ratio to screen by
            return keep
        if self.screening == "auto" and n[-1] <= d[-1]:  # all coordinates: noise does not dominate
            return keep
        ratios = np.where(d + n > 0, d * d / np.where(d + n > 0, d + n, 1.0), 0.0)
        keep = np.zeros(self.dim, dtype=bool)
        keep[order[: int(np.argmax(ratios)) + 1]] = True
        return keep

    def model_for(self, query_noise_std: float | np.ndarray) -> LinearModel:
        """The discriminant for inputs that carry independent noise of this std (per coordinate)."""
        if self.count == 0:
            raise ValueError("no reports received yet")
        keep = self.coordinates()
        target = None if self.target is None else self.target[np.ix_(keep, keep)]
        weights, bias = _discriminant(
            self.class_sums[:, keep],
            self.class_counts,
            self.second_moment[np.ix_(keep, keep)],
            self.noise_variance[keep] / self.count,
            self.count,
            self.shrinkage,
            target,
            _per_coordinate(query_noise_std, self.dim)[keep],
        )
        full = np.zeros((self.dim, self.num_classes))
        full[keep] = weights
        return LinearModel(weights=full, bias=bias)


def _leading_signal_and_noise(cov: np.ndarray, gaps: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every m, D_m = sum_p g_p^T S_m^-1 g_p and N_m = sum_i w_i (S_m^-1)_ii over the leading m coordinates.

    One Cholesky factor L of S serves every leading block: L[:m, :m] factors S_m, and the
    leading block of M = L^-1 inverts it, so D_m and N_m are running sums over the rows of
    M g and of M^2 w (O(d^3) once, instead of a d x d inverse per m).
    """
    lower = np.linalg.cholesky(cov)
    inverse = np.linalg.inv(lower)  # lower triangular
    projected = inverse @ gaps.T  # (d, pairs): row k depends on the first k + 1 coordinates only
    return np.cumsum((projected**2).sum(axis=1)), np.cumsum(inverse**2 @ weights)


def _discriminant(
    class_sums: np.ndarray,
    class_counts: np.ndarray,
    second_moment: np.ndarray,
    noise_variance: np.ndarray,
    count: int,
    shrinkage: float,
    target: np.ndarray | None,
    query_noise_std: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Weights (d, classes) and bias of the noise-aware discriminant from sufficient statistics.

    ``noise_variance`` and ``query_noise_std`` are per coordinate (the noise is independent
    across coordinates).
    """
    counts = np.maximum(class_counts, 1e-9)
    means = class_sums / counts[:, None]
    priors = np.clip(counts / counts.sum(), 1e-6, None)
    within = _denoised_within(class_sums, class_counts, second_moment, noise_variance, count)
    report_cov = within + np.diag(noise_variance)
    cov = _shrunk(within, noise_variance, target, shrinkage, count) + np.diag(query_noise_std**2)
    weights = np.linalg.solve(cov, means.T)
    # mu_c' S^-1 mu_c from estimated means is biased up by tr(S^-1 Cov(mean_c)); under
    # heavy noise that bias, not the data, would pick the class, so it is removed.
    excess = np.trace(np.linalg.solve(cov, report_cov)) / np.maximum(counts, 1.0)
    bias = -0.5 * (np.einsum("kd,dk->k", means, weights) - excess) + np.log(priors)
    return weights, bias


def _shrunk(
    within: np.ndarray, noise_variance: np.ndarray, target: np.ndarray | None, shrinkage: float, count: int
) -> np.ndarray:
    """The denoised within-class covariance shrunk towards the target (a scaled identity if None)."""
    dim = within.shape[0]
    scale = max(np.trace(within) / dim, 1e-12)
    target = scale * np.eye(dim) if target is None else target
    report_cov = within + np.diag(noise_variance)
    weight = shrinkage if shrinkage >= 0 else _ledoit_wolf_weight(report_cov, within, target, count)
    cov = (1 - weight) * within + weight * target
    # A relative ridge of 1e-9 keeps cov invertible when a coordinate never varies in the
    # reports or the target (e.g. a bit encoding's constant high-order bits).
    return cov + 1e-9 * max(np.trace(cov) / dim, 1e-12) * np.eye(dim)


def _denoised_within(
    class_sums: np.ndarray, class_counts: np.ndarray, second_moment: np.ndarray, noise_variance: np.ndarray, count: int
) -> np.ndarray:
    """Pooled within-class covariance of the clean inputs: the reports' minus the noise, made PSD."""
    counts = np.maximum(class_counts, 1e-9)
    means = class_sums / counts[:, None]
    between = (means * counts[:, None]).T @ means
    return _positive_part((second_moment - between) / count - np.diag(noise_variance))


def class_means(x: np.ndarray, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Class means (num_classes, d) of clean labelled data (zero for a class without rows)."""
    x = np.asarray(x, dtype=np.float64)
    one_hot = soft_labels(y, len(x), num_classes)
    return (one_hot.T @ x) / np.maximum(one_hot.sum(axis=0), 1.0)[:, None]


def within_class_covariance(x: np.ndarray, y: np.ndarray, num_classes: int) -> np.ndarray:
    """Pooled within-class covariance of clean labelled data (e.g. the server's public data)."""
    x = np.asarray(x, dtype=np.float64)
    one_hot = soft_labels(y, len(x), num_classes)
    residuals = x - one_hot @ class_means(x, y, num_classes)
    return residuals.T @ residuals / max(len(x), 1)


def _ledoit_wolf_weight(report_cov: np.ndarray, within: np.ndarray, target: np.ndarray, count: int) -> float:
    """Shrinkage intensity: expected squared error of the estimate over its distance to the target.

    For Gaussian reports the sampling error of a covariance estimated from n reports has
    expected squared Frobenius norm (tr(S)^2 + ||S||_F^2) / n, S the reports' covariance.
    """
    error = (np.trace(report_cov) ** 2 + np.sum(report_cov**2)) / count
    distance = np.sum((within - target) ** 2)
    return float(np.clip(error / distance, 0.0, 1.0)) if distance > 0 else 1.0


def _per_coordinate(value: float | np.ndarray, dim: int) -> np.ndarray:
    """A number or a per-coordinate array as a finite, non-negative array of length ``dim``."""
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (dim,)) if np.ndim(value) == 0 else np.asarray(value, dtype=np.float64)
    if arr.shape != (dim,) or not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"noise std must be a non-negative number or {dim} non-negative numbers")
    return arr


def _positive_part(matrix: np.ndarray) -> np.ndarray:
    """Nearest positive semi-definite matrix (negative eigenvalues set to zero)."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.clip(values, 0, None)) @ vectors.T
