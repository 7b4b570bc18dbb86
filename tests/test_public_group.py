"""The server's public data as one more inverse-variance group beside the reports, its domain shift estimated."""

from __future__ import annotations

import numpy as np
import pytest

from ldpfed.fed.learning.classifier import NoiseAwareLDA, domain_shift

DIM, SIGMA, REPORTS, PUBLIC = 8, 6.0, 20_000, 2_000
MEANS = np.array([[0.3] * DIM, [-0.3] * DIM])


def _data(n: int, rng: np.random.Generator, offset: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, 2, n)
    return MEANS[y] + offset + rng.normal(0.0, 0.5, size=(n, DIM)), y


def _private(rng: np.random.Generator) -> NoiseAwareLDA:
    x, y = _data(REPORTS, rng)
    lda = NoiseAwareLDA(DIM, 2)
    lda.update(x + rng.normal(0.0, SIGMA, size=x.shape), y, SIGMA)
    return lda


def _errors(offset: float, seeds: int = 5) -> dict[str, float]:
    """Mean squared error of the class means: reports alone, with public data weighted by the estimated
    shift, and with public data taken as unshifted; and the estimated shift."""
    out: dict[str, list[float]] = {"private": [], "estimated": [], "unshifted": [], "shift": []}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        lda = _private(rng)
        px, py = _data(PUBLIC, rng, offset)
        out["private"].append(float(((lda.means() - MEANS) ** 2).mean()))
        shift = domain_shift(lda, px, py)
        out["shift"].append(float(shift.mean()))
        for name, value in (("estimated", shift), ("unshifted", np.zeros_like(shift))):
            combined = NoiseAwareLDA(DIM, 2)
            combined.groups = {k: g for k, g in lda.groups.items()}
            combined.add_public(px, py, value)
            out[name].append(float(((combined.means() - MEANS) ** 2).mean()))
    return {k: float(np.mean(v)) for k, v in out.items()}


def test_same_domain_public_data_sharpens_the_means() -> None:
    errors = _errors(0.0)
    assert errors["shift"] < 0.01
    assert errors["estimated"] < 0.5 * errors["private"]


def test_shifted_public_data_is_discounted() -> None:
    errors = _errors(0.5)
    assert 0.15 < errors["shift"] < 0.4  # true squared shift: 0.25 per coordinate
    assert errors["unshifted"] > 0.2  # taken at face value, the public means pull everything off
    assert errors["estimated"] < 1.5 * errors["private"]  # discounted: about the reports' own error


def test_public_group_refuses_misuse() -> None:
    rng = np.random.default_rng(0)
    px, py = _data(100, rng)
    with pytest.raises(ValueError, match="inverse-variance weighting only"):
        NoiseAwareLDA(DIM, 2, weighting="pooled").add_public(px, py, np.zeros((2, DIM)))
    lda = _private(rng)
    with pytest.raises(ValueError, match="finite non-negative"):
        lda.add_public(px, py, -np.ones((2, DIM)))
    with pytest.raises(ValueError, match="finite non-negative"):
        lda.add_public(px, py, np.zeros((3, DIM)))
    lda.add_public(px, py, np.zeros((2, DIM)))
    with pytest.raises(ValueError, match="already added"):
        lda.add_public(px, py, np.zeros((2, DIM)))
    with pytest.raises(ValueError, match="before public data is added"):
        domain_shift(lda, px, py)
