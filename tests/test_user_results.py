"""Per-user and per-group results: exact per-user outcomes from a simulated node (the same on the
per-user and the cohort path, summing to the pooled counts), none from a device, and the spread,
fairness and group figures computed from them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed import protocol
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.runtime.cohort import Cohort
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.learning.evaluation import Outcomes, UserOutcomes
from ldpfed.fed.reporting.groups import SIZE, TIER, UserAttributes, label_skew, quartiles, tiers
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.data.population import Population
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.runtime.user import UserRecords
from ldpfed.fed.reporting.user_results import UserResults, group_summary, round_metrics, spread, tier_gap

DELTA = 1e-5
MODELS = {name: LinearModel(np.random.default_rng(i).normal(size=(4, 2)), np.zeros(2)) for i, name in enumerate(("private", "public_only"))}


def _owner(uid: int) -> str:
    return f"user-{uid}"


def _records(users: int = 40) -> dict[int, UserRecords]:
    """Users with 0-5 queries (some none), at user ids that are not 0..n-1."""
    rng = np.random.default_rng(1)
    records = {}
    for uid in range(users):
        n_train, n_query = int(rng.integers(1, 4)), int(rng.integers(0, 6))
        records[uid * 2 + 1] = UserRecords(
            rng.normal(size=(n_train, 4)), rng.integers(0, 2, n_train), rng.normal(size=(n_query, 4)), rng.integers(0, 2, n_query)
        )
    return records


def _host(folder: Path, records: dict[int, UserRecords], simulation: bool, cohort: bool = False) -> NodeHost:
    randomizer = GaussianRandomizer(1.0, 2.0)
    plan = PrivacyPlan(randomizer, randomizer, PublicLabels(2), Budget(9.0, DELTA))
    policy = DevicePolicy(9.0, 50.0, DELTA, mechanisms=("gaussian",), labels="public", evaluation="rr:1.0")
    store = LedgerStore(folder / "ledger.sqlite", durable=False)
    built = Cohort.build(records, _owner) if cohort else None
    return NodeHost(records, plan, policy, store, _owner, seed=0, simulation=simulation, cohort=built)


def test_simulated_node_returns_exact_per_user_outcomes_on_both_paths(tmp_path: Path) -> None:
    records = _records()
    users_path = _host(tmp_path / "a", records, simulation=True).evaluate(MODELS)
    cohort_path = _host(tmp_path / "b", records, simulation=True, cohort=True).evaluate(MODELS)
    held = [uid for uid in sorted(records) if len(records[uid].query)]
    for outcomes in (users_path, cohort_path):
        per_user = outcomes.per_user
        assert outcomes.exact and per_user is not None
        assert per_user.users.tolist() == held  # users without queries are left out
        assert per_user.queries.tolist() == [len(records[u].query) for u in held]
        for name, model in MODELS.items():
            expected = [int((model.predict(records[u].query) == records[u].query_labels).sum()) for u in held]
            assert per_user.correct[name].tolist() == expected
            assert outcomes.correct[name] == sum(expected) and outcomes.total[name] == per_user.queries.sum()
    # through the protocol and back, as the server reads it
    read = protocol.read_outcomes_reply(protocol.outcomes_reply(cohort_path))
    assert read.per_user is not None and read.per_user.users.tolist() == held
    assert {k: v.tolist() for k, v in read.per_user.correct.items()} == {k: v.tolist() for k, v in cohort_path.per_user.correct.items()}


def test_per_user_outcomes_never_leave_a_device(tmp_path: Path) -> None:
    records = _records(6)
    outcomes = _host(tmp_path, records, simulation=False).evaluate(MODELS)
    assert not outcomes.exact and outcomes.per_user is None  # only pooled randomized bits
    content = protocol.outcomes_reply(outcomes)
    assert list(content.array_records) == [] and protocol.read_outcomes_reply(content).per_user is None
    leaked = UserOutcomes(np.array([1]), np.array([3]), {"private": np.array([2])})
    with pytest.raises(ValueError, match="simulation only"):
        Outcomes({"private": 2}, {"private": 3}, exact=False, keep_probability=0.7, per_user=leaked)


def test_spread_fairness_and_tier_gap() -> None:
    accuracy = np.array([np.nan, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.0])
    figures = spread(accuracy)
    values = accuracy[1:]
    assert figures["users_evaluated"] == 11
    assert figures["p10"] == pytest.approx(np.percentile(values, 10)) and figures["p50"] == pytest.approx(0.5)
    assert figures["worst10_mean"] == pytest.approx((0.0 + 0.1) / 2)  # ceil(10% of 11) = 2 users
    assert figures["variance"] == pytest.approx(values.var())
    assert spread(np.full(3, np.nan))["mean"] is None
    axis = tiers(np.array([8.0, 1.0, 8.0, 1.0] * 3))
    assert axis.groups == ("epsilon 1", "epsilon 8")
    groups = {TIER: {g: spread(accuracy[m]) for g, m in axis.members()}}
    means = [accuracy[m][np.isfinite(accuracy[m])].mean() for _, m in axis.members()]
    assert tier_gap(groups) == pytest.approx(abs(means[1] - means[0]))
    assert tier_gap({TIER: {"epsilon 8": groups[TIER]["epsilon 8"]}}) is None


def test_quartiles_keep_equal_values_together() -> None:
    same = quartiles(SIZE, np.full(10, 7.0), "records")
    assert same.groups == ("Q1: 7 records",) and (same.codes == 0).all()
    values = np.array([1, 2, 3, 4, 5, 6, 7, 8, np.nan])
    axis = quartiles(SIZE, values, "records")
    assert len(axis.groups) == 4 and axis.codes[-1] == -1 and axis.labels()[-1] == ""
    assert [int(m.sum()) for _, m in axis.members()] == [2, 2, 2, 2]
    assert axis.groups[0] == "Q1: 1-2 records"


def test_label_skew_and_group_summary() -> None:
    labels = np.array([0, 0, 1, 1, 0, 1, 0, 0])
    train = TextDataset("t", tuple("abcdefgh"), None, labels, ("neg", "pos"))
    dev = TextDataset("d", ("x", "y"), None, np.array([0, 1]), ("neg", "pos"))
    parts = (np.array([0, 1]), np.array([2, 3]), np.array([4, 5, 6, 7]))
    population = Population(train, dev, parts, (np.array([0]), np.array([1]), np.zeros(0, np.int64)))
    skew = label_skew(population)  # overall 5/8 label 0
    assert skew == pytest.approx([3 / 8, 5 / 8, 1 / 8])
    attributes = UserAttributes.from_population(population, np.array([1.0, 8.0, 8.0]))
    assert attributes.train_records.tolist() == [2, 2, 4] and attributes.query_records.tolist() == [1, 1, 0]
    attributes = attributes.with_budgets(np.array([np.nan, 3.0, np.nan]))
    assert attributes.budget.tolist() == [1.0, 3.0, 8.0]
    results = UserResults.pool([UserOutcomes(np.array([0, 1]), np.array([1, 1]), {"private": np.array([1, 0])})], 3)
    assert results.accuracy().tolist()[:2] == [1.0, 0.0] and math.isnan(results.accuracy()[2])
    axes = attributes.axes(np.array([True, True, False]))
    metrics = round_metrics(results, axes)
    assert metrics["users_evaluated"] == 2 and metrics["accuracy_tier_gap"] == pytest.approx(1.0)
    summary = group_summary(results, axes, np.array([0.5, 2.0, 0.0]), np.array([1.0, 4.0, 0.0]), np.array([2.0, 2.0, np.nan]))
    for axis in axes:
        rows = summary["axes"][axis.name]
        assert sum(g["users"] for g in rows.values()) == 3  # every user in exactly one group of each axis
        assert sum(g["users_evaluated"] for g in rows.values()) == 2
    assert summary["axes"]["availability"]["never took part"]["releases"] == 0
    assert summary["axes"][TIER]["epsilon 3"]["epsilon_sentence_max"] == 2.0
