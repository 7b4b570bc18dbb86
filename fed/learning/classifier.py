"""The downstream classifier: noise-aware linear discriminant analysis.

The server sees reports x = clip(f(s)) + N(0, sigma^2 I) with known sigma, and labels that
are either public or passed through randomized response with a known transition matrix.
Class means are unbiased under the noise; the pooled covariance is not, so the known noise
variance is subtracted, and label noise is undone by inverting the transition matrix.
Reports of different noise (privacy tiers) are kept apart and combined by weights (inverse
variance by default), so that a noisy group adds to the model instead of diluting it.
Trained from sufficient statistics, so "everything received so far" costs O(d^2) memory
per noise group.
Hand-written because no library fits a discriminant from noisy sufficient statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ldpfed.fed.learning.report_sums import ReportSums, soft_labels


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

WEIGHTINGS = ("inverse-variance", "epsilon", "pooled")
"""How groups of reports with different noise are combined (see NoiseAwareLDA)."""


@dataclass
class _Group:
    """Sums of the reports that share one noise std (under epsilon weighting, also one epsilon).

    Class sums and counts are of the true labels: each batch's label channel is undone before
    it is added.
    """

    noise_variance: np.ndarray  # (d,) of one report
    epsilon: float | None
    class_sums: np.ndarray
    class_counts: np.ndarray
    second_moment: np.ndarray
    count: int = 0
    shift: np.ndarray | None = None
    """(classes, d): variance the group's class means carry beyond sampling and noise (the public
    data's domain shift, :meth:`NoiseAwareLDA.add_public`); None: none."""

    def restricted(self, keep: np.ndarray) -> "_Group":
        """The same sums on the coordinates ``keep`` (a boolean mask)."""
        return _Group(
            self.noise_variance[keep],
            self.epsilon,
            self.class_sums[:, keep],
            self.class_counts,
            self.second_moment[np.ix_(keep, keep)],
            self.count,
            None if self.shift is None else self.shift[:, keep],
        )

    def within(self) -> np.ndarray:
        """Within-class covariance of the clean inputs: the reports' minus the noise (not yet made PSD)."""
        counts = np.maximum(self.class_counts, 1e-9)
        means = self.class_sums / counts[:, None]
        between = (means * counts[:, None]).T @ means
        return (self.second_moment - between) / self.count - np.diag(self.noise_variance)


