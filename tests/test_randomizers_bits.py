"""Binary encodings (seed 004): fixed point, SUE / OUE / OME flipping, true versus published epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters
from scipy import stats

from ldpfed.fed.privacy.composition import PLD_DISCRETIZATION, compose_epsilon
from ldpfed.fed.privacy.events import PURE_PLD_CAP, BitFlipEvent, event_from_json
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.bits import (
    OMERandomizer,
    OUERandomizer,
    SUERandomizer,
    fixed_point_bits,
    fixed_point_values,
)
from tests.randomizer_helpers import DELTA, fast_audit


def test_fixed_point_code_is_sign_integer_fraction_truncated_and_clipped() -> None:
    z = np.array([[0.0, 1.5, -2.25, 3.14159, 100.0, -100.0]])
    bits = fixed_point_bits(z, 4, 5)
    assert bits.shape == (1, 60)
    assert list(bits[0, 10:20]) == [0, 0, 0, 0, 1, 1, 0, 0, 0, 0]  # +1.5 = 0001.10000
    assert list(bits[0, 20:30]) == [1, 0, 0, 1, 0, 0, 1, 0, 0, 0]  # -2.25 = -0010.01000
    np.testing.assert_allclose(fixed_point_values(bits, 4, 5), [[0, 1.5, -2.25, 3.125, 15.96875, -15.96875]])


def test_z_score_uses_the_public_statistics() -> None:
    randomizer = SUERandomizer(1.0, 2, mean=[1.0, -1.0], std=[2.0, 0.5])
    clean = randomizer.preprocess(np.array([[4.0, -1.5]]))  # z = (1.5, -1)
    np.testing.assert_allclose(fixed_point_values(clean, 4, 5), [[1.5, -1.0]])


@pytest.mark.parametrize("cls", [SUERandomizer, OUERandomizer, OMERandomizer])
def test_flip_rates_match_p_and_q(cls: type) -> None:
    randomizer = cls(8.0, 2, integer_bits=1, fraction_bits=0)  # 2 values x 2 bits
    x = np.tile([[0.0, -1.0]], (20_000, 1))  # bits: (0, 0) and (1, 1)
    reports = randomizer.release(x, np.random.default_rng(0))
    clean = randomizer.preprocess(x[:1])[0]
    for i in range(4):
        expected = randomizer.p[i] if clean[i] else randomizer.q[i]
        ones = int(reports[:, i].sum())
        assert stats.binomtest(ones, len(reports), expected).pvalue > 1e-3


def test_sue_and_oue_true_epsilon_is_within_the_claim() -> None:
    sue, oue = SUERandomizer(2.0, 8), OUERandomizer(2.0, 8)
    e = 2.0 / 80
    assert sue.true_epsilon == pytest.approx(2.0)
    assert oue.true_epsilon == pytest.approx(80 * math.log((1 + math.exp(e)) / 2))
    assert oue.true_epsilon < 2.0


def test_ome_true_epsilon_by_hand_and_far_above_its_claim() -> None:
    lam, r, l = 100.0, 8, 10
    ome = OMERandomizer(1.0, r, lam=lam)
    e = 1.0 / (r * l)
    q = 1 / (1 + lam * math.exp(e))

    def bit(p: float) -> float:
        return max(abs(math.log(p / q)), abs(math.log((1 - p) / (1 - q))))

    expected = (r * l // 2) * (bit(lam / (1 + lam)) + bit(1 / (1 + lam**3)))
    assert ome.true_epsilon == pytest.approx(expected)
    assert ome.true_epsilon > 100 * ome.epsilon
    assert ome.event == BitFlipEvent("ome", ome.true_epsilon, 1.0, 80)
    params = ome.params()
    assert params["epsilon"] == 1.0 and params["true_epsilon"] == pytest.approx(expected)
    # lambda = 1 turns OME into OUE.
    assert OMERandomizer(1.0, r, lam=1.0).true_epsilon == pytest.approx(OUERandomizer(1.0, r).true_epsilon)


def test_ledger_matches_dp_accounting_pure_pld() -> None:
    event = SUERandomizer(1.5, 4).event
    ours = compose_epsilon({event: 3}, DELTA)
    independent = pld.from_privacy_parameters(DifferentialPrivacyParameters(event.epsilon, 0.0), PLD_DISCRETIZATION)
    assert ours == pytest.approx(independent.self_compose(3).get_epsilon_for_delta(DELTA), rel=1e-6)
    assert event_from_json(event.to_json()) == event


def test_huge_true_epsilon_is_reported_exactly_and_charged_as_infinite() -> None:
    event = OMERandomizer(1.0, 384).event
    assert event.epsilon > PURE_PLD_CAP
    assert event.basic_epsilon == pytest.approx(event.epsilon)
    assert compose_epsilon({event: 1}, DELTA) == pytest.approx(event.epsilon)  # basic composition of a pure event


def test_decode_gives_unbiased_bits_and_their_noise_variance() -> None:
    randomizer = OUERandomizer(20.0, 4, integer_bits=2, fraction_bits=1)
    x = np.random.default_rng(1).normal(size=(1, 4))
    clean = randomizer.preprocess(x)[0]
    reports = randomizer.release(np.repeat(x, 40_000, 0), np.random.default_rng(2))
    estimate, variance = randomizer.decode(reports)
    np.testing.assert_allclose(estimate.mean(axis=0), clean, atol=0.05)
    np.testing.assert_allclose(estimate.var(axis=0), variance, rtol=0.05)  # per bit: 0s and 1s differ
    ome = OMERandomizer(1.0, 4, integer_bits=2, fraction_bits=1)  # alternating p: even and odd bits differ a lot
    estimate, variance = ome.decode(ome.release(np.repeat(x, 40_000, 0), np.random.default_rng(3)))
    noisy = variance > 1  # the rest are bits reported right ~99% of the time: too few flips to estimate
    assert noisy.any() and variance.max() > 1000 * variance.min()
    np.testing.assert_allclose(estimate.var(axis=0)[noisy], variance[noisy], rtol=0.05)


@pytest.mark.parametrize("cls", [SUERandomizer, OUERandomizer])
def test_calibration_meets_the_target_with_the_true_cost(cls: type) -> None:
    randomizer = cls.calibrated(3.0, DELTA, 2, {"dim": 4})
    achieved = compose_epsilon({randomizer.event: 2}, DELTA)
    assert achieved <= 3.0 and achieved == pytest.approx(3.0, rel=1e-3)


def test_ome_with_published_lambda_cannot_be_calibrated_to_a_small_target() -> None:
    with pytest.raises(ValueError, match="however small"):
        OMERandomizer.calibrated(5.0, DELTA, 1, {"dim": 4, "lambda": 100.0})


@pytest.mark.parametrize("cls", [SUERandomizer, OUERandomizer])
def test_fast_audit_of_sue_and_oue_stays_within_the_claim(cls: type) -> None:
    randomizer = cls(2.0, 1, integer_bits=1, fraction_bits=0)  # 2 bits: the audit can see the loss
    result = fast_audit(randomizer, dim=1, claimed=2.0)
    assert result.lower_bound <= min(2.0, randomizer.true_epsilon) and result.verdict == "pass"
    assert result.lower_bound > 0.3


def test_fast_audit_of_published_ome_violates_its_claim() -> None:
    randomizer = OMERandomizer(1.0, 8)
    result = fast_audit(randomizer, dim=8, claimed=1.0)
    assert result.lower_bound > 3.0 and result.verdict == "claim violated"


@pytest.mark.parametrize(
    "params,match",
    [
        ({"mechanism": "ome", "epsilon": 1.0, "dim": 4}, "lambda"),
        ({"mechanism": "sue", "epsilon": 1.0, "dim": 0}, "dim"),
        ({"mechanism": "sue", "epsilon": 0.0, "dim": 4}, "epsilon"),
        ({"mechanism": "oue", "epsilon": 1.0, "dim": 2, "mean": [0.0, 1.0, 2.0]}, "mean"),
        ({"mechanism": "oue", "epsilon": 1.0, "dim": 2, "std": 0.0}, "std"),
        ({"mechanism": "sue", "epsilon": 1.0, "dim": 2, "integer_bits": 40}, "integer_bits"),
    ],
)
def test_bad_parameters(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_randomizer(params)


def test_params_round_trip() -> None:
    ome = OMERandomizer(0.5, 3, mean=[0.1, 0.2, 0.3], std=2.0, lam=50.0)
    again = make_randomizer(ome.params())
    assert again.event == ome.event and again.params() == ome.params()
