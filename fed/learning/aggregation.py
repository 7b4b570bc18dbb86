"""Server side: turn received reports into the downstream classifier."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpfed.fed.learning.classifier import LinearModel, NoiseAwareLDA, domain_shift
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.validators import check_delta
from ldpfed.fed.randomizers import Randomizer, make_randomizer
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.learning.server_classifier import ServerClassifier


class ReportAggregator(ServerClassifier):
    """The noise-aware discriminant (``--classifier lda``, the default): everything received so far,
    summarised as its sufficient statistics.

    Parameters
    ----------
    dim, num_classes:
        Dimension of decoded reports and number of classes.
    shrinkage:
        Covariance shrinkage of the noise-aware discriminant.
    target:
        Covariance to shrink towards (the public data's within-class covariance), or None.
    public_means, screening:
        The public data's class means and how they screen coordinates (see NoiseAwareLDA).
    weighting:
        How batches of different noise (privacy tiers) are combined (see NoiseAwareLDA).
    delta:
        The delta at which a batch's epsilon is stated, for ``epsilon`` weighting.
    """

    needs_reports = False

    def __init__(
        self,
        dim: int,
        num_classes: int,
        shrinkage: float,
        target: np.ndarray | None = None,
        public_means: np.ndarray | None = None,
        screening: str = "auto",
        weighting: str = "inverse-variance",
        delta: float = 1e-5,
    ) -> None:
        check_delta(delta)
        self.lda = NoiseAwareLDA(dim, num_classes, shrinkage, target, public_means, screening, weighting)
        self.delta = delta
        self.reports = 0
        self._fitted: tuple[int, LinearModel] | None = None

    def add(
        self,
        reports: np.ndarray,
        labels: np.ndarray,
        randomizer_params: Mapping[str, Any],
        label_transition: np.ndarray | None,
    ) -> None:
        """Decode one batch of reports made by one randomizer and add it."""
        randomizer = make_randomizer(randomizer_params)
        estimates, noise_variance = randomizer.decode(reports)
        self.lda.update(estimates, labels, np.sqrt(noise_variance), label_transition, self._epsilon(randomizer))
        self.reports += len(reports)

    def add_sums(
        self, sums: ReportSums, randomizer_params: Mapping[str, Any], label_transition: np.ndarray | None
    ) -> None:
        """Add a node's sums of decoded reports made by one randomizer (a summarised reply)."""
        randomizer = make_randomizer(randomizer_params)
        _, noise_variance = randomizer.decode(np.zeros((0, self.lda.dim)))
        self.lda.add(sums, np.sqrt(noise_variance), label_transition, self._epsilon(randomizer))
        self.reports += int(sums.count)

    def _epsilon(self, randomizer: Randomizer) -> float | None:
        """Epsilon of one release by ``randomizer`` at this delta, where the weighting needs it."""
        return compose_epsilon({randomizer.event: 1}, self.delta) if self.lda.weighting == "epsilon" else None

    def model(self) -> LinearModel:
        """The classifier for clean inputs (local inference), refitted only after new reports."""
        if self._fitted is None or self._fitted[0] != self.reports:
            self._fitted = (self.reports, self.lda.fit())
        return self._fitted[1]

    def model_for_reports(self, randomizer_params: Mapping[str, Any], answers: int = 1) -> LinearModel:
        """The classifier for noisy query reports made by this randomizer (remote inference).

        With ``answers`` > 1 (up-sampling: a user averages the scores of at least k answers to
        one query), the model is the one for the mean of k reports, whose noise variance is
        1/k of one report's: averaging the scores of a linear model is scoring the mean.
        """
        _, noise_variance = make_randomizer(randomizer_params).decode(np.zeros((0, self.lda.dim)))
        return self.lda.model_for(np.sqrt(np.asarray(noise_variance) / max(int(answers), 1)))


    def with_public(self, x: np.ndarray, labels: np.ndarray) -> LinearModel:
        """The classifier for clean inputs with the server's clean public records ``x`` (features) and ``labels``
        added as one more group (:meth:`NoiseAwareLDA.add_public`, their domain shift measured against the reports
        alone, :func:`domain_shift`); the reports' own classifier is left as it is."""
        lda = copy.deepcopy(self.lda)
        lda.add_public(x, labels, domain_shift(lda, x, labels))
        return lda.fit()

    def round_metrics(self) -> dict[str, Any]:
        """How many coordinates the discriminant uses (``classifier_coordinates``)."""
        return {"classifier_coordinates": int(self.lda.coordinates().sum())}


def fit_clean(x: np.ndarray, y: np.ndarray, num_classes: int, shrinkage: float) -> LinearModel:
    """The same discriminant trained on clean inputs (public-only and non-private baselines)."""
    lda = NoiseAwareLDA(x.shape[1], num_classes, shrinkage)
    lda.update(x, y, 0.0)
    return lda.fit()
