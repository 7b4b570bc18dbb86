"""A user's release path: validation, refusals, budget enforcement, reproducible noise."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fed.privacy.calibration import calibrate_gaussian_sigma
from fed.privacy.composition import compose_epsilon
from fed.privacy.events import GaussianEvent
from fed.privacy.ledger import Budget
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.requests import ClientLimits, RequestRefused, parse_release_request
from fed.user import BudgetExhausted, User, UserRecords

DELTA = 1e-5
SIGMA = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0)
LIMITS = ClientLimits(max_release_epsilon=compose_epsilon({GaussianEvent(2.0, SIGMA): 1}, DELTA), delta=DELTA)


def _request(**overrides: object) -> dict:
    request = {
        "users": [7],
        "randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA}),
        "records": 3,
    }
    request.update(overrides)
    return request


def _user(labels: PublicLabels | RandomizedResponse | None = None) -> User:
    rng = np.random.default_rng(0)
    records = UserRecords(rng.normal(size=(6, 4)), rng.integers(0, 2, 6), rng.normal(size=(2, 4)), np.array([0, 1]))
    return User(7, records, Budget(3.0, DELTA), labels or PublicLabels(2), seed=11)


HOSTILE = [
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA / 2})}, "floor"),
    ({"randomizer": '{"mechanism": "gaussian", "clip": 1.0, "sigma": NaN}'}, "not an accepted number"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1e308, "sigma": 1e308 * 10})}, "randomizer"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": -1.0, "sigma": SIGMA})}, "clip"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0})}, "missing"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA, "x": 1})}, "unknown"),
    ({"randomizer": json.dumps({"mechanism": "identity"})}, "unknown mechanism"),
    ({"randomizer": "x" * 20_000}, "at most"),
    ({"records": 10**9}, "records"),
    ({"records": -1}, "records"),
    ({"records": 2.5}, "integer"),
    ({"users": []}, "users"),
    ({"users": [-3]}, "non-negative"),
    ({"users": list(range(200_000))}, "more than"),
]


@pytest.mark.parametrize("override,message", HOSTILE)
def test_hostile_requests_are_refused_with_nothing_spent(override: dict, message: str) -> None:
    user = _user()
    before = user.state.ledger.to_json()
    with pytest.raises(RequestRefused, match=message):
        request = parse_release_request(_request(**override), LIMITS)
        user.release("train", request)
    assert user.state.ledger.to_json() == before
    assert user.state.calls == 0


def test_release_spends_budget_without_replacement_then_refuses() -> None:
    user = _user()
    request = parse_release_request(_request(records=4), LIMITS)
    first = user.release("train", request)
    second = user.release("train", request)
    assert len(first.reports) == 4 and len(second.reports) == 2  # only records with budget left
    assert user.state.ledger.counts.sum() == 6 and user.state.ledger.counts.max() == 1
    before = user.state.ledger.to_json()
    with pytest.raises(BudgetExhausted):
        user.release("train", request)
    assert user.state.ledger.to_json() == before
    assert user.summary()["epsilon_sentence"] == pytest.approx(3.0, rel=1e-6)


def test_query_records_have_their_own_budget_and_no_labels() -> None:
    user = _user()
    release = user.release("query", parse_release_request(_request(records=0), LIMITS))
    assert release.labels is None and sorted(release.slots) == [0, 1]
    assert user.state.ledger.counts[:, :6].sum() == 0


def test_noise_is_reproducible_from_the_run_seed_and_fresh_per_call() -> None:
    request = parse_release_request(_request(records=0), LIMITS)
    a, b = _user().release("train", request), _user().release("train", request)
    np.testing.assert_array_equal(a.reports, b.reports)
    user = _user()
    first = user.release("query", request)
    assert not np.allclose(first.reports, user.release("train", request).reports[: len(first.reports)])


def test_randomized_labels_are_charged() -> None:
    user = _user(RandomizedResponse(1.0, 2))
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0, {RandomizedResponse(1.0, 2).event: 1})
    request = parse_release_request(_request(randomizer=json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": sigma})), LIMITS)
    release = user.release("train", request)
    assert len(release.events) == 2
    assert user.summary()["epsilon_sentence"] <= 3.0
    assert not math.isnan(user.summary()["epsilon_user"])