def _merged(groups: list[_Group]) -> _Group:
    """All groups as one, each report counting once (its noise variance the mean over reports)."""
    count = sum(g.count for g in groups)
    noise = sum(g.count * g.noise_variance for g in groups) / count
    sums = sum(g.class_sums for g in groups)
    return _Group(noise, None, sums, sum(g.class_counts for g in groups), sum(g.second_moment for g in groups), count)


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
    weighting:
        How groups of reports with different noise (e.g. privacy tiers) are combined; a group
        is the batches that share a noise std. ``inverse-variance``: a group's class sums count
        with weight 1 / (tau^2 + sigma_g^2) per coordinate, tau^2 the denoised within-class
        variance and sigma_g^2 the group's noise variance, and its noise-corrected within-class
        covariance with weight inverse to that estimate's expected squared error, so a noisy
        group adds information without adding error. ``epsilon``: each report weighted by its
        batch's epsilon (given to :meth:`add`). ``pooled``: each report counts once (groups
        weighted by size). With one group all three give the same discriminant.
    """

    def __init__(
        self,
        dim: int,
        num_classes: int,
        shrinkage: float = -1.0,
        target: np.ndarray | None = None,
        public_means: np.ndarray | None = None,
        screening: str = "auto",
        weighting: str = "inverse-variance",
    ) -> None:
        if shrinkage > 1:
            raise ValueError("shrinkage must be at most 1 (negative: automatic)")
        if screening not in SCREENING:
            raise ValueError(f"screening must be one of {SCREENING}, got {screening!r}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        self.dim, self.num_classes, self.shrinkage, self.screening = dim, num_classes, shrinkage, screening
        self.weighting = weighting
        if target is not None and np.shape(target) != (dim, dim):
            raise ValueError(f"target covariance must have shape ({dim}, {dim})")
        if public_means is not None and np.shape(public_means) != (num_classes, dim):
            raise ValueError(f"public class means must have shape ({num_classes}, {dim})")
        self.target, self.public_means = target, public_means
        self.groups: dict[tuple[bytes, float | None], _Group] = {}
        self._screening: tuple[np.ndarray, "_Estimate | None"] | None = None
        """:meth:`_screened` of the sums as they are (reset by :meth:`add`): screening costs an
        eigendecomposition and an inverse, and a round asks for the coordinates and one or more
        models of the same sums."""

    @property
    def count(self) -> int:
        """Reports added so far."""
        return sum(g.count for g in self.groups.values())

    @property
    def class_sums(self) -> np.ndarray:
        """Sum of the reports of each (true) class, over all groups."""
        return sum((g.class_sums for g in self.groups.values()), np.zeros((self.num_classes, self.dim)))

    @property
    def class_counts(self) -> np.ndarray:
        """Reports of each (true) class, over all groups."""
        return sum((g.class_counts for g in self.groups.values()), np.zeros(self.num_classes))

    def update(
        self,
        reports: np.ndarray,
        labels: np.ndarray,
        noise_std: float | np.ndarray,
        label_transition: np.ndarray | None = None,
        epsilon: float | None = None,
    ) -> None:
        """Add a batch of reports that share one noise scale and one label channel.

        ``noise_std`` is the noise's standard deviation: one number, or one per coordinate.

        ``labels`` are class ids, or soft labels of shape (n, num_classes) (e.g. mixup).
        ``label_transition[i, j]`` is P[reported label j | true label i]; None means the
        labels are exact. ``epsilon`` is the batch's per-release epsilon, needed by epsilon
        weighting only.
        """
        reports = np.asarray(reports, dtype=np.float64)
        if reports.ndim != 2 or reports.shape[1] != self.dim:
            raise ValueError(f"reports must have shape (n, {self.dim}), got {reports.shape}")
        self.add(ReportSums.of(reports, labels, self.num_classes), noise_std, label_transition, epsilon)

    def add(
        self,
        sums: ReportSums,
        noise_std: float | np.ndarray,
        label_transition: np.ndarray | None = None,
        epsilon: float | None = None,
    ) -> None:
        """Add the sums of a batch of reports that share one noise scale and one label channel (see :meth:`update`)."""
        sums.check(self.dim, self.num_classes)
        noise_variance = _per_coordinate(noise_std, self.dim) ** 2
        if self.weighting != "epsilon":
            epsilon = None
        elif epsilon is None or not 0 < epsilon < np.inf:
            raise ValueError(f"epsilon weighting needs each batch's epsilon, finite and positive; got {epsilon!r}")
        if sums.count == 0:
            return
        class_sums, counts = sums.class_sums, np.asarray(sums.label_counts, dtype=np.float64)
        if label_transition is not None:
            unmix = np.linalg.inv(np.asarray(label_transition, dtype=np.float64).T)
            class_sums, counts = unmix @ class_sums, unmix @ counts
        key = (noise_variance.tobytes(), None if epsilon is None else float(epsilon))
        group = self.groups.setdefault(
            key,
            _Group(noise_variance, key[1], np.zeros((self.num_classes, self.dim)), np.zeros(self.num_classes), np.zeros((self.dim, self.dim))),
        )
        group.class_sums += class_sums
        group.class_counts += counts
        group.second_moment += sums.second_moment
        group.count += int(sums.count)
        self._screening = None

    def add_public(self, x: np.ndarray, labels: np.ndarray, shift: np.ndarray) -> None:
        """Add the server's clean public records as one more group (inverse-variance weighting only).

        ``shift`` (classes, d) is the variance of the public class means' domain shift (see
        :func:`domain_shift`), added to their sampling variance when the groups' class means
        are weighted; the public covariance is weighted by its sampling error like any group's.
        """
        if self.weighting != "inverse-variance":
            raise ValueError(f"public data joins the reports under inverse-variance weighting only, not {self.weighting!r}")
        shift = np.asarray(shift, dtype=np.float64)
        if shift.shape != (self.num_classes, self.dim) or not np.isfinite(shift).all() or (shift < 0).any():
            raise ValueError(f"shift must be ({self.num_classes}, {self.dim}) finite non-negative variances")
        if any(g.shift is not None for g in self.groups.values()):
            raise ValueError("public data was already added")
        sums = ReportSums.of(np.asarray(x, dtype=np.float64), labels, self.num_classes)
        sums.check(self.dim, self.num_classes)
        self.groups[(b"public", None)] = _Group(
            np.zeros(self.dim), None, sums.class_sums, np.asarray(sums.label_counts, np.float64), sums.second_moment,
            int(sums.count), shift,
        )
        self._screening = None

    def means(self) -> np.ndarray:
        """Estimated class means (num_classes, dim) of the clean inputs, the groups combined by the weighting."""
        if self.count == 0:
            raise ValueError("no reports received yet")
        return self._estimate(np.ones(self.dim, dtype=bool)).means

    def fit(self) -> LinearModel:
        """The discriminant for clean inputs, from everything added so far."""
        return self.model_for(query_noise_std=0.0)

    def coordinates(self) -> np.ndarray:
        """Boolean mask of the coordinates the discriminant uses (see ``screening``)."""
        return self._screened()[0]

    def _screened(self) -> tuple[np.ndarray, "_Estimate | None"]:
        """:meth:`coordinates`, and the estimate on all coordinates where choosing them needed it
        (computed once per state of the sums)."""
        if self._screening is None:
            self._screening = self._screen()
        return self._screening

    def _screen(self) -> tuple[np.ndarray, "_Estimate | None"]:
        keep = np.ones(self.dim, dtype=bool)
        if self.public_means is None or self.screening == "off" or self.count == 0:
            return keep, None
        estimate = self._estimate(keep)
        mean_noise = estimate.mean_noise()  # (classes, d)
        pairs = [(a, b) for a in range(self.num_classes) for b in range(a + 1, self.num_classes)]
        gaps = np.array([self.public_means[a] - self.public_means[b] for a, b in pairs])  # (pairs, d)
        noise = np.array([mean_noise[a] + mean_noise[b] for a, b in pairs])  # (pairs, d)
        cov = _shrunk(estimate.within, estimate.error, self.target, self.shrinkage)

        own_signal = (gaps**2).sum(axis=0) / np.diag(cov)
        own_spread = noise.sum(axis=0) / np.diag(cov)
        order = np.argsort(-(own_signal**2 / (own_signal + own_spread + 1e-300)), kind="stable")
        try:
            d, n = _leading_signal_and_noise(cov[np.ix_(order, order)], gaps[:, order], noise[:, order].sum(axis=0))
        except np.linalg.LinAlgError:  # not positive definite: no Fisher ratio to screen by
            return keep, estimate
        if self.screening == "auto" and n[-1] <= d[-1]:  # all coordinates: noise does not dominate
            return keep, estimate
        ratios = np.where(d + n > 0, d * d / np.where(d + n > 0, d + n, 1.0), 0.0)
        keep = np.zeros(self.dim, dtype=bool)
        keep[order[: int(np.argmax(ratios)) + 1]] = True
        return keep, estimate

    def model_for(self, query_noise_std: float | np.ndarray) -> LinearModel:
        """The discriminant for inputs that carry independent noise of this std (per coordinate)."""
        if self.count == 0:
            raise ValueError("no reports received yet")
        keep, whole = self._screened()
        estimate = whole if whole is not None and keep.all() else self._estimate(keep)  # one estimate when all are kept
        target = None if self.target is None else self.target[np.ix_(keep, keep)]
        query = _per_coordinate(query_noise_std, self.dim)[keep]
        weights, bias = _discriminant(estimate, self.shrinkage, target, query)
        full = np.zeros((self.dim, self.num_classes))
        full[keep] = weights
        return LinearModel(weights=full, bias=bias)

    def _estimate(self, keep: np.ndarray) -> "_Estimate":
        """The groups combined by this weighting, on the coordinates ``keep``."""
        groups = [g.restricted(keep) for g in self.groups.values()]
        return _Estimate.of([_merged(groups)] if self.weighting == "pooled" else groups, self.weighting)


@dataclass(frozen=True)
class _Estimate:
    """Class means and within-class covariance of the clean inputs, combined over noise groups.

    Class c's mean on coordinate j is sum_g w[g, j] S[g, c, j] / sum_g w[g, j] n[g, c], the
    group means weighted by their shares w[g, j] n[g, c] / sum_h w[h, j] n[h, c], for report
    weights w. The shares sum to one, so the mean stays unbiased as long as w does not depend
    on the group means: epsilon weights are constants, and inverse-variance weights depend on
    the groups' within-class scatter only, which for Gaussian reports is independent of their
    class means. The covariance is sum_g cov_weights[g] * (group g's covariance corrected by
    its own noise), the weights summing to one: unbiased for constant weights, and for
    inverse-variance weights up to their correlation with the scatter, an O(1/n) bias like
    the 1/n (not 1/(n - classes)) normalisation every group already has.
    """

    means: np.ndarray  # (classes, m)
    counts: np.ndarray  # (classes,): over all groups
    within: np.ndarray  # (m, m), PSD
    error: float  # expected squared Frobenius error of ``within``
    shares: np.ndarray  # (groups, classes, m)
    group_counts: np.ndarray  # (groups, classes)
    noise: np.ndarray  # (groups, m): each group's noise variance of one report
    shift: np.ndarray | None = None  # (groups, classes, m): each group's class-mean shift variance, if any

    @classmethod
    def of(cls, groups: list[_Group], weighting: str) -> "_Estimate":
        """Combine ``groups`` with ``weighting``'s weights (one group: the group's own estimate)."""
        raw = np.array([g.within() for g in groups])
        noise = np.array([g.noise_variance for g in groups])
        reports = np.array([g.count for g in groups], dtype=np.float64)
        if weighting == "epsilon":
            epsilons = np.array([g.epsilon for g in groups])
            report_weights = np.broadcast_to((epsilons / epsilons.max())[:, None], noise.shape)
            cov_weights = epsilons * reports
            within = _positive_part(np.einsum("g,gij->ij", cov_weights / cov_weights.sum(), raw))
        elif weighting == "inverse-variance":
            # A covariance estimated from n reports of covariance R has expected squared error
            # e = (tr(R)^2 + ||R||_F^2) / n; groups weighted by 1/e minimise the combination's
            # error sum_g w_g^2 e_g, which is then below every group's own, so a noisy group
            # cannot make the covariance worse. R = within + noise_g needs the within-class
            # covariance: first taken as zero (the noise's weights), then as that estimate.
            # (A size-weighted pilot would carry the noisiest group's error into every weight.)
            # With one group both passes give the same weight (one), so one pass is that estimate.
            within = np.zeros_like(raw[0])
            for _ in range(2 if len(groups) > 1 else 1):
                cov_weights = _inverse_weights(np.array([_sampling_error(within, v, n) for v, n in zip(noise, reports)]))
                combined = np.einsum("g,gij->ij", cov_weights / cov_weights.sum(), raw)
                within = _positive_part(combined)
            # A group's class mean varies by (tau^2 + sigma_g^2) / n per coordinate. tau^2 is the
            # combination's own diagonal (unbiased, unlike the PSD part's, which the noise
            # inflates), clipped at zero where the noise hides the signal: the noise's weights.
            report_weights = _inverse_weights(np.clip(np.diag(combined), 0.0, None)[None, :] + noise)
        else:  # pooled: one merged group
            report_weights, cov_weights = np.ones_like(noise), np.ones(len(groups))
            within = _positive_part(raw[0])
        cov_weights = cov_weights / cov_weights.sum()
        group_counts = np.array([g.class_counts for g in groups])
        totals = np.maximum(np.einsum("gj,gc->cj", report_weights, group_counts), 1e-9)
        means = np.einsum("gj,gcj->cj", report_weights, np.array([g.class_sums for g in groups])) / totals
        # Shares from counts of at least 1e-9, so that a class a group lacks (or, after label
        # unmixing, has fewer than none of) takes none of the mean's variance.
        weighted = report_weights[:, None, :] * np.maximum(group_counts, 1e-9)[:, :, None]
        shift = None
        if weighting == "inverse-variance" and any(g.shift is not None for g in groups):
            # A group's class mean varies by (tau^2 + sigma_g^2) / n_gc + shift_gc: weighted by its inverse.
            shift = np.array([np.zeros_like(g.class_sums) if g.shift is None else g.shift for g in groups])
            sizes = np.maximum(group_counts, 1e-9)[:, :, None]
            tau2 = np.clip(np.diag(combined), 0.0, None)
            weighted = 1.0 / np.maximum((tau2[None, None, :] + noise[:, None, :]) / sizes + shift, 1e-300)
            group_means = np.array([g.class_sums for g in groups]) / sizes
            means = np.einsum("gcj,gcj->cj", weighted / weighted.sum(axis=0), group_means)
        shares = weighted / weighted.sum(axis=0)
        error = sum(w * w * _sampling_error(within, v, n) for w, v, n in zip(cov_weights, noise, reports))
        return cls(means, group_counts.sum(axis=0), within, float(error), shares, group_counts, noise, shift)

    def mean_noise(self) -> np.ndarray:
        """Per class and coordinate, the variance the report noise (and any domain shift) adds to the class mean."""
        noise = np.einsum("gcj,gj->cj", self.shares**2 / self._sizes()[:, :, None], self.noise)
        return noise if self.shift is None else noise + np.einsum("gcj,gcj->cj", self.shares**2, self.shift)

    def mean_variance(self) -> np.ndarray:
        """Per class and coordinate, the variance of the estimated class mean (sampling, noise and shift)."""
        sampling = np.einsum("gcj,j->cj", self.shares**2 / self._sizes()[:, :, None], np.diag(self.within))
        return sampling + self.mean_noise()

    def mean_spread(self, cov: np.ndarray) -> np.ndarray:
        """Per class, tr(cov^-1 Cov(class mean)), Cov(class mean) = sum_g (s s^T) o (within + noise_g) / n_g."""
        sizes, spread = self._sizes(), np.zeros(len(self.means))
        for shares, noise, n in zip(self.shares, self.noise, sizes):
            scaled = shares[:, :, None] * (self.within + np.diag(noise))[None]  # diag(s) R_g per class
            spread += np.einsum("cj,cjj->c", shares, np.linalg.solve(cov, scaled)) / n
        if self.shift is not None:
            extra = np.einsum("gcj,gcj->cj", self.shares**2, self.shift)
            spread += np.einsum("cj,jj->c", extra, np.linalg.inv(cov))
        return spread

    def _sizes(self) -> np.ndarray:
        """Reports per group and class, at least one."""
        return np.maximum(self.group_counts, 1.0)


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
    estimate: _Estimate, shrinkage: float, target: np.ndarray | None, query_noise_std: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weights (d, classes) and bias of the noise-aware discriminant from the combined estimate.

    ``query_noise_std`` is per coordinate (the noise is independent across coordinates).
    """
    counts = np.maximum(estimate.counts, 1e-9)
    priors = np.clip(counts / counts.sum(), 1e-6, None)
    cov = _shrunk(estimate.within, estimate.error, target, shrinkage) + np.diag(query_noise_std**2)
    weights = np.linalg.solve(cov, estimate.means.T)
    # mu_c' S^-1 mu_c from estimated means is biased up by tr(S^-1 Cov(mean_c)); under
    # heavy noise that bias, not the data, would pick the class, so it is removed.
    excess = estimate.mean_spread(cov)
    bias = -0.5 * (np.einsum("kd,dk->k", estimate.means, weights) - excess) + np.log(priors)
    return weights, bias


