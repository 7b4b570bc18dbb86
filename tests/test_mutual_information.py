"""kNN mutual information (seed 003 eq. 13): matches closed forms in low dimension and falls as
the noise grows; only additive-noise randomizers are measured."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from ldpfed.fed.attacks.mutual_information import (
    gaussian_mutual_information,
    knn_entropy,
    knn_mutual_information,
    randomizer_mutual_information,
)
from ldpfed.fed.randomizers import make_randomizer

N = 2000


def _mean_estimate(draw_x, dim: int, noise_std: float, seeds: int = 4) -> float:
    """Average of the estimate over ``seeds`` independent samples of N (the estimator is noisy)."""
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        x = draw_x(rng, (N, dim))
        out.append(knn_mutual_information(x + rng.normal(0, noise_std, (N, dim)), rng.normal(0, noise_std, (N, dim))))
    return float(np.mean(out))


def test_entropy_of_a_gaussian_matches_its_closed_form() -> None:
    x = np.random.default_rng(0).normal(0, 2.0, (N, 3))
    assert knn_entropy(x) == pytest.approx(1.5 * np.log(2 * np.pi * np.e * 4.0), abs=0.1)  # 6.34 nats; KL runs ~0.04 low
    assert knn_entropy(3.0 * x) == pytest.approx(knn_entropy(x) + 3 * np.log(3.0))  # h(aX) = h(X) + d log a, exactly


@pytest.mark.parametrize("dim", [2, 4, 8])
@pytest.mark.parametrize("noise_std", [0.5, 1.0, 3.0])
def test_gaussian_signal_and_noise_match_the_closed_form(dim: int, noise_std: float) -> None:
    true = gaussian_mutual_information(dim, 1.0, noise_std)  # d/2 log(1 + 1/t^2): 0.1 .. 6.4 nats
    estimate = _mean_estimate(lambda rng, shape: rng.normal(0, 1.0, shape), dim, noise_std)
    assert estimate == pytest.approx(true, abs=0.1 + 0.03 * true)


def test_binary_signal_matches_numerical_integration() -> None:
    """X uniform on {-a, a}^d (not Gaussian, so the two entropies' biases need not cancel)."""
    a, t, dim = 1.0, 1.0, 2
    grid = np.linspace(-a - 12 * t, a + 12 * t, 200_001)
    density = 0.5 * (norm.pdf(grid, -a, t) + norm.pdf(grid, a, t))
    mixture_entropy = -np.trapezoid(density * np.log(density), grid)
    true = dim * (mixture_entropy - 0.5 * np.log(2 * np.pi * np.e * t**2))  # coordinates independent
    estimate = _mean_estimate(lambda rng, shape: rng.choice([-a, a], shape), dim, t, seeds=3)
    assert 0.6 < true < 0.75 and estimate == pytest.approx(true, abs=0.08)


def test_randomizer_estimate_falls_as_noise_grows_and_matches_the_closed_form() -> None:
    x = np.random.default_rng(1).normal(0, 1.0, (N, 4))
    estimates = []
    for sigma in (0.3, 1.0, 3.0):
        randomizer = make_randomizer({"mechanism": "gaussian", "clip": 100.0, "sigma": sigma})  # clip far out: no effect
        estimates.append(randomizer_mutual_information(x, randomizer, np.random.default_rng(2)))
        assert estimates[-1] == pytest.approx(gaussian_mutual_information(4, 1.0, sigma), abs=0.15 + 0.03 * estimates[-1])
    assert estimates[0] > estimates[1] + 2 > estimates[2] + 3
    dchi = [
        randomizer_mutual_information(x, make_randomizer({"mechanism": "dchi", "clip": 2.0, "eta": eta}), np.random.default_rng(3))
        for eta in (20.0, 5.0, 1.0)
    ]
    assert dchi[0] > dchi[1] > dchi[2] and dchi[2] < 0.1 * dchi[0]  # noise norm ~4 / eta against inputs of norm <= 2


def test_non_additive_randomizers_and_bad_samples_are_refused() -> None:
    x = np.random.default_rng(0).normal(size=(50, 4))
    post_clipped = make_randomizer({"mechanism": "dchi", "clip": 1.0, "eta": 5.0, "post_clip": 1.0})
    assert not post_clipped.additive and make_randomizer({"mechanism": "laplace", "clip": 1.0, "scale": 1.0}).additive
    with pytest.raises(ValueError, match="additive-noise randomizers only"):
        randomizer_mutual_information(x, post_clipped, np.random.default_rng(0))
    with pytest.raises(ValueError, match="duplicates"):
        knn_entropy(np.vstack([x, x, x, x]))
    with pytest.raises(ValueError, match="more than k=3 samples"):
        knn_entropy(x[:3])
    with pytest.raises(ValueError, match="dimensions"):
        knn_mutual_information(x, x[:, :3])
