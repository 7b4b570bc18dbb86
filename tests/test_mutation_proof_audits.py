"""Every distinguishing audit can fail: on its worst-case pair, at its CI settings, it catches the
mechanism at half its noise (issue 26).

Each audit test elsewhere asserts a lower bound at most the claim; that passes for any mechanism
if the audit has no power. Here the same settings run on seeded draws against a mutant with half
the noise (or, for randomized response and sue, twice the epsilon) and the bound must exceed the
claim, while the true mechanism's stays within it.
"""

from __future__ import annotations

import numpy as np
import pytest

from ldpfed.fed.privacy.audit import gaussian_llr, lr_epsilon_lower_bound
from ldpfed.fed.randomizers.auditing import audit, build_for_audit
from ldpfed.fed.randomizers.gaussian_variants import AnalyticGaussianRandomizer
from tests.randomizer_helpers import fast_audit
from tests.test_device_noise import DEVICE_AUDITS

CONFIDENCE = 1 - 1e-6
"""As the device-sampler audits (their draws cannot be seeded)."""


def _mutant(mechanism: str, epsilon: float, delta: float, options: dict):
    """The audit case of ``mechanism`` with half its noise (label and bit channels: twice the epsilon), claim kept."""
    if mechanism in ("randomized-response", "sue"):
        return build_for_audit(mechanism, 2 * epsilon, delta, 2, {"clip": 1.0, **options})
    return build_for_audit(mechanism, epsilon, delta, 2, {"clip": 1.0, **options}, noise_factor=0.5)


@pytest.mark.parametrize("mechanism", sorted(DEVICE_AUDITS))
def test_the_device_sampler_audit_settings_catch_half_the_noise(mechanism: str) -> None:
    epsilon, delta, options, power, samples = DEVICE_AUDITS[mechanism]
    honest = audit(build_for_audit(mechanism, epsilon, delta, 2, {"clip": 1.0, **options}), delta, samples, np.random.default_rng(1), CONFIDENCE)
    assert power * epsilon <= honest.lower_bound <= epsilon, honest
    caught = audit(_mutant(mechanism, epsilon, delta, options), delta, samples, np.random.default_rng(2), CONFIDENCE)
    assert caught.lower_bound > epsilon, caught


@pytest.mark.parametrize(
    "mechanism,options",
    [("gaussian-analytic", {}), ("dpie-laplace", {"k": 2, "max_coefficient": 0.5, "masks": 0})],
)
def test_the_audit_of_other_clip_and_noise_mechanisms_catches_half_the_noise(mechanism: str, options: dict) -> None:
    """ldpfed.fed.randomizers.auditing's worst pairs and fed.privacy.audit's bound, at epsilon 3, delta 1e-2, 10,000 draws."""
    honest = audit(build_for_audit(mechanism, 3.0, 1e-2, 2, {"clip": 1.0, **options}), 1e-2, 10_000, np.random.default_rng(1), CONFIDENCE)
    assert 1.2 <= honest.lower_bound <= 3.0, honest
    caught = audit(_mutant(mechanism, 3.0, 1e-2, options), 1e-2, 10_000, np.random.default_rng(2), CONFIDENCE)
    assert caught.lower_bound > 3.0, caught


def test_the_gaussian_variants_fast_audit_catches_half_the_noise() -> None:
    """The settings of test_randomizers_gaussian_variants' fast audit (epsilon 3, delta 1e-2, dim 8)."""
    randomizer = AnalyticGaussianRandomizer.calibrated(3.0, 1e-2, 1, {"clip": 1.0})
    half = AnalyticGaussianRandomizer(randomizer.clip, randomizer.sigma / 2)
    assert fast_audit(half, dim=8, claimed=3.0, delta=1e-2).lower_bound > 3.0
