"""The noise-aware discriminant: it must learn from reports a naive fit cannot use."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfed.fed.learning.classifier import NoiseAwareLDA, class_means, within_class_covariance
from ldpfed.fed.randomizers.labels import RandomizedResponse


def _data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two classes whose means differ most along a high-variance direction, while only a
    low-variance one separates them well: the covariance, not the mean gap, finds it."""
    y = rng.integers(0, 2, n)
    scales = np.array([0.05] + [0.6] * 7)
    x = rng.normal(size=(n, 8)) * scales
    x[:, 0] += np.where(y == 1, 0.15, -0.15)
    x[:, 1] += np.where(y == 1, 0.3, -0.3)
    return x, y


def test_noise_aware_fit_recovers_the_clean_discriminant() -> None:
    rng = np.random.default_rng(0)
    x, y = _data(60_000, rng)
    test_x, test_y = _data(4000, rng)
    sigma = 1.0
    reports = x + rng.normal(0, sigma, x.shape)
    aware = NoiseAwareLDA(8, 2, shrinkage=0.0)
    aware.update(reports, y, sigma)
    naive = NoiseAwareLDA(8, 2, shrinkage=0.0)
    naive.update(reports, y, 0.0)  # ignores the known noise
    clean = NoiseAwareLDA(8, 2, shrinkage=0.0)
    clean.update(x, y, 0.0)
    acc = {name: (m.fit().predict(test_x) == test_y).mean() for name, m in
           (("aware", aware), ("naive", naive), ("clean", clean))}
    assert acc["clean"] > 0.95
    assert acc["aware"] > acc["naive"] + 0.1
    assert acc["aware"] > 0.9


def test_randomized_response_labels_are_unmixed() -> None:
    rng = np.random.default_rng(1)
    x, y = _data(60_000, rng)
    rr = RandomizedResponse(epsilon=0.5, num_values=2)
    noisy = rr.release(y, rng)
    lda = NoiseAwareLDA(8, 2, shrinkage=0.0)
    lda.update(x, noisy, 0.0, rr.transition_matrix())
    true_means = np.stack([x[y == c].mean(0) for c in (0, 1)])
    np.testing.assert_allclose(lda.class_sums[:, 0] / lda.class_counts, true_means[:, 0], atol=0.01)


def test_heavy_noise_does_not_hand_every_query_to_one_class() -> None:
    # With equal true class means the intercepts must not separate the classes by the
    # different noise in their estimated means.
    rng = np.random.default_rng(2)
    n0, n1, sigma = 20_000, 5_000, 30.0
    reports = rng.normal(0, sigma, (n0 + n1, 16))
    y = np.r_[np.zeros(n0, int), np.ones(n1, int)]
    lda = NoiseAwareLDA(16, 2, shrinkage=1.0)
    lda.update(reports, y, sigma)
    model = lda.fit()
    expected_gap = np.log(n0 / n1)
    gaps = []
    for _ in range(20):
        lda_rep = NoiseAwareLDA(16, 2, shrinkage=1.0)
        lda_rep.update(rng.normal(0, sigma, (n0 + n1, 16)), y, sigma)
        m = lda_rep.fit()
        gaps.append(m.bias[0] - m.bias[1])
    assert np.mean(gaps) == pytest.approx(expected_gap, abs=0.5)
    assert model.weights.shape == (16, 2)


def test_within_class_covariance_and_target_validation() -> None:
    rng = np.random.default_rng(3)
    x, y = _data(20_000, rng)
    cov = within_class_covariance(x, y, 2)
    assert cov[0, 0] == pytest.approx(0.05**2, rel=0.05)
    assert cov[1, 1] == pytest.approx(0.36, rel=0.05)
    with pytest.raises(ValueError, match="target covariance"):
        NoiseAwareLDA(8, 2, target=np.eye(3))
    with pytest.raises(ValueError, match="labels"):
        NoiseAwareLDA(8, 2).update(x[:5], np.array([0, 1, 2, 0, 1]), 0.0)
    with pytest.raises(ValueError, match="NaN"):
        NoiseAwareLDA(8, 2).update(np.full((2, 8), np.nan), np.array([0, 1]), 0.0)


