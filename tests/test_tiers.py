"""Privacy tiers (--tiers): parsing, the seeded assignment, ledgers that show each tier's budget, and a
server that asks one tier with another tier's noise."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app as client_app
from ldpfed.fed.runtime.assets import build_bundle
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.fed.heterogeneity.registry import spec_groups
from ldpfed.fed.heterogeneity.tiers import Tiers
from ldpfed.strategies.app import app as server_app
from tests.local_grid import LocalGrid, run_local

TIERS = "0.5:1,0.3:3,0.2:8"


@pytest.mark.parametrize(
    "spec,problem",
    [
        ("0.5:1,0.5", "share:epsilon"),
        ("0.5:1,0.4:3", "sum to 1"),
        ("0.5:1,0.5:1", "its own epsilon"),
        ("1.5:1", "share must lie"),
        ("0.5:-1,0.5:2", "positive finite"),
        ("0.5:nan,0.5:2", "positive finite"),
        ("", "at least one"),
    ],
)
def test_malformed_tiers_are_refused_by_name(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Tiers.parse(spec)
    if spec:
        with pytest.raises(ValueError, match="--tiers"):
            RunSpec.of(tiers=spec)


def test_tiers_refuse_a_fixed_noise() -> None:
    with pytest.raises(ValueError, match="drop --sigma"):
        RunSpec.of(tiers=TIERS, sigma=2.0)
    with pytest.raises(ValueError, match="fixed parameters"):
        RunSpec.of(tiers=TIERS, mechanism="texthide", dim=0, public="none")


def test_the_assignment_has_the_planned_shares_and_follows_the_seed() -> None:
    tiers = Tiers.parse(TIERS)
    for users in (1, 7, 10, 333):
        counts = tiers.counts(users)
        assert counts.sum() == users and np.all(np.abs(counts - np.array([0.5, 0.3, 0.2]) * users) < 1)
        assert np.array_equal(np.bincount(tiers.assign(users, seed=3), minlength=3), counts)
    assert np.array_equal(tiers.assign(100, 0), tiers.assign(100, 0))
    assert not np.array_equal(tiers.assign(100, 0), tiers.assign(100, 1))
    configs, tier_of = spec_groups(RunSpec.of(users=20, tiers=TIERS))
    assert [c.privacy.epsilon for c in configs] == [1.0, 3.0, 8.0] and not any(c.heterogeneity.value("tiers") for c in configs)
    sigmas = [make_plan(c, 2).train.params()["sigma"] for c in configs]
    assert sigmas[0] > sigmas[1] > sigmas[2]


def test_each_tiers_ledgers_show_its_budget(tmp_path: Path) -> None:
    """A whole run: every user's worst-case ledger reaches its own tier's budget and no more,
    users.csv and the privacy report name the tiers, and each tier gets its own policy file."""
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=30, nodes=2, tiers=TIERS, out=str(out), nonprivate_baseline=False
    )
    run_local(server_app, client_app, 2, config.to_mapping())
    _, tier_of = spec_groups(config)
    budgets = np.array([1.0, 3.0, 8.0])[tier_of]
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    assert len(ledgers) == 30
    for uid, ledger in ledgers.items():
        spent = Ledger.from_json(ledger).sentence_epsilon()
        assert budgets[int(uid)] * 0.99 < spent <= budgets[int(uid)] * (1 + 1e-9), (uid, spent)
    with open(out / "users.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["epsilon_budget"]) for r in rows] == budgets.tolist()
    assert sorted({r["tier"] for r in rows}) == ["epsilon 1", "epsilon 3", "epsilon 8"]
    summary = json.loads((out / "summary.json").read_text())
    assert [t["users"] for t in summary["tiers"]] == [15, 9, 6]
    report = (out / "privacy_report.md").read_text()
    assert "## Privacy tiers" in report
    # The baseline classifier fed only the epsilon-8 tier's reports is scored by the same users.
    assert 0 <= summary["accuracy_top_tier_only"] <= 1
    assert f"on tier 3's reports alone: {summary['accuracy_top_tier_only']:.4g}" in report
    assert sorted(p.name for p in out.glob("policy*.toml")) == [f"policy-tier-{k}.toml" for k in (1, 2, 3)]
    assert "epsilon_sentence = 1.0" in (out / "policy-tier-1.toml").read_text()


@pytest.fixture()
def tiered_node(tmp_path: Path) -> tuple[LocalGrid, RunSpec]:
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=10, nodes=1, tiers="0.5:1,0.5:8", out=str(tmp_path / "run")
    )
    grid = LocalGrid(client_app, 1, config.to_mapping())
    bundle = build_bundle(config, None, tmp_path)
    setup = Message(RecordDict({"assets": ArrayRecord({"bundle": Array(bundle)})}), dst_node_id=1000, message_type=protocol.SETUP)
    (reply,) = grid.send_and_receive([setup])
    assert protocol.read_refusal(reply.content) is None
    return grid, config


def _train(grid: LocalGrid, content: RecordDict) -> Message:
    (reply,) = grid.send_and_receive([Message(content, dst_node_id=1000, message_type=protocol.TRAIN)])
    return reply


def _spent(grid: LocalGrid) -> int:
    (reply,) = grid.send_and_receive([Message(RecordDict(), dst_node_id=1000, message_type=protocol.LEDGER)])
    return sum(Ledger.from_json(ledger).releases() for ledger in protocol.read_ledger_reply(reply.content).values())


def test_a_server_cannot_ask_a_low_epsilon_tier_with_a_high_tiers_noise(tiered_node: tuple[LocalGrid, RunSpec]) -> None:
    """The attack: send every user the epsilon-8 tier's randomizer, alone or beside a valid part. The
    epsilon-1 users' policy refuses it, and the whole message releases and spends nothing."""
    grid, config = tiered_node
    configs, tier_of = spec_groups(config)
    low, high = (np.flatnonzero(tier_of == t).tolist() for t in (0, 1))
    plans = [make_plan(c, 2) for c in configs]

    def part(users: list[int], tier: int) -> protocol.Content:
        return protocol.release_request(users, plans[tier].train.params(), 0, plans[tier].train_sampling.spec)

    for content in (part(low + high, 1), protocol.release_parts([part(high, 1), part(low, 1)])):
        refused = protocol.read_refusal(_train(grid, FLOWER(content)).content)
        assert refused is not None and refused[0] == Refusal.POLICY and "floor" in refused[1]
        assert _spent(grid) == 0
    replies = protocol.read_release_replies(_train(grid, FLOWER(protocol.release_parts([part(high, 1), part(low, 0)]))).content)
    assert sorted(int(u) for r in replies for u in np.unique(r.users)) == sorted(low + high)
    assert {r.randomizer["sigma"] for r in replies} == {plans[0].train.params()["sigma"], plans[1].train.params()["sigma"]}
    assert _spent(grid) > 0


def test_malformed_request_parts_are_refused(tiered_node: tuple[LocalGrid, RunSpec]) -> None:
    grid, config = tiered_node
    plan = make_plan(spec_groups(config)[0][0], 2)
    good = FLOWER.record(protocol.release_request([0], plan.train.params(), 0, plan.train_sampling.spec)["request"])
    for content, problem in (
        (RecordDict({"request-1": good}), "named request"),
        (RecordDict({"request": good, "request-2": good}), "named request"),
        (RecordDict({f"request-{i}" if i else "request": good for i in range(65)}), "at most 64"),
    ):
        refused = protocol.read_refusal(_train(grid, content).content)
        assert refused is not None and refused[0] == Refusal.MALFORMED and problem in refused[1]
    assert _spent(grid) == 0
