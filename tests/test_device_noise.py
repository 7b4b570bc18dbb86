"""Noise a device can trust (issue 9, item 6): fed.privacy.noise's device sampler, tested three ways.

Its noise has the stated distribution (Kolmogorov-Smirnov), its cost is what the event states
(OpenDP's own privacy map against the closed form), and distinguishing attacks on
neighbouring inputs do not beat the event: the likelihood-ratio audit, and Mironov's
floating-point attack, which breaks the textbook sampler by orders of magnitude.
"""

from __future__ import annotations

import math
import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy import noise
from ldpfed.fed.device.entropy import generator, simulation_engine
from ldpfed.fed.privacy.noise import SecureGenerator, add_gaussian, add_laplace
from ldpfed.fed.device.policy import default_mechanisms
from ldpfed.fed.privacy.float_attack import float_attack_epsilon, is_numpy_laplace_draw
from ldpfed.fed.randomizers import RANDOMIZERS, make_randomizer
from ldpfed.fed.randomizers.auditing import audit, build_for_audit
from ldpfed.fed.randomizers.base import Randomizer

DELTA = 1e-5


def test_outside_the_engine_every_generator_is_chacha20_keyed_by_the_os_whatever_the_seed() -> None:
    draws = [generator(7, (0, 1)) for _ in range(2)]
    assert all(isinstance(g, SecureGenerator) and type(g.bit_generator).__name__ == "ChaCha" for g in draws)
    assert draws[0].random() != draws[1].random()
    with simulation_engine():
        seeded = [generator(7, (0, 1)) for _ in range(2)]
    assert not isinstance(seeded[0], SecureGenerator) and seeded[0].random() == seeded[1].random()


def test_a_keyed_generator_is_a_fixed_chacha20_stream() -> None:
    a, b = SecureGenerator.keyed(2**200 + 5), SecureGenerator.keyed(2**200 + 5)
    np.testing.assert_array_equal(a.standard_normal(8), b.standard_normal(8))
    assert SecureGenerator.keyed(6).random() != SecureGenerator.keyed(5).random()


@pytest.mark.parametrize("kind,scale", [("gaussian", 1.7), ("laplace", 0.6)])
def test_device_noise_has_the_stated_distribution(kind: str, scale: float) -> None:
    x = np.full((40, 100), 0.25)  # 4,000 draws on a non-zero input
    add, law = (add_gaussian, stats.norm(0.25, scale)) if kind == "gaussian" else (add_laplace, stats.laplace(0.25, scale))
    reports = add(x, scale, 1.0, SecureGenerator.from_os())
    assert stats.kstest(reports.ravel(), law.cdf).pvalue > 1e-6
    assert stats.kstest(SecureGenerator.from_os().random(4000), "uniform").pvalue > 1e-6  # the coins


@pytest.mark.parametrize(
    "params",
    [
        {"mechanism": "gaussian", "clip": 1.3, "sigma": 2.2},
        {"mechanism": "laplace", "clip": 0.7, "scale": 1.9},
        {"mechanism": "dpie-gaussian", "k": 4, "max_coefficient": 1.0, "masks": 16, "clip": 1.0, "sigma": 5.0},
        {"mechanism": "dpie-laplace", "k": 4, "max_coefficient": 1.0, "masks": 16, "clip": 1.0, "scale": 9.0},
    ],
)
def test_opendps_own_privacy_map_certifies_the_event_the_ledger_charges(params: dict) -> None:
    """Independent computation: OpenDP's map at the sensitivity the mechanism's own parameters give
    (replace-one: 2C for an L2 or L1 clip C; a mix of k rows weighted at most c: 2Cc sqrt(k) in L2,
    2Cck in L1) and its own noise equals the closed form of the event the ledger charges."""
    randomizer = make_randomizer(params)
    event = randomizer.event
    mix = params.get("max_coefficient", 1.0) * (math.sqrt(params["k"]) if params["mechanism"] == "dpie-gaussian" else params.get("k", 1))
    sensitivity = 2 * params["clip"] * mix
    if params["mechanism"].endswith("gaussian"):
        certified = noise._opendp_measurement("gaussian", params["sigma"]).map(sensitivity)
        stated = event.sensitivity**2 / (2 * event.sigma**2)  # rho of zCDP
    else:
        certified = noise._opendp_measurement("laplace", params["scale"]).map(sensitivity)
        stated = event.epsilon
    assert certified == pytest.approx(stated, rel=1e-12)
    assert certified <= stated * (1 + noise.ROUNDING)
    assert randomizer.release(np.ones((8, 4)), SecureGenerator.from_os()).shape[-1] == 4


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_the_noise_grid_moves_opendps_certificate_by_less_than_its_rounding(kind: str) -> None:
    """The sized measurement on the grid 2^k (fed.privacy.noise.grid_exponent) certifies, for sensitivities from 1e-300 to
    1e200 and up to a million coordinates, what the exact grid certifies, within OpenDP's own one-ulp rounding."""
    for sensitivity in (1e-300, 1e-20, 1e-3, 2.0, 1e10, 1e200):
        for size in (1, 16, 6_144, 1_000_000):
            for ratio in (0.5, 3.0):
                scale = sensitivity * ratio
                k = noise.grid_exponent(kind, sensitivity, size)
                assert k is None or noise.FINEST_GRID < k <= math.log2(sensitivity) - noise.GRID_MARGIN
                exact = noise._opendp_measurement(kind, scale).map(sensitivity)
                certified = noise._opendp_measurement(kind, scale, size if k is not None else None, k).map(sensitivity)
                stated = 0.5 * (sensitivity / scale) ** 2 if kind == "gaussian" else sensitivity / scale
                assert exact <= certified <= stated * (1 + noise.ROUNDING), (sensitivity, size, ratio, k, certified, stated)
    assert noise.grid_exponent(kind, 5e-324, 4) is None and noise.grid_exponent(kind, 1.0, 0) is None