def _bit_like(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two informative 0/1 coordinates and 158 nearly constant ones, as in a fixed-point bit code."""
    y = rng.integers(0, 2, n)
    x = (rng.random((n, 160)) < 0.002).astype(float)
    x[:, :2] = rng.random((n, 2)) < np.where(y == 1, 0.8, 0.2)[:, None]
    return x, y


def test_public_screening_rescues_noise_dominated_reports_and_leaves_the_rest_alone() -> None:
    rng = np.random.default_rng(4)
    x, y = _bit_like(40_000, rng)
    public_x, public_y = _bit_like(2000, rng)
    test_x, test_y = _bit_like(4000, rng)
    means = class_means(public_x, public_y, 2)
    target = within_class_covariance(public_x, public_y, 2)
    sigma = 20.0  # per-coordinate noise of e.g. SUE at epsilon 8 over 160 bits
    reports = x + rng.normal(0, sigma, x.shape)
    acc, used = {}, {}
    for mode in ("off", "auto", "on"):
        lda = NoiseAwareLDA(160, 2, target=target, public_means=means, screening=mode)
        lda.update(reports, y, sigma)
        acc[mode], used[mode] = (lda.fit().predict(test_x) == test_y).mean(), int(lda.coordinates().sum())
    assert used == {"off": 160, "auto": 2, "on": 2}
    assert acc["auto"] > 0.75 and acc["auto"] > acc["off"] + 0.1
    assert lda.fit().weights[2:].any() == False  # noqa: E712  screened coordinates get zero weight
    quiet = NoiseAwareLDA(160, 2, target=target, public_means=means, screening="auto")
    quiet.update(x + rng.normal(0, 0.01, x.shape), y, 0.01)  # noise far below the signal: no screening
    assert quiet.coordinates().all()
    with pytest.raises(ValueError, match="screening"):
        NoiseAwareLDA(160, 2, screening="sometimes")
    with pytest.raises(ValueError, match="public class means"):
        NoiseAwareLDA(160, 2, public_means=np.zeros((2, 3)))


def test_screening_ratios_from_one_cholesky_match_an_inverse_per_leading_block() -> None:
    from ldpfed.fed.learning.classifier import _leading_signal_and_noise

    rng = np.random.default_rng(0)
    d = 40
    a = rng.normal(size=(d, d))
    cov, gaps, weights = a @ a.T / d + 0.1 * np.eye(d), rng.normal(size=(3, d)), rng.random(d)
    signal, noise = _leading_signal_and_noise(cov, gaps, weights)
    for m in (1, 7, d):
        inverse = np.linalg.inv(cov[:m, :m])
        assert signal[m - 1] == pytest.approx(np.einsum("pi,ij,pj->", gaps[:, :m], inverse, gaps[:, :m]), rel=1e-10)
        assert noise[m - 1] == pytest.approx(weights[:m] @ np.diag(inverse), rel=1e-10)


def test_screening_is_redone_when_reports_arrive() -> None:
    """The coordinates and estimate a round screens once are not reused after more sums arrive."""
    rng = np.random.default_rng(5)
    x, y = _bit_like(8000, rng)
    public_x, public_y = _bit_like(2000, rng)
    means, target = class_means(public_x, public_y, 2), within_class_covariance(public_x, public_y, 2)
    quiet, noisy = x[:4000] + rng.normal(0, 0.01, (4000, 160)), x[4000:] + rng.normal(0, 20.0, (4000, 160))
    stepwise = NoiseAwareLDA(160, 2, target=target, public_means=means)
    at_once = NoiseAwareLDA(160, 2, target=target, public_means=means)
    stepwise.update(quiet, y[:4000], 0.01)
    before = stepwise.fit()
    assert stepwise.coordinates().all()
    for lda in (stepwise, at_once):
        lda.update(noisy, y[4000:], 20.0)
    at_once.update(quiet, y[:4000], 0.01)
    assert np.array_equal(stepwise.coordinates(), at_once.coordinates())
    assert np.allclose(stepwise.fit().weights, at_once.fit().weights, rtol=1e-9, atol=1e-12)
    assert not np.allclose(stepwise.fit().weights, before.weights)
