"""Gaussian DP layer and randomized response: noise, accounting, calibration, attack."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.audit import epsilon_lower_bound
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import PLD_DISCRETIZATION, PLD_FINE_RELEASES, compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, LaplaceEvent, RandomizedResponseEvent, event_from_json
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer, clip_l2
from ldpfed.fed.randomizers.labels import RandomizedResponse

DELTA = 1e-5


def test_gaussian_noise_is_normal_with_stated_scale() -> None:
    randomizer = GaussianRandomizer(clip=1.0, sigma=0.7)
    x = np.zeros((20000, 3))
    noise = randomizer.release(x, np.random.default_rng(1)).ravel()
    assert stats.kstest(noise, "norm", args=(0, 0.7)).pvalue > 1e-3
    assert stats.kstest(noise, "norm", args=(0, 0.8)).pvalue < 1e-6


def test_gaussian_clips_before_noise_and_states_twice_the_clip() -> None:
    x = np.array([[3.0, 4.0], [0.3, 0.4]])
    np.testing.assert_allclose(clip_l2(x, 1.0), [[0.6, 0.8], [0.3, 0.4]])
    randomizer = GaussianRandomizer(clip=1.5, sigma=2.0)
    assert randomizer.event == GaussianEvent(sensitivity=3.0, sigma=2.0)
    mean = randomizer.release(np.tile([[30.0, 40.0]], (40000, 1)), np.random.default_rng(0)).mean(0)
    np.testing.assert_allclose(mean, [0.9, 1.2], atol=0.05)


def test_fresh_noise_per_release() -> None:
    randomizer = GaussianRandomizer(1.0, 1.0)
    rng = np.random.default_rng(0)
    a, b = randomizer.release(np.zeros((1, 5)), rng), randomizer.release(np.zeros((1, 5)), rng)
    assert not np.allclose(a, b)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0])
def test_randomizer_rejects_bad_parameters(bad: float) -> None:
    with pytest.raises(ValueError, match="sigma"):
        GaussianRandomizer(1.0, bad)
    with pytest.raises(ValueError, match="clip"):
        GaussianRandomizer(bad, 1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_randomizer_rejects_non_finite_input(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN or infinite"):
        GaussianRandomizer(1.0, 1.0).release(np.array([[0.5, bad]]), np.random.default_rng())


@pytest.mark.parametrize("releases,sigma", [(1, 1.0), (5, 2.0), (40, 6.0)])
def test_gaussian_ledger_matches_dp_accounting_pld(releases: int, sigma: float) -> None:
    clip = 1.0
    ours = compose_epsilon({GaussianEvent(2 * clip, sigma): releases}, DELTA)
    # Independent: dp_accounting measures noise against the norm bound C and doubles it
    # for replace-one neighbours itself.
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / clip), releases)
    assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=2e-3)


def test_gdp_closed_form_matches_definition() -> None:
    mu = 1.3
    eps = gdp.epsilon_for_delta(mu, DELTA)
    # delta(eps) of mu-GDP written out from the two Gaussian tails.
    direct = stats.norm.sf(eps / mu - mu / 2) - math.exp(eps) * stats.norm.sf(eps / mu + mu / 2)
    assert direct == pytest.approx(DELTA, rel=1e-6)
    assert gdp.mu_for_epsilon(eps, DELTA) == pytest.approx(mu, rel=1e-8)


def test_mixed_ledger_matches_dp_accounting() -> None:
    gauss, rr = GaussianEvent(2.0, 3.0), RandomizedResponseEvent(1.0, 2)
    ours = compose_epsilon({gauss: 3, rr: 3}, DELTA)
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.GaussianDpEvent(3.0 / 1.0), 3)
    # PLDAccountant ignores `count` for RandomizedResponseDpEvent (dp_accounting 0.6.0),
    # so the three label releases are composed one at a time.
    for _ in range(3):
        accountant.compose(rr.to_dp_event())
    assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=2e-3)
    # RR alone is pure DP with exactly its epsilon.
    assert compose_epsilon({rr: 1}, DELTA) == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize("epsilon,releases", [(1.0, 1), (3.0, 1), (8.0, 4)])
def test_calibration_round_trip(epsilon: float, releases: int) -> None:
    sigma = calibrate_gaussian_sigma(epsilon, DELTA, releases, sensitivity=2.0)
    achieved = compose_epsilon({GaussianEvent(2.0, sigma): releases}, DELTA)
    assert achieved <= epsilon
    assert achieved == pytest.approx(epsilon, rel=1e-6)
    assert compose_epsilon({GaussianEvent(2.0, sigma * 0.99): releases}, DELTA) > epsilon


def test_calibration_with_label_cost_meets_target() -> None:
    rr = RandomizedResponseEvent(0.5, 2)
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0, {rr: 1})
    achieved = compose_epsilon({GaussianEvent(2.0, sigma): 1, rr: 1}, DELTA)
    assert 2.99 <= achieved <= 3.0
    assert sigma > calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0)


def test_ledger_enforces_per_record_budget_and_round_trips_json() -> None:
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 2, 2.0)
    event = GaussianEvent(2.0, sigma)
    ledger = Ledger(5, Budget(3.0, DELTA))
    ledger.charge([event], np.array([0, 0, 1]))
    assert list(ledger.remaining([event], np.arange(5))) == [1, 2, 3, 4]
    assert ledger.sentence_epsilon() == pytest.approx(3.0, rel=1e-6)
    expected_user = gdp.epsilon_for_delta(math.sqrt(3) * event.mu, DELTA)
    assert ledger.user_epsilon() == pytest.approx(expected_user)
    again = Ledger.from_json(ledger.to_json())
    assert again.sentence_epsilon() == ledger.sentence_epsilon()
    assert event_from_json(event.to_json()) == event


def test_user_level_budget() -> None:
    event = GaussianEvent(2.0, 6.0)  # mu = 1/3: two releases cost ~2.1, ten ~4.4
    ledger = Ledger(10, Budget(100.0, DELTA, epsilon_user=3.0))
    assert ledger.user_can_afford({event: 2})
    assert not ledger.user_can_afford({event: 10})


def test_randomized_response_distribution() -> None:
    rr = RandomizedResponse(epsilon=1.0, num_values=4)
    out = rr.release(np.zeros(40000, dtype=int), np.random.default_rng(3))
    observed = np.bincount(out, minlength=4)
    expected = rr.transition_matrix()[0] * len(out)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    assert rr.keep_probability == pytest.approx(math.e / (math.e + 3))


def _attack_gaussian(sigma: float, clip: float, n: int, seed: int) -> float:
    """Best epsilon lower bound of the likelihood-ratio test on the worst neighbouring pair."""
    randomizer = GaussianRandomizer(clip, sigma)
    rng = np.random.default_rng(seed)
    x0, x1 = np.array([[clip, 0.0]]), np.array([[-clip, 0.0]])
    null = randomizer.release(np.repeat(x0, n, 0), rng)
    alt = randomizer.release(np.repeat(x1, n, 0), rng)
    # The likelihood ratio is monotone in the projection on x1 - x0.
    return epsilon_lower_bound(-null[:, 0], -alt[:, 0], DELTA)


def test_attack_on_calibrated_gaussian_stays_within_epsilon() -> None:
    sigma = calibrate_gaussian_sigma(1.0, DELTA, 1, sensitivity=2.0)
    assert _attack_gaussian(sigma, 1.0, 200_000, seed=4) <= 1.0


def test_attack_detects_noise_calibrated_to_half_the_sensitivity() -> None:
    # The classic mistake (sensitivity C instead of 2C) must be caught by the same attack.
    sigma = calibrate_gaussian_sigma(1.0, DELTA, 1, sensitivity=1.0)
    assert _attack_gaussian(sigma, 1.0, 200_000, seed=5) > 1.0


def test_attack_on_randomized_response_stays_within_epsilon() -> None:
    rr = RandomizedResponse(epsilon=1.0, num_values=2)
    rng = np.random.default_rng(6)
    null = rr.release(np.zeros(200_000, dtype=int), rng).astype(float)
    alt = rr.release(np.ones(200_000, dtype=int), rng).astype(float)
    bound = epsilon_lower_bound(null, alt, DELTA)
    assert 0.8 < bound <= 1.0


def test_pure_composition_past_dp_accounting_overflow_falls_back_to_basic_composition() -> None:
    # Past a composed epsilon of ~709 dp_accounting's PLD can return inf (exp overflow); the
    # figure must stay finite: basic composition, still an upper bound.
    event = LaplaceEvent(sensitivity=15.32, scale=5.106632622959839)  # 3 per release
    step = PLD_DISCRETIZATION * 297 / PLD_FINE_RELEASES
    with np.errstate(over="ignore"):
        assert math.isinf(event.to_pld(step).self_compose(297).get_epsilon_for_delta(1e-5))
    assert compose_epsilon({event: 297}, 1e-5) == pytest.approx(297 * event.epsilon)
    assert compose_epsilon({event: 200}, 1e-5) < 200 * event.epsilon  # the PLD is tighter here
    for n in (296, 400, 1000):  # coarse grid beyond PLD_FINE_RELEASES: fast, finite, below basic
        assert math.isfinite(compose_epsilon({event: n}, 1e-5)) and compose_epsilon({event: n}, 1e-5) <= n * event.epsilon


def test_gdp_conversions_survive_absurd_noise_levels() -> None:
    """Hostile sigmas (1e-12, 1e-300) give an infinite or huge epsilon, never an exception (fuzzing, issue 9)."""
    from ldpfed.fed.privacy.composition import gaussian_mu

    assert gdp.epsilon_for_delta(2e12, 1e-5) > 1e20
    assert gdp.epsilon_for_delta(1e200, 1e-5) == float("inf")
    assert gaussian_mu({GaussianEvent(sensitivity=2.0, sigma=1e-300): 1}) == float("inf")
    assert gdp.delta_for_epsilon(1.0, 3.0) == pytest.approx(0.0015371853694, rel=1e-9)