@pytest.mark.parametrize("add", [add_gaussian, add_laplace])
def test_a_grid_too_coarse_for_the_sensitivity_releases_nothing(add: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid above the sensitivity's share of a coordinate would cost more than the event states: OpenDP's map says so
    and the device refuses to sample (the certificate check, not the margin, is what guarantees the charge)."""
    monkeypatch.setattr(noise, "GRID_MARGIN", -4)
    with pytest.raises(RuntimeError, match="above the event"):
        add(np.zeros((2, 8)), 2.0, 1.0, SecureGenerator.from_os())  # type: ignore[operator]


def test_a_sampler_whose_certificate_exceeds_the_event_releases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """If OpenDP's scale meant something else than the event's, the device would refuse to sample."""
    real = noise._opendp_measurement

    def halved(kind: str, scale: float, *grid: int | None) -> object:
        return real(kind, scale / 2, *grid)  # twice less noise than the event states

    monkeypatch.setattr(noise, "_opendp_measurement", halved)
    with pytest.raises(RuntimeError, match="above the event"):
        add_gaussian(np.zeros((1, 3)), 2.0, 1.0, SecureGenerator.from_os())
    with pytest.raises(RuntimeError, match="above the event"):
        add_laplace(np.zeros((1, 3)), 2.0, 1.0, SecureGenerator.from_os())


def test_mironovs_floating_point_attack_breaks_textbook_laplace_but_not_the_device_sampler() -> None:
    scale, shift = 20.0, 2.0  # epsilon = shift / scale = 0.1
    textbook = float_attack_epsilon(np.random.default_rng(0), scale, shift, 2000, DELTA)
    device = float_attack_epsilon(SecureGenerator.from_os(), scale, shift, 2000, DELTA)
    assert textbook > 3.0, f"the attack should prove epsilon >> 0.1 on numpy's sampler, got {textbook:.3g}"
    assert device <= shift / scale, f"the device sampler leaks: attack proves epsilon {device:.3g} > 0.1"


def test_the_attacks_membership_test_recognises_raw_numpy_draws() -> None:
    draws = np.random.default_rng(3).laplace(0.0, 1.5, size=300)
    assert all(is_numpy_laplace_draw(float(y), 1.5) for y in draws)
    assert np.mean([is_numpy_laplace_draw(float(y) + 0.3, 1.5) for y in draws]) < 0.5


DEVICE_AUDITS = {
    "gaussian": (3.0, 1e-2, {}, 0.4, 10_000),
    "laplace": (1.0, DELTA, {}, 0.5, 10_000),
    "randomized-response": (1.0, DELTA, {}, 0.5, 10_000),
    "sue": (3.0, DELTA, {}, 0.3, 500_000),
    "dpie-gaussian": (3.0, 1e-2, {"k": 2, "max_coefficient": 0.5, "masks": 0}, 0.4, 5_000),
}
"""mechanism -> (claimed epsilon, delta, options, power, samples): settings at which the audit sees
at least ``power`` of the claim, and catches the mechanism at half its noise (twice its epsilon for
randomized response and sue), as tests/test_mutation_proof_audits.py checks on seeded draws. sue at
epsilon 3 with 500,000 draws: at epsilon 1 even 100,000 draws see too little of the claim to catch twice it.
Gaussians at delta 1e-2: at 1e-5 the tails that set epsilon need ~1e6 draws. dpie-gaussian as plain
averaging without masks (c = 1/k): its secret coefficients are then fixed, the statistic optimal."""


@pytest.mark.parametrize("mechanism", sorted(DEVICE_AUDITS))
def test_the_distinguishing_audit_of_the_device_sampler_stays_within_the_claim(mechanism: str) -> None:
    """The device's noise comes from the OS and cannot be seeded, so the bound is taken at
    confidence 1 - 1e-6: a tight mechanism (randomized response) would otherwise show a
    lower bound above its claim in about one run in twenty.
    """
    epsilon, delta, options, power, samples = DEVICE_AUDITS[mechanism]
    case = build_for_audit(mechanism, epsilon, delta, 2, {"clip": 1.0, **options})
    result = audit(case, delta, samples, SecureGenerator.from_os(), confidence=1 - 1e-6)
    assert power * epsilon <= result.lower_bound <= result.claimed_epsilon, result


def test_every_default_device_mechanism_has_a_float_safe_sampler() -> None:
    assert all(RANDOMIZERS[name].float_safe for name in default_mechanisms())
    unsafe = {name for name, cls in RANDOMIZERS.items() if not cls.float_safe}
    assert unsafe == {"dchi", "snd"} and Randomizer.float_safe


def test_the_sampler_timing_script_prints_both_samplers(capsys: pytest.CaptureFixture[str]) -> None:
    from ldpfed.simulations.benchmarks import noise_speed

    assert noise_speed.main(["--repeats", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| device") or line.startswith("| engine")]
    assert len(rows) == 2 and all(line.count(" ms") == 4 for line in rows)
