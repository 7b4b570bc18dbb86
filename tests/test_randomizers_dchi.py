"""Metric DP (seed 003): d_chi Laplace noise, its eta and worst-case epsilon over the clipped domain."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import CoordinateMetricDPEvent, MetricDPEvent, event_from_json
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.metric import DChiRandomizer, dchi_coordinate_variance, dchi_noise
from tests.randomizer_helpers import DELTA, fast_audit


def test_noise_radius_is_gamma_and_direction_uniform() -> None:
    d, eta = 16, 2.5
    z = dchi_noise(20_000, d, eta, np.random.default_rng(0))
    radius = np.linalg.norm(z, axis=1)
    assert stats.kstest(radius, "gamma", args=(d, 0, 1 / eta)).pvalue > 1e-3
    assert stats.kstest(radius, "gamma", args=(d, 0, 1.1 / eta)).pvalue < 1e-6
    # A uniform direction u has (u . e + 1) / 2 ~ Beta((d-1)/2, (d-1)/2) for any fixed unit e.
    e = np.ones(d) / math.sqrt(d)
    proj = (z / radius[:, None]) @ e
    assert stats.kstest((proj + 1) / 2, "beta", args=((d - 1) / 2, (d - 1) / 2)).pvalue > 1e-3


def test_density_is_exp_minus_eta_norm() -> None:
    # In d = 1 the d_chi noise is the ordinary Laplace(1/eta).
    z = dchi_noise(20_000, 1, 2.0, np.random.default_rng(1)).ravel()
    assert stats.kstest(z, "laplace", args=(0, 0.5)).pvalue > 1e-3


def test_event_states_eta_and_the_domain_diameter() -> None:
    randomizer = DChiRandomizer(clip=1.5, eta=0.4)
    assert randomizer.event == MetricDPEvent(eta=0.4, diameter=3.0, tokens=1)
    assert randomizer.event.epsilon_per_token == pytest.approx(1.2)
    assert randomizer.params()["epsilon_per_token"] == pytest.approx(1.2)
    assert event_from_json(randomizer.event.to_json()) == randomizer.event
    assert make_randomizer(randomizer.params()).event == randomizer.event


def _composed_pure_delta(epsilon0: float, k: int, epsilon: float) -> float:
    """Exact delta(epsilon) of k compositions of pure epsilon0-DP (binary randomized response)."""
    j = np.arange(k + 1)
    prob = stats.binom.pmf(j, k, 1 / (1 + math.exp(-epsilon0)))
    loss = epsilon0 * (2 * j - k)
    return float(np.sum(prob * np.clip(1 - np.exp(epsilon - loss), 0, None)))


@pytest.mark.parametrize("kind", [MetricDPEvent, CoordinateMetricDPEvent])
@pytest.mark.parametrize("tokens,releases", [(1, 1), (8, 1), (16, 3)])
def test_ledger_matches_the_closed_form_composition(kind: type, tokens: int, releases: int) -> None:
    """Both metric events (L2 d_chi and the per-coordinate L1 sampler) compose like pure eta x diameter DP."""
    event = kind(eta=0.05, diameter=2.0, tokens=tokens)
    ours = compose_epsilon({event: releases}, DELTA)
    k = tokens * releases
    assert ours <= k * 0.1 + 1e-9
    assert _composed_pure_delta(0.1, k, ours) <= DELTA * 1.01
    assert _composed_pure_delta(0.1, k, ours - 0.01) > DELTA


def test_calibration_round_trip_and_post_clip() -> None:
    randomizer = DChiRandomizer.calibrated(2.0, DELTA, 3, {"clip": 1.0, "post_clip": 2.0})
    achieved = compose_epsilon({randomizer.event: 3}, DELTA)
    assert achieved <= 2.0 and achieved == pytest.approx(2.0, rel=1e-3)
    y = randomizer.release(np.ones((200, 4)) * 5, np.random.default_rng(2))
    assert np.linalg.norm(y, axis=1).max() <= 2.0 + 1e-9


def test_decode_reports_the_noise_variance() -> None:
    randomizer = DChiRandomizer(clip=1.0, eta=3.0)
    reports = randomizer.release(np.zeros((20_000, 6)), np.random.default_rng(3))
    estimate, variance = randomizer.decode(reports)
    assert variance == pytest.approx(dchi_coordinate_variance(6, 3.0))
    assert estimate.var(axis=0).mean() == pytest.approx(variance, rel=0.05)


def test_fast_audit_stays_within_the_claim() -> None:
    randomizer = DChiRandomizer(clip=1.0, eta=0.5)  # pure epsilon eta * 2C = 1
    # In d = 1 the worst case is attained on half-lines, so the audit comes close to it;
    # in higher dimensions the loss rarely approaches eta * 2C.
    close = fast_audit(randomizer, dim=1, claimed=1.0)
    assert 0.4 < close.lower_bound <= 1.0 and close.verdict == "pass"
    assert fast_audit(randomizer, dim=16, claimed=1.0).lower_bound <= close.lower_bound


@pytest.mark.parametrize(
    "params,match",
    [
        ({"mechanism": "dchi", "eta": 1.0}, "clip"),
        ({"mechanism": "dchi", "clip": 1.0, "eta": -1.0}, "eta"),
        ({"mechanism": "dchi", "clip": 1.0, "eta": 1.0, "post_clip": 0.0}, "post_clip"),
    ],
)
def test_bad_parameters(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_randomizer(params)
