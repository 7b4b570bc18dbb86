"""DP instance encoding (seed 002) and TextHide: mixing, honest events, audits."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.learning.classifier import NoiseAwareLDA
from ldpfed.fed.privacy.composition import compose_epsilon, gaussian_mu
from ldpfed.fed.privacy.events import GaussianEvent, LaplaceEvent, NoPrivacyEvent
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.instance_encoding import (
    DPInstanceEncodingGaussian,
    DPInstanceEncodingLaplace,
    Mixup,
    TextHideRandomizer,
)
from tests.randomizer_helpers import DELTA, fast_audit


def test_every_record_enters_exactly_k_reports_with_bounded_coefficients() -> None:
    mixup = Mixup(k=3, max_coefficient=0.6, masks=0)
    x = np.random.default_rng(0).normal(size=(2, 7, 5))
    reports, members, lam = mixup.mix(x, np.random.default_rng(1))
    for g in range(2):
        assert np.array_equal(np.bincount(members[g].ravel(), minlength=7), np.full(7, 3))
        assert all(len(set(row)) == 3 for row in members[g])
        np.testing.assert_allclose(reports[g], np.einsum("jt,jtd->jd", lam[g], x[g][members[g]]))
    np.testing.assert_allclose(lam.sum(axis=-1), 1.0)
    many = mixup.coefficients((50_000,), np.random.default_rng(2))
    assert many.max() <= 0.6 + 1e-12 and many.min() >= 0.0 and many.max() > 0.55


def test_sign_masks_come_from_a_pool_of_m() -> None:
    mixup = Mixup(k=1, max_coefficient=1.0, masks=2)
    x = np.ones((1, 50, 8))
    reports, _, _ = mixup.mix(x, np.random.default_rng(3))
    assert set(np.abs(reports).ravel()) == {1.0}
    assert len({tuple(r) for r in reports[0]}) <= 2


def test_gaussian_noise_on_mixed_reports() -> None:
    randomizer = DPInstanceEncodingGaussian(k=2, max_coefficient=0.5, masks=4, clip=1.0, sigma=0.7)
    reports = randomizer.release(np.zeros((5000, 4)), np.random.default_rng(4)).ravel()
    assert stats.kstest(reports, "norm", args=(0, 0.7)).pvalue > 1e-3
    laplace = DPInstanceEncodingLaplace(k=2, max_coefficient=0.5, masks=0, clip=1.0, scale=0.7)
    reports = laplace.release(np.zeros((5000, 4)), np.random.default_rng(5)).ravel()
    assert stats.kstest(reports, "laplace", args=(0, 0.7)).pvalue > 1e-3


def test_events_are_the_coefficient_share_over_k_reports() -> None:
    gauss = DPInstanceEncodingGaussian(k=4, max_coefficient=0.5, masks=0, clip=1.5, sigma=2.0)
    assert gauss.event == GaussianEvent(sensitivity=2 * 1.5 * 0.5 * 2.0, sigma=2.0)
    laplace = DPInstanceEncodingLaplace(k=4, max_coefficient=0.5, masks=0, clip=1.5, scale=2.0)
    assert laplace.event == LaplaceEvent(sensitivity=2 * 1.5 * 0.5 * 4, scale=2.0)


@pytest.mark.parametrize("cmax", [0.25, 0.5, 1.0])
def test_actual_shift_of_a_replaced_record_never_exceeds_the_stated_sensitivity(cmax: float) -> None:
    # Independent check: same randomness, record 0 at +C e1 versus -C e1; shift of all reports.
    k, n, clip = 4, 6, 1.0
    randomizer = DPInstanceEncodingGaussian(k=k, max_coefficient=cmax, masks=3, clip=clip, sigma=1.0)
    rest = np.random.default_rng(6).normal(size=(n, 5))
    a, b = rest.copy(), rest.copy()
    a[0], b[0] = 0, 0
    a[0, 0], b[0, 0] = clip, -clip
    shifts = []
    for seed in range(200):
        ya, _, _ = randomizer.mixup.mix(randomizer.preprocess(a)[None], np.random.default_rng(seed))
        yb, _, _ = randomizer.mixup.mix(randomizer.preprocess(b)[None], np.random.default_rng(seed))
        shifts.append(np.linalg.norm(ya - yb))
    assert max(shifts) <= randomizer.event.sensitivity + 1e-9
    if cmax == 0.25:  # equal weights: the bound is attained
        assert max(shifts) == pytest.approx(randomizer.event.sensitivity)


def test_gaussian_ledger_matches_dp_accounting_and_calibration() -> None:
    options = {"k": 4, "max_coefficient": 0.5, "masks": 16, "clip": 1.0}
    randomizer = DPInstanceEncodingGaussian.calibrated(2.0, DELTA, 3, options)
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    # dp_accounting doubles a norm bound for replace-one: half the diameter is the unit.
    accountant.compose(dp_accounting.GaussianDpEvent(randomizer.sigma / (randomizer.event.sensitivity / 2)), 3)
    assert accountant.get_epsilon(DELTA) == pytest.approx(2.0, rel=2e-3)
    laplace = DPInstanceEncodingLaplace.calibrated(2.0, DELTA, 1, {**options, "masks": 0})
    assert compose_epsilon({laplace.event: 1}, DELTA) == pytest.approx(2.0, rel=1e-3)


def test_soft_labels_are_mixed_alike_and_train_the_classifier() -> None:
    randomizer = DPInstanceEncodingGaussian(k=2, max_coefficient=0.75, masks=0, clip=10.0, sigma=0.1)
    rng = np.random.default_rng(7)
    labels = rng.integers(2, size=400)
    x = rng.normal(size=(400, 3)) + 3.0 * labels[:, None]
    reports, soft = randomizer.release_with_labels(x, labels, 2, rng)
    assert soft.shape == (400, 2)
    np.testing.assert_allclose(soft.sum(axis=1), 1.0)
    assert randomizer.records_per_report == 2 and TextHideRandomizer(k=3, masks=2).records_per_report == 3
    lda = NoiseAwareLDA(3, 2)
    lda.update(reports, soft, noise_std=0.1)
    assert (lda.fit().predict(x) == labels).mean() > 0.9


def test_labels_of_an_unmixed_randomizer_travel_as_they_are() -> None:
    randomizer = make_randomizer({"mechanism": "gaussian", "clip": 1.0, "sigma": 1.0})
    labels = np.array([1, 0, 2])
    reports, released = randomizer.release_with_labels(np.zeros((3, 4)), labels, 3, np.random.default_rng(0))
    assert reports.shape == (3, 4) and released is labels
    assert randomizer.records_per_report == 1 and randomizer.user_event == randomizer.event


@pytest.mark.parametrize(
    "k,cmax,epsilon,reports,ledger_figure,true_figure",
    [(4, 0.25, 6.0, 7, 20.1, 52.8), (30, 1 / 30, 8.0, 30, 79.7, 1461.0)],
)
def test_user_event_is_one_report_shifted_by_2c(
    k: int, cmax: float, epsilon: float, reports: int, ledger_figure: float, true_figure: float
) -> None:
    # All of a user's records may differ: each report (its records share its noise) moves by at
    # most 2C, so n reports are GDP with mu = sqrt(n) 2C / sigma; composing the per-record event
    # over the records would understate it by the factor c_max sqrt(k).
    clip = 1.5
    randomizer = DPInstanceEncodingGaussian.calibrated(
        epsilon, DELTA, 1, {"k": k, "max_coefficient": cmax, "masks": 16, "clip": clip}
    )
    assert randomizer.user_event == GaussianEvent(sensitivity=2 * clip, sigma=randomizer.sigma)
    mu = math.sqrt(reports) * 2 * clip / randomizer.sigma
    assert gaussian_mu({randomizer.user_event: reports}) == pytest.approx(mu, rel=1e-12)
    closed_form = compose_epsilon({GaussianEvent(mu, 1.0): 1}, DELTA)  # the GDP curve of mu
    user_level = compose_epsilon({randomizer.user_event: reports}, DELTA)
    assert user_level == pytest.approx(closed_form, rel=1e-9)
    assert user_level == pytest.approx(true_figure, rel=1e-3)
    assert compose_epsilon({randomizer.event: reports}, DELTA) == pytest.approx(ledger_figure, rel=2e-3)
    laplace = DPInstanceEncodingLaplace(k=k, max_coefficient=cmax, masks=16, clip=clip, scale=2.0)
    assert laplace.user_event == LaplaceEvent(sensitivity=2 * clip, scale=2.0)  # L1: sum_t lambda_t 2C1 = 2C1
    assert TextHideRandomizer(k=k, masks=16).user_event == NoPrivacyEvent("texthide")


def test_fast_audits_of_dp_instance_encoding_stay_within_the_claim() -> None:
    options = {"k": 2, "max_coefficient": 0.5, "masks": 0, "clip": 1.0}
    gauss = DPInstanceEncodingGaussian.calibrated(1.0, DELTA, 1, options)
    result = fast_audit(gauss, dim=4, claimed=1.0)
    assert result.lower_bound <= 1.0 and result.verdict == "pass"
    laplace = DPInstanceEncodingLaplace.calibrated(1.0, DELTA, 1, options)
    result = fast_audit(laplace, dim=4, claimed=1.0)
    assert 0.3 < result.lower_bound <= 1.0 and result.verdict == "pass"


def test_texthide_has_no_privacy_and_the_audit_separates_it_perfectly() -> None:
    texthide = TextHideRandomizer(k=4, masks=16)
    assert texthide.event == NoPrivacyEvent("texthide")
    assert math.isinf(compose_epsilon({texthide.event: 1}, DELTA))
    assert math.isinf(compose_epsilon({texthide.event: 3, GaussianEvent(2.0, 3.0): 2}, DELTA))
    result = fast_audit(texthide, dim=4, claimed=math.inf, samples=5000)
    assert result.lower_bound > 6.0 and result.verdict == "pass"  # no claim to violate
    ledger = Ledger(3, Budget(100.0, DELTA))
    assert len(ledger.remaining([texthide.event], np.arange(3))) == 0  # no finite budget admits it
    with pytest.raises(ValueError, match="no differential-privacy guarantee"):
        TextHideRandomizer.calibrated(8.0, DELTA, 1, {"k": 4, "masks": 16})


@pytest.mark.parametrize(
    "params,match",
    [
        ({"mechanism": "dpie-gaussian", "k": 4, "max_coefficient": 0.1, "masks": 0, "clip": 1.0, "sigma": 1.0}, "max_coefficient"),
        ({"mechanism": "dpie-gaussian", "k": 0, "max_coefficient": 0.5, "masks": 0, "clip": 1.0, "sigma": 1.0}, "k"),
        ({"mechanism": "dpie-laplace", "k": 2, "max_coefficient": 0.5, "masks": -1, "clip": 1.0, "scale": 1.0}, "masks"),
        ({"mechanism": "dpie-laplace", "k": 2, "max_coefficient": 0.5, "masks": 0, "clip": 1.0}, "scale"),
        ({"mechanism": "texthide", "k": 4, "masks": 0}, "masks"),
    ],
)
def test_bad_parameters(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_randomizer(params)


def test_a_release_needs_at_least_k_rows() -> None:
    randomizer = DPInstanceEncodingGaussian(k=4, max_coefficient=0.5, masks=0, clip=1.0, sigma=1.0)
    with pytest.raises(ValueError, match="at least 4 rows"):
        randomizer.release(np.zeros((3, 2)), np.random.default_rng())
    assert make_randomizer(randomizer.params()).event == randomizer.event
