"""Classical and analytic Gaussian calibration: noise, ledger vs closed forms and dp_accounting, audit."""

from __future__ import annotations

import math
import time

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, RandomizedResponseEvent
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.gaussian_variants import (
    AnalyticGaussianRandomizer,
    ClassicalGaussianRandomizer,
    analytic_sigma,
    classical_sigma,
)
from tests.randomizer_helpers import DELTA, fast_audit


def test_noise_is_normal_with_the_calibrated_scale() -> None:
    randomizer = AnalyticGaussianRandomizer.calibrated(2.0, DELTA, 1, {"clip": 1.0})
    noise = randomizer.release(np.zeros((10_000, 4)), np.random.default_rng(0)).ravel()
    assert stats.kstest(noise, "norm", args=(0, randomizer.sigma)).pvalue > 1e-3
    assert stats.kstest(noise, "norm", args=(0, randomizer.sigma * 1.1)).pvalue < 1e-6


def test_classical_formula_and_its_refusal_beyond_epsilon_one() -> None:
    sigma = classical_sigma(0.5, DELTA, 2.0)
    assert sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / DELTA)) * 2.0 / 0.5)
    randomizer = ClassicalGaussianRandomizer.calibrated(0.5, DELTA, 1, {"clip": 1.0})
    assert randomizer.sigma == pytest.approx(sigma)
    # The exact ledger charges less than the classical (loose) target.
    assert compose_epsilon({randomizer.event: 1}, DELTA) < 0.5
    for bad in (1.0, 3.0):
        with pytest.raises(ValueError, match="epsilon < 1"):
            ClassicalGaussianRandomizer.calibrated(bad, DELTA, 1, {"clip": 1.0})


def test_classical_with_several_releases_uses_the_composed_sensitivity() -> None:
    randomizer = ClassicalGaussianRandomizer.calibrated(0.8, DELTA, 4, {"clip": 1.0})
    assert randomizer.sigma == pytest.approx(classical_sigma(0.8, DELTA, 2.0 * 2))
    assert compose_epsilon({randomizer.event: 4}, DELTA) <= 0.8


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 16.0])
def test_analytic_equals_the_exact_gdp_calibration_for_one_release(epsilon: float) -> None:
    assert analytic_sigma(epsilon, DELTA, 2.0) == pytest.approx(calibrate_gaussian_sigma(epsilon, DELTA, 1, 2.0), rel=1e-7)


def test_analytic_sigma_meets_balle_wang_condition_with_equality() -> None:
    # Independent: delta(eps) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8).
    eps, sens = 2.0, 2.0
    sigma = analytic_sigma(eps, DELTA, sens)
    a, b = sens / (2 * sigma), eps * sigma / sens
    achieved = stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)
    assert achieved == pytest.approx(DELTA, rel=1e-6)


def test_analytic_ledger_matches_dp_accounting() -> None:
    randomizer = AnalyticGaussianRandomizer.calibrated(3.0, DELTA, 5, {"clip": 0.5})
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.GaussianDpEvent(randomizer.sigma / 0.5), 5)
    assert accountant.get_epsilon(DELTA) == pytest.approx(3.0, rel=2e-3)
    assert compose_epsilon({randomizer.event: 5}, DELTA) == pytest.approx(3.0, rel=1e-6)


def test_with_other_events_both_variants_meet_the_target() -> None:
    rr = RandomizedResponseEvent(0.3, 2)
    analytic = AnalyticGaussianRandomizer.calibrated(3.0, DELTA, 2, {"clip": 1.0}, {rr: 2})
    assert compose_epsilon({analytic.event: 2, rr: 2}, DELTA) <= 3.0 + 1e-9
    classical = ClassicalGaussianRandomizer.calibrated(0.9, DELTA, 1, {"clip": 1.0}, {rr: 1})
    assert compose_epsilon({classical.event: 1, rr: 1}, DELTA) <= 0.9


def test_same_event_as_gaussian_and_round_trip_through_the_registry() -> None:
    randomizer = AnalyticGaussianRandomizer(1.5, 2.0)
    assert randomizer.event == GaussianEvent(3.0, 2.0)
    again = make_randomizer(randomizer.params())
    assert type(again) is AnalyticGaussianRandomizer and again.params() == randomizer.params()
    assert make_randomizer({"mechanism": "gaussian-classical", "clip": 1.0, "sigma": 3.0}).event == GaussianEvent(2.0, 3.0)


def test_fast_audit_stays_within_the_claim() -> None:
    """At delta 1e-2, where 20,000 draws see most of the claim (and half the noise fails:
    tests/test_mutation_proof_audits.py); at 1e-5 they see a quarter of it."""
    randomizer = AnalyticGaussianRandomizer.calibrated(3.0, 1e-2, 1, {"clip": 1.0})
    started = time.perf_counter()
    result = fast_audit(randomizer, dim=8, claimed=3.0, delta=1e-2)
    assert time.perf_counter() - started < 2.0
    assert 1.5 < result.lower_bound <= 3.0 and result.verdict == "pass"


@pytest.mark.parametrize(
    "params,match",
    [
        ({"mechanism": "gaussian-analytic", "clip": 1.0}, "sigma"),
        ({"mechanism": "gaussian-analytic", "clip": -1.0, "sigma": 1.0}, "clip"),
        ({"mechanism": "gaussian-classical", "clip": 1.0, "sigma": 1.0, "extra": 2}, "extra"),
    ],
)
def test_bad_parameters(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_randomizer(params)
    with pytest.raises(ValueError, match="delta"):
        analytic_sigma(1.0, 0.0, 1.0)
