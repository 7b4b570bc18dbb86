"""The exponential mechanism as a label channel (seed 001) beside randomized response."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PureEpsilonEvent, RandomizedResponseEvent
from ldpfed.fed.randomizers.exponential import ExponentialMechanism, make_label_channel
from ldpfed.fed.randomizers.labels import RandomizedResponse
from tests.randomizer_helpers import DELTA, fast_audit


def test_release_follows_the_softmax_of_the_utility() -> None:
    utility = [[1.0, 0.5, 0.0], [0.5, 1.0, 0.5], [0.0, 0.5, 1.0]]
    mech = ExponentialMechanism(3.0, 3, utility)
    expected = np.exp(3.0 * np.asarray(utility) / (2 * 1.0))
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(mech.transition_matrix(), expected)
    out = mech.release(np.full(30_000, 2), np.random.default_rng(0))
    assert stats.chisquare(np.bincount(out, minlength=3), expected[2] * len(out)).pvalue > 1e-3


def test_identity_utility_is_randomized_response_at_half_epsilon() -> None:
    mech = ExponentialMechanism(2.0, 4)
    assert mech.event == RandomizedResponseEvent(1.0, 4)
    np.testing.assert_allclose(mech.transition_matrix(), RandomizedResponse(1.0, 4).transition_matrix())
    assert mech.exact_epsilon == pytest.approx(1.0)


def test_custom_utility_event_is_its_exact_pure_epsilon_at_most_the_published_one() -> None:
    mech = ExponentialMechanism(2.0, 3, [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    logp = np.log(mech.transition_matrix())
    exact = max(logp[y, r] - logp[y2, r] for y in range(3) for y2 in range(3) for r in range(3))
    assert isinstance(mech.event, PureEpsilonEvent) and mech.event.epsilon == pytest.approx(exact)
    assert exact <= 2.0
    assert compose_epsilon({mech.event: 1}, DELTA) <= exact + 1e-3


def test_fast_audit_stays_within_the_published_and_exact_epsilon() -> None:
    mech = ExponentialMechanism(2.0, 2)
    result = fast_audit(mech, dim=1, claimed=2.0)
    assert 0.7 < result.lower_bound <= 1.0 and result.verdict == "pass"


def test_label_channel_round_trip_and_bad_parameters() -> None:
    mech = ExponentialMechanism(1.0, 3, [[1, 0, 0], [0, 1, 0], [0, 0, 2]])
    assert make_label_channel(mech.params()).transition_matrix() == pytest.approx(mech.transition_matrix())
    assert isinstance(make_label_channel({"mechanism": "public", "num_values": 2}).transition_matrix(), np.ndarray)
    with pytest.raises(ValueError, match="epsilon"):
        ExponentialMechanism(-1.0, 2)
    with pytest.raises(ValueError, match="num_values"):
        ExponentialMechanism(1.0, 1)
    with pytest.raises(ValueError, match="utility"):
        ExponentialMechanism(1.0, 2, [[1.0, 0.0]])
    with pytest.raises(ValueError, match="sensitivity"):
        ExponentialMechanism(1.0, 2, [[1.0, 0.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="labels"):
        ExponentialMechanism(1.0, 2).release(np.array([3]), np.random.default_rng())
    assert math.isfinite(mech.exact_epsilon)
