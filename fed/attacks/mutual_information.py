"""Mutual information between clean and released vectors (seed 003 section 4.3.1, eq. 13, appendix A.6).

For a report X~ = X + Z with noise Z independent of the (clipped) input X,
I(X; X~) = h(X~) - h(Z), and each differential entropy is estimated from nearest-neighbour
distances (Kozachenko and Leonenko):

    h^(S) = psi(N) - psi(k) + log c_d + (d / N) sum_i log eps_i,

eps_i the L2 distance from sample i to its k-th nearest other sample, c_d the volume of the
unit L2 ball in R^d. With the same N and k for both samples the first three terms cancel
and the difference is seed 003's eq. 13, (d/N) sum log eps_X~ - (d/N) sum log eps_Z; the
full form here also allows different sample sizes. All figures are in nats.

Caveat: the estimator converges slowly and is biased in high dimension (d of tens or more,
e.g. 384 for MiniLM vectors, needs far more samples than one has). The biases of the two
entropies cancel only when X~ and Z have the same shape up to scale (Gaussian X and Gaussian
noise, as in :func:`gaussian_mutual_information`); for embeddings, read the figure as a
relative measure across noise levels of one setting, not as an absolute number of nats.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree
from scipy.special import digamma, gammaln

from ldpfed.fed.randomizers import Randomizer
from ldpfed.fed.randomizers.base import check_finite_matrix


def knn_entropy(samples: np.ndarray, k: int = 3) -> float:
    """Kozachenko-Leonenko estimate of the differential entropy (nats) of the rows of ``samples`` (N, d)."""
    x = check_finite_matrix(samples)
    n, d = x.shape
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if n <= k:
        raise ValueError(f"need more than k={k} samples, got {n}")
    distances, _ = cKDTree(x).query(x, k=int(k) + 1)  # the first neighbour is the sample itself
    eps = distances[:, int(k)]
    if np.any(eps <= 0):
        raise ValueError(
            f"{int((eps <= 0).sum())} samples have k={k} or more exact duplicates: a continuous sample "
            "has none (was noise added?)"
        )
    log_unit_ball = (d / 2) * math.log(math.pi) - gammaln(d / 2 + 1)
    return float(digamma(n) - digamma(k) + log_unit_ball + d * np.mean(np.log(eps)))


def knn_mutual_information(noisy: np.ndarray, noise: np.ndarray, k: int = 3) -> float:
    """I(X; X + Z) = h(X + Z) - h(Z) for Z independent of X, from samples of X + Z and of Z (nats)."""
    noisy, noise = check_finite_matrix(noisy), check_finite_matrix(noise)
    if noisy.shape[1] != noise.shape[1]:
        raise ValueError(f"noisy samples have {noisy.shape[1]} dimensions, noise samples {noise.shape[1]}")
    return knn_entropy(noisy, k) - knn_entropy(noise, k)


def gaussian_mutual_information(dim: int, signal_std: float, noise_std: float) -> float:
    """Closed form for X ~ N(0, s^2 I_d), Z ~ N(0, t^2 I_d): I(X; X + Z) = d/2 log(1 + s^2 / t^2) (nats)."""
    if signal_std < 0 or noise_std <= 0 or dim < 1:
        raise ValueError(f"need dim >= 1, signal_std >= 0, noise_std > 0; got {dim}, {signal_std}, {noise_std}")
    return dim / 2 * math.log1p(signal_std**2 / noise_std**2)


def randomizer_mutual_information(x: np.ndarray, randomizer: Randomizer, rng: np.random.Generator, k: int = 3) -> float:
    """kNN estimate of I(X; X~) (nats) for one release of the rows of ``x`` through an additive ``randomizer``
    (:attr:`~fed.randomizers.base.Randomizer.additive`).

    X is the clipped input ``preprocess(x)`` (clipping is deterministic, so I(x; X~) is the same),
    the noise Z = release(x) - preprocess(x). See the module's caveat on high dimensions.
    """
    if not randomizer.additive:
        raise ValueError(
            f"{randomizer.params().get('mechanism')!r} does not add noise independent of its input; "
            "the estimate I = h(X + Z) - h(Z) applies to additive-noise randomizers only"
        )
    x = check_finite_matrix(x)
    noisy = randomizer.release(x, rng)
    return knn_mutual_information(noisy, noisy - randomizer.preprocess(x), k)
