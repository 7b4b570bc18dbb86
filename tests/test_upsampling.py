"""Inference up-sampling (seed 000 Alg. 3): fictitious queries cost nothing, every true release is
charged, steps stop at k answers, the server cannot tell true from fictitious, answers are checked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ks_2samp, kstest

from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.runtime.requests import ClientLimits, RequestRefused, parse_release_request
from ldpfed.fed.privacy.sampling import UpSampling
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.runtime.user import PENDING_FICTITIOUS, BudgetExhausted, QueriesDone, User, UserRecords

DELTA = 1e-5
CLIP = 1.0


def _records(n_query: int = 12, n_train: int = 5, dim: int = 6, seed: int = 0) -> UserRecords:
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(n_query, dim)) * 3  # norms above the clip: clipped onto the sphere, like fictitious ones
    return UserRecords(rng.normal(size=(n_train, dim)), rng.integers(0, 2, n_train), query, rng.integers(0, 2, n_query))


def _request(up: UpSampling, sigma: float):
    raw = {"users": [1], "randomizer": json.dumps({"mechanism": "gaussian", "clip": CLIP, "sigma": sigma}), "records": 0, "sampling": up.spec}
    limits = ClientLimits(compose_epsilon({GaussianEvent(2 * CLIP, sigma): 1}, DELTA), DELTA, sampling=up.spec)
    return parse_release_request(raw, limits)


def _answer_all(user: User, release, k: int) -> bool:
    """What an honest server does: score every released slot (here: random scores)."""
    scores = np.random.default_rng(len(release.slots)).normal(size=(len(release.slots), 2))
    return user.take_answers(release.slots, scores, k)


def _run(user: User, up: UpSampling, sigma: float, limit: int = 500) -> list:
    request, releases = _request(up, sigma), []
    for _ in range(limit):
        try:
            release = user.release("query", request)
        except (QueriesDone, BudgetExhausted):
            break
        releases.append(release)
        _answer_all(user, release, up.k)
    return releases


def test_fictitious_releases_cost_nothing_and_every_true_release_is_charged() -> None:
    up = UpSampling(q=0.25, p=0.3, k=2)
    user = User(1, _records(), Budget(1e6, DELTA), PublicLabels(2), seed=4)
    ledger = user.state.ledger
    n_train = len(user.records.train)
    request = _request(up, 3.0)
    fictitious_total = 0
    while True:
        before = ledger.counts[0, n_train:].copy() if ledger.counts.size else np.zeros(12, np.int64)
        try:
            release = user.release("query", request)
        except QueriesDone:
            break
        pending = np.asarray(user.state.extra["queries"]["pending"])
        after = ledger.counts[0, n_train:]
        true_items = pending[pending >= 0]
        # exactly the released true queries were charged, once each; fictitious slots cost nothing
        np.testing.assert_array_equal(after - before, np.bincount(true_items, minlength=12))
        fictitious_total += int((pending == PENDING_FICTITIOUS).sum())
        assert len(release.reports) == len(pending)
        _answer_all(user, release, up.k)
    st = user.state.extra["queries"]
    assert fictitious_total == st["released_fictitious"] > 0
    assert int(ledger.counts[0, n_train:].sum()) == st["released_true"] == sum(st["counts"])
    assert (ledger.counts[0, :n_train] == 0).all()
    assert up.fictitious(12) == 36  # the mixed set holds fictitious items at share 1 - q


def test_steps_stop_once_every_true_query_has_k_answers() -> None:
    up = UpSampling(q=0.5, p=0.2, k=3)
    user = User(1, _records(), Budget(1e6, DELTA), PublicLabels(2), seed=7)
    request = _request(up, 3.0)
    finished = False
    steps = 0
    while not finished:
        counts_before = np.asarray(user.state.extra.get("queries", {"counts": [0]})["counts"])
        assert (counts_before < up.k).any()  # never a step once every query is done
        release = user.release("query", request)
        finished = _answer_all(user, release, up.k)
        steps += 1
    counts = np.asarray(user.state.extra["queries"]["counts"])
    assert counts.min() >= up.k and steps > up.k
    with pytest.raises(QueriesDone):
        user.release("query", request)
    result = user.query_result(up.k)
    assert result["complete"] == result["total"] == 12 and result["steps"] == steps
    assert result["answers"] == counts.sum() == result["released_true"]


def test_worst_case_caps_each_true_query_at_its_budget_with_fictitious_stand_ins() -> None:
    up = UpSampling(q=0.5, p=0.6, k=2)
    sigma = GaussianRandomizer.calibrated(2.0, DELTA, up.k, {"clip": CLIP}).sigma
    user = User(1, _records(), Budget(2.0, DELTA), PublicLabels(2), seed=1)
    releases = _run(user, up, sigma)
    ledger = user.state.ledger
    counts = ledger.counts[0, len(user.records.train):]
    assert (counts == up.k).all()  # every true query exactly k releases: never more, whatever was sampled
    assert ledger.sentence_epsilon() <= 2.0
    st = user.state.extra["queries"]
    expected_mixed = sum(len(r.reports) for r in releases)
    assert st["released_true"] + st["released_fictitious"] == expected_mixed


def test_the_server_sees_slots_not_which_query_is_true() -> None:
    up = UpSampling(q=0.5, p=1.0, k=40)
    user = User(1, _records(n_query=10, dim=8), Budget(1e6, DELTA), PublicLabels(2), seed=2)
    request = _request(up, 0.5)
    true_norms, fict_norms, positions = [], [], []
    jitter = np.random.default_rng(0)
    for _ in range(40):
        release = user.release("query", request)
        pending = np.asarray(user.state.extra["queries"]["pending"])
        assert sorted(release.slots.tolist()) == list(range(len(release.reports)))  # opaque positions
        assert release.labels is None and release.reports.shape[1] == 8
        norms = np.linalg.norm(release.reports, axis=1)
        true_norms += norms[pending >= 0].tolist()
        fict_norms += norms[pending == PENDING_FICTITIOUS].tolist()
        true_slots = np.flatnonzero(pending >= 0)
        positions += ((true_slots + jitter.random(len(true_slots))) / len(pending)).tolist()  # uniform within a slot
        _answer_all(user, release, up.k)
    # same randomizer, same dimension, clean norms both at the clip: report norms are alike
    assert ks_2samp(true_norms, fict_norms).pvalue > 1e-3
    # shuffled in every step: a true query's slot is uniform among the step's slots (400 positions;
    # true queries first, last, or in any fixed place would fail)
    assert len(positions) == 400 and kstest(positions, "uniform").pvalue > 1e-4


def _host(up: UpSampling, sigma: float, folder: Path) -> NodeHost:
    randomizer = GaussianRandomizer(CLIP, sigma)
    plan = PrivacyPlan(randomizer, randomizer, PublicLabels(2), Budget(1e6, DELTA), upsampling=up)
    policy = DevicePolicy(1e6, math.inf, DELTA, mechanisms=("gaussian",), labels="public", memoize=False)
    store = LedgerStore(folder / "ledger.sqlite", durable=False)
    return NodeHost({1: _records(), 2: _records(seed=1)}, plan, policy, store, lambda uid: f"user-{uid}", seed=0)


def test_answers_are_validated_before_any_state_changes(tmp_path: Path) -> None:
    up = UpSampling(q=0.5, p=0.5, k=2)
    host = _host(up, 3.0, tmp_path)
    raw = {"users": [1, 2], "randomizer": json.dumps({"mechanism": "gaussian", "clip": CLIP, "sigma": 3.0}), "records": 0, "sampling": up.spec}
    reply = host.release("query", raw)
    before = host.sessions_json()
    m = len(reply.reports)
    scores = np.zeros((m, 2))
    hostile = [
        (reply.users, reply.slots + 1000, scores, "did not release"),
        (np.concatenate([reply.users, reply.users[:1]]), np.concatenate([reply.slots, reply.slots[:1]]), np.zeros((m + 1, 2)), "twice"),
        (reply.users, reply.slots, np.zeros((m, 3)), "scores per slot"),
        (reply.users, reply.slots, np.full((m, 2), np.nan), "NaN"),
        (np.full(m, 9), reply.slots, scores, "not hosted"),
    ]
    for users, slots, s, reason in hostile:
        with pytest.raises(RequestRefused, match=reason):
            host.answer(users, slots, s)
        assert host.sessions_json() == before
    assert host.answer(reply.users, reply.slots, scores) == []
    with pytest.raises(RequestRefused, match="already answered"):
        host.answer(reply.users, reply.slots, scores)


def test_amplified_enforcement_stops_query_steps_at_the_pld_budget() -> None:
    up = UpSampling(q=0.5, p=0.5, k=50)  # k never reached: the budget ends the steps
    epsilon, steps = 2.0, 4
    z = calibrate_noise_multiplier("pld", epsilon, DELTA, steps, up.p).noise_multiplier
    user = User(1, _records(), Budget(epsilon, DELTA), PublicLabels(2), seed=3, enforce="amplified")
    releases = _run(user, up, sigma=z * 2 * CLIP)
    assert len(releases) == steps
    with pytest.raises(BudgetExhausted, match="amplified query budget"):
        user.release("query", _request(up, z * 2 * CLIP))
    assert user.amplified_epsilon() <= epsilon
    result = user.query_result(up.k)
    assert result["complete"] == 0 and result["answered"] > 0
