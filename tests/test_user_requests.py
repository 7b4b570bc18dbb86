"""A user's release path: validation, refusals, budget enforcement, reproducible noise.

Refusals come in two places, tested apart: malformed or too-cheap requests never pass
``parse_release_request`` (no user is involved), and well-formed requests the user cannot
afford are refused inside ``User.release``, which must leave the ledger as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest

from ldpfed.fed.device.entropy import simulation_engine
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.runtime.requests import ClientLimits, ReleaseRequest, RequestRefused, parse_release_request
from ldpfed.fed.runtime.user import BudgetExhausted, User, UserRecords

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


def _user(
    labels: PublicLabels | RandomizedResponse | None = None, budget: Budget = Budget(3.0, DELTA), train: int = 6
) -> User:
    """User 7 with ``train`` training and 2 query records; one release of SIGMA costs a record 3.0."""
    rng = np.random.default_rng(0)
    records = UserRecords(
        rng.normal(size=(train, 4)), rng.integers(0, 2, train), rng.normal(size=(2, 4)), np.array([0, 1])
    )
    return User(7, records, budget, labels or PublicLabels(2), seed=11)


HOSTILE = [
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA / 2})}, "floor"),
    ({"randomizer": '{"mechanism": "gaussian", "clip": 1.0, "sigma": NaN}'}, "not an accepted number"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1e308, "sigma": 1e308 * 10})}, "Infinity is not an accepted number"),
    # finite extremes JSON carries: each refused by name, never by the node's catch-all (issue 26)
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 1e308, "sigma": SIGMA})}, r"'clip': 1e\+308.* states no finite privacy event"),
    ({"randomizer": json.dumps({"mechanism": "dchi", "clip": 1.7976931348623157e308, "eta": 1.0})}, "states no finite privacy event"),
    ({"randomizer": json.dumps({"mechanism": "dpie-gaussian", "k": 4, "max_coefficient": 0.25, "masks": 16, "clip": 5e-324, "sigma": SIGMA})}, r"'clip': 5e-324.* states no finite"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": -0.0, "sigma": SIGMA})}, "clip must be a positive finite number, got -0.0"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 10**400, "sigma": SIGMA})}, "'clip' is an integer of 1329 bits, beyond the float range"),
    ({"randomizer": json.dumps({"mechanism": "gaussian", "clip": 10**30, "sigma": SIGMA})}, "floor"),
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
def test_hostile_requests_are_refused_at_parse(override: dict, message: str) -> None:
    # parsing alone refuses them: no user sees the request, so nothing is computed or spent
    with pytest.raises(RequestRefused, match=message):
        parse_release_request(_request(**override), LIMITS)


def _every_record_spent() -> tuple[User, ReleaseRequest]:
    user, request = _user(), parse_release_request(_request(records=0), LIMITS)
    user.release("train", request)  # one release costs every record its whole budget
    return user, request


def _beyond_user_budget() -> tuple[User, ReleaseRequest]:
    # one record's release (3.0) fits the user-level budget of 4.0; four records' do not
    return _user(budget=Budget(3.0, DELTA, epsilon_user=4.0)), parse_release_request(_request(records=4), LIMITS)


def _mixup_short_of_records() -> tuple[User, ReleaseRequest]:
    # plain averaging of k = 4 records: sensitivity 2 * 0.25 * sqrt(4) = 1, cheaper than the floor
    mixup = {"mechanism": "dpie-gaussian", "k": 4, "max_coefficient": 0.25, "masks": 0, "clip": 1.0, "sigma": SIGMA}
    return _user(train=3), parse_release_request(_request(randomizer=json.dumps(mixup), records=0), LIMITS)


REFUSED_BY_THE_USER = [
    pytest.param(_every_record_spent, "no train record has budget left", id="every-record-spent"),
    pytest.param(_beyond_user_budget, "user-level budget would be exceeded", id="user-level-budget"),
    pytest.param(_mixup_short_of_records, "mixes 4 records per report, 3 chosen", id="mixup-k-above-records"),
]


@pytest.mark.parametrize("setup,message", REFUSED_BY_THE_USER)
def test_requests_the_user_cannot_afford_are_refused_in_release_with_nothing_spent(
    setup: Callable[[], tuple[User, ReleaseRequest]], message: str
) -> None:
    user, request = setup()  # the request passed parsing: the refusal is the release path's
    before = (user.state.ledger.to_json(), user.state.calls)
    with pytest.raises(BudgetExhausted, match=message):
        user.release("train", request)
    assert (user.state.ledger.to_json(), user.state.calls) == before


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


def test_noise_is_fresh_per_release_and_reproducible_from_the_run_seed() -> None:
    request = parse_release_request(_request(records=0), LIMITS)
    twice = Budget(compose_epsilon({GaussianEvent(2.0, SIGMA): 2}, DELTA), DELTA)  # every record released twice
    with simulation_engine():
        user = _user(budget=twice)
        first, second = user.release("train", request), user.release("train", request)
        clean = request.randomizer.preprocess(user.records.train)
        assert len(first.reports) == len(second.reports) == len(clean)  # all six records, in order, both times
        assert not np.allclose(first.reports - clean, second.reports - clean)
        again = _user(budget=twice).release("train", request)
    np.testing.assert_array_equal(first.reports, again.reports)  # same run seed, same user: same first release
    outside = _user(budget=twice).release("train", request)
    assert not np.allclose(outside.reports, first.reports)  # outside the engine the OS draws the noise


def test_randomized_labels_are_charged() -> None:
    user = _user(RandomizedResponse(1.0, 2))
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0, {RandomizedResponse(1.0, 2).event: 1})
    request = parse_release_request(_request(randomizer=json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": sigma})), LIMITS)
    release = user.release("train", request)
    assert len(release.events) == 2
    ledger, label = user.state.ledger, RandomizedResponse(1.0, 2).event
    representation = GaussianEvent(2.0, sigma)  # clip 1: replace-one sensitivity 2
    assert set(ledger.events) == {representation, label}
    counts = ledger.record_counts()  # each released record: one representation and one label charge
    assert counts[ledger.events.index(label)].sum() == 3
    assert (counts[ledger.events.index(label)] == counts[ledger.events.index(representation)]).all()
    both = compose_epsilon({representation: 1, label: 1}, DELTA)  # 3.0 by the calibration above
    assert user.summary()["epsilon_sentence"] == pytest.approx(both, rel=1e-9) and both == pytest.approx(3.0, rel=1e-4)
    assert both > compose_epsilon({representation: 1}, DELTA) + 0.5  # the label's share is charged, not dropped
    assert user.summary()["epsilon_user"] == pytest.approx(compose_epsilon({representation: 3, label: 3}, DELTA), rel=1e-6)
