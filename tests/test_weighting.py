"""Privacy tiers: reports of different noise weighted so that a noisy tier never hurts the model."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.classifier import NoiseAwareLDA, class_means, within_class_covariance
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import RandomizedResponse
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.simulations.experiments.weighting_study import SKEWED, accuracy, evaluation_set, tiers


def test_adding_the_noisiest_tier_never_lowers_accuracy_under_inverse_variance_weighting() -> None:
    # 40,000 reports at epsilon 1, 4,000 each at epsilon 3 and 8 (simulations/experiments/weighting_study.py).
    test = evaluation_set()
    gains: dict[str, list[float]] = {"inverse-variance": [], "pooled": []}
    for seed in range(20):
        data = tiers(seed, SKEWED)
        for weighting, gain in gains.items():
            gain.append(accuracy(data, (0, 1, 2), weighting, test) - accuracy(data, (1, 2), weighting, test))
    weighted, pooled = np.array(gains["inverse-variance"]), np.array(gains["pooled"])
    assert weighted.mean() > 0 and weighted.min() > -0.005, weighted
    # Counting every report once, the same tier costs accuracy: the comparison has teeth.
    assert pooled.mean() < -0.01 and pooled.min() < -0.05, pooled


def test_one_noise_group_gives_the_same_model_under_every_weighting() -> None:
    rng = np.random.default_rng(0)
    randomizer, channel = GaussianRandomizer(1.0, 0.8), RandomizedResponse(epsilon=2.0, num_values=3)
    means = rng.normal(0, 0.3, (3, 6))
    y = rng.integers(0, 3, 5_500)
    x = means[y] + rng.normal(0, 0.2, (5_500, 6))
    public, reports, labels = slice(0, 500), randomizer.release(x[500:], rng), channel.release(y[500:], rng)
    target, public_means = within_class_covariance(x[public], y[public], 3), class_means(x[public], y[public], 3)
    models = []
    for weighting in ("inverse-variance", "epsilon", "pooled"):
        aggregator = ReportAggregator(6, 3, -1.0, target, public_means, "on", weighting)
        aggregator.add(reports[:3_000], labels[:3_000], randomizer.params(), channel.transition_matrix())
        sums = ReportSums.of(reports[3_000:], labels[3_000:], 3)
        aggregator.add_sums(sums, randomizer.params(), channel.transition_matrix())
        assert len(aggregator.lda.groups) == 1
        models += [aggregator.model(), aggregator.model_for_reports(randomizer.params(), answers=3)]
    for got, want in zip(models[2:], models[:2] * 2):
        np.testing.assert_allclose(got.weights, want.weights, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.bias, want.bias, rtol=1e-9, atol=1e-12)


def test_inverse_variance_class_means_are_unbiased_and_steadier_than_pooled_ones() -> None:
    rng = np.random.default_rng(3)
    truth = np.array([[0.5, -1.0, 0.0, 2.0], [-0.5, 0.0, 1.0, 2.5]])
    signal = np.array([0.5, 1.0, 2.0, 0.2])  # within-class std per coordinate
    estimates: dict[str, list[np.ndarray]] = {"inverse-variance": [], "pooled": []}
    for _ in range(300):
        ldas = {weighting: NoiseAwareLDA(4, 2, weighting=weighting) for weighting in estimates}
        for sigma in (4.0, 1.5, 0.5):
            y = rng.integers(0, 2, 100)
            reports = truth[y] + rng.normal(size=(100, 4)) * signal + rng.normal(0, sigma, (100, 4))
            for lda in ldas.values():
                lda.update(reports, y, sigma)
        for weighting, lda in ldas.items():
            estimates[weighting].append(lda.means())
    weighted, pooled = np.array(estimates["inverse-variance"]), np.array(estimates["pooled"])
    standard_error = weighted.std(axis=0) / np.sqrt(len(weighted))
    assert np.all(np.abs(weighted.mean(axis=0) - truth) < 4 * standard_error)
    assert weighted.var(axis=0).sum() < 0.5 * pooled.var(axis=0).sum()


def test_unknown_weightings_bad_delta_and_missing_epsilons_are_refused() -> None:
    with pytest.raises(ValueError, match=r"weighting must be one of \('inverse-variance', 'epsilon', 'pooled'\)"):
        NoiseAwareLDA(4, 2, weighting="size")
    with pytest.raises(ValueError, match="weighting must be one of"):
        ReportAggregator(4, 2, -1.0, weighting="inverse_variance")
    with pytest.raises(ValueError, match="delta"):
        ReportAggregator(4, 2, -1.0, weighting="epsilon", delta=0.0)
    lda = NoiseAwareLDA(4, 2, weighting="epsilon")
    for epsilon in (None, 0.0, np.inf):
        with pytest.raises(ValueError, match="epsilon weighting needs"):
            lda.update(np.zeros((2, 4)), np.array([0, 1]), 1.0, epsilon=epsilon)
    assert lda.count == 0