def _shrunk(within: np.ndarray, error: float, target: np.ndarray | None, shrinkage: float) -> np.ndarray:
    """The denoised within-class covariance shrunk towards the target (a scaled identity if None).

    ``error`` is the expected squared Frobenius error of ``within`` (automatic shrinkage).
    """
    dim = within.shape[0]
    scale = max(np.trace(within) / dim, 1e-12)
    target = scale * np.eye(dim) if target is None else target
    weight = shrinkage if shrinkage >= 0 else _ledoit_wolf_weight(error, within, target)
    cov = (1 - weight) * within + weight * target
    # A relative ridge of 1e-9 keeps cov invertible when a coordinate never varies in the
    # reports or the target (e.g. a bit encoding's constant high-order bits).
    return cov + 1e-9 * max(np.trace(cov) / dim, 1e-12) * np.eye(dim)


def domain_shift(lda: NoiseAwareLDA, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Variance of the public class means' domain shift, per class, for :meth:`NoiseAwareLDA.add_public`.

    The squared gap between the public class mean (clean rows ``x``, labels ``y``) and the one the
    reports in ``lda`` estimate, less the variance both estimates have by sampling and noise,
    averaged over coordinates (one coordinate's gap is too noisy to weight by), at least zero; the
    same value on every coordinate of the class: (classes, d).
    """
    if any(g.shift is not None for g in lda.groups.values()):
        raise ValueError("the shift is measured against the reports alone, before public data is added")
    x = np.asarray(x, dtype=np.float64)
    estimate = lda._estimate(np.ones(lda.dim, dtype=bool))
    public = class_means(x, y, lda.num_classes)
    counts = np.maximum(soft_labels(y, len(x), lda.num_classes).sum(axis=0), 1.0)
    spread = np.diag(within_class_covariance(x, y, lda.num_classes))[None, :] / counts[:, None]
    excess = (public - estimate.means) ** 2 - estimate.mean_variance() - spread
    return np.repeat(np.clip(excess.mean(axis=1, keepdims=True), 0.0, None), lda.dim, axis=1)


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


def _ledoit_wolf_weight(error: float, within: np.ndarray, target: np.ndarray) -> float:
    """Shrinkage intensity: expected squared error of the estimate over its distance to the target."""
    distance = np.sum((within - target) ** 2)
    return float(np.clip(error / distance, 0.0, 1.0)) if distance > 0 else 1.0


def _sampling_error(within: np.ndarray, noise_variance: np.ndarray, count: float) -> float:
    """Expected squared Frobenius error of a covariance estimated from ``count`` reports.

    For Gaussian reports of covariance S (here within + the noise) it is (tr(S)^2 + ||S||_F^2) / n.
    """
    reports = within + np.diag(noise_variance)
    return float((np.trace(reports) ** 2 + np.sum(reports**2)) / count)


def _inverse_weights(values: np.ndarray) -> np.ndarray:
    """Weights proportional to 1 / values along the first axis, the largest 1 (zeros share all the weight)."""
    zero = values <= 0
    inverse = np.where(zero.any(axis=0), zero.astype(np.float64), 1 / np.where(zero, 1.0, values))
    return inverse / inverse.max(axis=0)


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
