"""The denoised class statistics of mixed reports (seed 002's instance encoding): fed.learning.mixed_reports."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfed.fed.learning.classifier import NoiseAwareLDA
from ldpfed.fed.learning.mixed_reports import add_mixed, mixing_transition
from ldpfed.fed.randomizers.instance_encoding import DPInstanceEncodingGaussian, Mixup

DIM, SIGMA = 4, 0.5
MEANS = np.array([[1.0, 0.0, 0.0, 0.0], [-1.0, 0.5, 0.0, 0.0]])
WITHIN = np.diag([0.3, 0.2, 0.1, 0.05])


def _reports(n: int = 40_000) -> tuple[np.ndarray, np.ndarray, DPInstanceEncodingGaussian]:
    rng = np.random.default_rng(3)
    labels = rng.integers(2, size=n)
    x = MEANS[labels] + rng.normal(size=(n, DIM)) * np.sqrt(np.diag(WITHIN))
    randomizer = DPInstanceEncodingGaussian(k=4, max_coefficient=1.0, masks=0, clip=100.0, sigma=SIGMA)
    reports, soft = randomizer.release_with_labels(x, labels, 2, rng)
    return reports, soft, randomizer


def test_square_share_is_the_mean_sum_of_squared_coefficients() -> None:
    for k, cmax in [(4, 1.0), (4, 0.5), (2, 0.75)]:
        mixup = Mixup(k, cmax, 0)
        drawn = (mixup.coefficients((50_000,), np.random.default_rng(0)) ** 2).sum(axis=1).mean()
        assert mixup.square_share() == pytest.approx(drawn, abs=3e-3)


def test_mixing_transition_is_a_label_channel() -> None:
    soft = np.random.default_rng(0).dirichlet(np.ones(3), size=50)
    np.testing.assert_allclose(mixing_transition(soft).sum(axis=1), 1.0)


def test_denoised_means_and_covariance_are_unbiased_where_the_plain_ones_are_not() -> None:
    reports, soft, randomizer = _reports()
    mixed = NoiseAwareLDA(DIM, 2, shrinkage=0.0, screening="off")
    add_mixed(mixed, reports, soft, SIGMA, randomizer.mixup.square_share())
    np.testing.assert_allclose(mixed.means(), MEANS, atol=0.05)
    within = mixed._estimate(np.ones(DIM, dtype=bool)).within
    np.testing.assert_allclose(within, WITHIN, atol=0.03)
    # Without the denoising (soft labels averaged, the noise only subtracted): means drawn together,
    # covariance off by the mixing.
    plain = NoiseAwareLDA(DIM, 2, shrinkage=0.0, screening="off")
    plain.update(reports, soft, SIGMA)
    assert np.abs(plain.means() - MEANS).max() > 0.3
    assert np.abs(plain._estimate(np.ones(DIM, dtype=bool)).within - WITHIN).max() > 0.1
