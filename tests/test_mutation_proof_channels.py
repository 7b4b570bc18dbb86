"""What leaves a node through a randomized-response channel is randomized, as its charge says (issue 26).

Charges and reply metadata (exact=False, keep probability) are checked elsewhere; these tests check
the released values themselves against their channel: over many records with known true values,
the share reported truthfully must match the keep probability within a binomial tolerance, and the
other values must come up uniformly. A node that sends true labels or exact evaluation bits while
charging randomized response fails them (its kept share is 1).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.runtime.cohort import Cohort
from ldpfed.fed.device.entropy import simulation_engine
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import RandomizedResponse
from ldpfed.fed.runtime.user import UserRecords

DELTA = 1e-5
LABEL_EPSILON = 1.0
NUM_LABELS = 3
USERS, TRAIN, QUERIES = 300, 6, 6
SIGNIFICANCE = 1e-6
"""Seeded draws: a test fails by chance about once in a million seeds."""


def _keep(epsilon: float, k: int) -> float:
    """P[randomized response reports the true value], from the channel's definition (not the code's)."""
    return math.exp(epsilon) / (math.exp(epsilon) + k - 1)


def _records(uid: int) -> UserRecords:
    """User ``uid``'s records: every training label is uid % NUM_LABELS; every query lies where the
    model of :func:`_oracle` predicts its label (so each evaluation bit is truly 1)."""
    rng = np.random.default_rng(uid)
    query_labels = rng.integers(0, 2, QUERIES)
    query = np.zeros((QUERIES, 4))
    query[:, 0] = np.where(query_labels == 0, 0.5, -0.5)
    return UserRecords(
        train=rng.normal(size=(TRAIN, 4)),
        train_labels=np.full(TRAIN, uid % NUM_LABELS),
        query=query,
        query_labels=query_labels,
    )


def _oracle() -> LinearModel:
    """A model that predicts every query of :func:`_records` correctly."""
    weights = np.zeros((4, 2))
    weights[0] = [1.0, -1.0]
    return LinearModel(weights, np.zeros(2))


def _host(folder: Path, cohort: bool, simulation: bool = True, evaluation: str = "none", labels: int = NUM_LABELS) -> NodeHost:
    randomizer = GaussianRandomizer(1.0, 5.0)
    channel = RandomizedResponse(LABEL_EPSILON, labels)
    plan = PrivacyPlan(randomizer, randomizer, channel, Budget(math.inf, DELTA))
    policy = DevicePolicy(
        math.inf, math.inf, DELTA, mechanisms=("gaussian",), labels=f"rr:{LABEL_EPSILON}", evaluation=evaluation,
        memoize=False, max_events=8,
    )
    records = {uid: _records(uid) for uid in range(USERS)}
    owner = lambda uid: f"user-{uid}"  # noqa: E731
    built = Cohort.build(records, owner) if cohort else None
    store = LedgerStore(folder / "ledgers.sqlite", durable=False)
    return NodeHost(records, plan, policy, store, owner, seed=3, simulation=simulation, cohort=built)


def _train_request() -> dict:
    return {"users": list(range(USERS)), "randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": 5.0}), "records": 0}


def assert_randomized_response(true: np.ndarray, reported: np.ndarray, epsilon: float, k: int) -> None:
    """Reported values follow k-ary randomized response at ``epsilon`` given the true ones: the kept
    share within a binomial test of e^eps / (e^eps + k - 1), every other value equally likely."""
    keep = _keep(epsilon, k)
    kept = int((reported == true).sum())
    n = len(true)
    assert stats.binomtest(kept, n, keep).pvalue > SIGNIFICANCE, f"{kept}/{n} kept, expected share {keep:.4f}"
    if k > 2:  # a flipped value is any other value, uniformly
        offsets = ((reported - true) % k)[reported != true]
        counts = np.bincount(offsets, minlength=k)[1:]
        assert stats.chisquare(counts).pvalue > SIGNIFICANCE, counts


@pytest.mark.parametrize("path", ["per-user", "cohort"])
def test_released_training_labels_follow_randomized_response(tmp_path: Path, path: str) -> None:
    """1,800 labels of a 3-valued channel at epsilon 1: kept with probability 0.576, not 1."""
    host = _host(tmp_path, cohort=path == "cohort")
    with simulation_engine():
        reply = host.release("train", _train_request())
    assert reply.label_channel == {"mechanism": "randomized_response", "epsilon": LABEL_EPSILON, "num_values": NUM_LABELS}
    assert len(reply.labels) == USERS * TRAIN and not reply.refusals
    assert_randomized_response(reply.users % NUM_LABELS, reply.labels, LABEL_EPSILON, NUM_LABELS)


def test_device_evaluation_bits_follow_binary_randomized_response(tmp_path: Path) -> None:
    """Every query is truly correct; the node's pooled count of reported-correct bits must be a
    Binomial(n, keep) draw, far below the exact count n."""
    host = _host(tmp_path, cohort=False, simulation=False, evaluation="rr:1.0")
    outcomes = host.evaluate({"m": _oracle()})
    n = USERS * QUERIES
    assert outcomes.total == {"m": n} and not outcomes.exact
    assert outcomes.keep_probability == pytest.approx(_keep(1.0, 2))
    correct = outcomes.correct["m"]
    assert stats.binomtest(correct, n, _keep(1.0, 2)).pvalue > SIGNIFICANCE, f"{correct} of {n} reported correct"
    assert correct < n


def test_the_label_channel_itself_randomizes_as_it_states() -> None:
    """RandomizedResponse.release on 20,000 known labels (seeded), binary and 4-ary."""
    rng = np.random.default_rng(5)
    for epsilon, k in ((1.0, 2), (0.5, 4), (3.0, 4)):
        true = rng.integers(0, k, 20_000)
        assert_randomized_response(true, RandomizedResponse(epsilon, k).release(true, rng), epsilon, k)
