"""Laplace randomizers: L1-correct ``laplace`` and seed 002's under-noised Theorem 3 (audit only)."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import LaplaceEvent, event_from_json
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.laplace import LaplaceRandomizer, Seed002LaplaceRandomizer, clip_l1
from tests.randomizer_helpers import DELTA, fast_audit


def test_noise_is_laplace_with_the_stated_scale() -> None:
    randomizer = LaplaceRandomizer(clip=1.0, scale=0.8)
    noise = randomizer.release(np.zeros((10_000, 3)), np.random.default_rng(1)).ravel()
    assert stats.kstest(noise, "laplace", args=(0, 0.8)).pvalue > 1e-3
    assert stats.kstest(noise, "laplace", args=(0, 0.9)).pvalue < 1e-6


def test_l1_clipping_and_event() -> None:
    x = np.array([[3.0, -1.0], [0.2, 0.3]])
    np.testing.assert_allclose(clip_l1(x, 2.0), [[1.5, -0.5], [0.2, 0.3]])
    randomizer = LaplaceRandomizer(clip=1.5, scale=3.0)
    assert randomizer.event == LaplaceEvent(sensitivity=3.0, scale=3.0)
    assert event_from_json(randomizer.event.to_json()) == randomizer.event


@pytest.mark.parametrize("releases", [1, 4])
def test_ledger_matches_dp_accounting_and_the_pure_closed_form(releases: int) -> None:
    event = LaplaceEvent(sensitivity=2.0, scale=2.5)
    ours = compose_epsilon({event: releases}, DELTA)
    # Independent: dp_accounting's Laplace accounting with one unit = the replace-one diameter.
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.LaplaceDpEvent(noise_multiplier=2.5 / 2.0), releases)
    assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=2e-3)
    # Pure epsilon: L1 diameter / scale per release, basic composition as delta -> 0.
    assert compose_epsilon({event: releases}, 1e-12) <= releases * 2.0 / 2.5 + 1e-3
    assert compose_epsilon({event: 1}, 1e-12) == pytest.approx(0.8, abs=1e-3)


@pytest.mark.parametrize("epsilon,releases", [(1.0, 1), (4.0, 3)])
def test_calibration_round_trip(epsilon: float, releases: int) -> None:
    randomizer = LaplaceRandomizer.calibrated(epsilon, DELTA, releases, {"clip": 1.0})
    achieved = compose_epsilon({randomizer.event: releases}, DELTA)
    assert achieved <= epsilon and achieved == pytest.approx(epsilon, rel=1e-3)


def test_fast_audit_of_laplace_stays_within_the_claim() -> None:
    randomizer = LaplaceRandomizer(clip=1.0, scale=2.0)  # pure epsilon 1
    result = fast_audit(randomizer, dim=8, claimed=1.0)
    assert 0.5 < result.lower_bound <= 1.0 and result.verdict == "pass"


def test_seed002_states_its_true_cost_and_shows_the_stated_one() -> None:
    randomizer = Seed002LaplaceRandomizer(clip=1.0, stated_epsilon=1.0, dim=64, allow_invalid=True)
    assert randomizer.scale == pytest.approx(2.0)
    assert randomizer.event == LaplaceEvent(sensitivity=2.0 * 8.0, scale=2.0)
    assert randomizer.true_epsilon == pytest.approx(8.0)
    params = randomizer.params()
    assert params["stated_epsilon"] == 1.0 and params["true_epsilon"] == pytest.approx(8.0)
    assert make_randomizer(params).event == randomizer.event
    # The L2 ball's L1 diameter is reached by the pair +-(C / sqrt d)(1, ..., 1).
    x = np.full((1, 64), 1.0 / 8.0)
    assert np.abs(randomizer.preprocess(x) - randomizer.preprocess(-x)).sum() == pytest.approx(2.0 * 8.0)


def test_seed002_audit_exceeds_its_stated_epsilon() -> None:
    randomizer = Seed002LaplaceRandomizer(clip=1.0, stated_epsilon=1.0, dim=64, allow_invalid=True)
    result = fast_audit(randomizer, dim=64, claimed=1.0)
    assert result.lower_bound > 1.0 and result.verdict == "claim violated"
    assert result.lower_bound <= randomizer.true_epsilon


def test_seed002_is_refused_unless_explicitly_allowed() -> None:
    with pytest.raises(ValueError, match="allow_invalid"):
        make_randomizer({"mechanism": "laplace-seed002", "clip": 1.0, "stated_epsilon": 1.0, "dim": 4})
    with pytest.raises(ValueError, match="allow_invalid"):
        Seed002LaplaceRandomizer.calibrated(1.0, DELTA, 1, {"clip": 1.0, "dim": 4})
    allowed = Seed002LaplaceRandomizer.calibrated(2.0, DELTA, 2, {"clip": 1.0, "dim": 16, "allow_invalid": True})
    assert allowed.stated_epsilon == 1.0
    assert compose_epsilon({allowed.event: 2}, DELTA) > 2.0 * math.sqrt(16) * 0.9


@pytest.mark.parametrize(
    "params,match",
    [
        ({"mechanism": "laplace", "clip": 1.0}, "scale"),
        ({"mechanism": "laplace", "clip": 0.0, "scale": 1.0}, "clip"),
        ({"mechanism": "laplace", "clip": 1.0, "scale": math.nan}, "scale"),
        ({"mechanism": "laplace-seed002", "clip": 1.0, "stated_epsilon": 1.0, "dim": 0, "allow_invalid": True}, "dim"),
    ],
)
def test_bad_parameters(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_randomizer(params)


def test_seed002_checks_the_dimension() -> None:
    randomizer = Seed002LaplaceRandomizer(1.0, 1.0, 4, allow_invalid=True)
    with pytest.raises(ValueError, match="dim 4"):
        randomizer.release(np.zeros((2, 5)), np.random.default_rng())
