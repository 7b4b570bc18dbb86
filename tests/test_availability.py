"""Simulated availability (--availability, --dropout): the draws, and offline users that release and spend nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.heterogeneity.availability import Availability, AvailabilityAxis
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local


@pytest.mark.parametrize("spec,dropout", [("0", 0.0), ("1.5", 0.0), ("often", 0.0), ("beta:1", 0.0), ("beta:0:1", 0.0), ("1", 1.0), ("1", -0.1)])
def test_bad_availability_is_refused_by_name(spec: str, dropout: float) -> None:
    with pytest.raises(ValueError, match="--availability|--dropout"):
        RunSpec.of(availability=spec, dropout=dropout)


def test_the_draws_have_the_stated_rates_and_follow_the_seed() -> None:
    users = 20_000
    half = Availability("0.3")
    online = half.online(users, 1, seed=0)
    assert abs(online.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / users)
    assert np.array_equal(online, half.online(users, 1, seed=0)) and not np.array_equal(online, half.online(users, 2, seed=0))
    beta = Availability("beta:2:1")
    p = beta.probabilities(users, seed=0)
    assert abs(p.mean() - 2 / 3) < 0.01 and abs(beta.online(users, 1, 0).mean() - 2 / 3) < 0.02
    leaving = Availability("1", dropout=0.2)
    for r in (1, 2, 4):
        assert abs(leaving.online(users, r, 0).mean() - 0.8 ** (r - 1)) < 0.02
    assert not np.any(leaving.online(users, 3, 0) & ~leaving.online(users, 2, 0))  # gone for good
    assert Availability().always and not half.always


def test_offline_users_release_nothing_and_spend_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=30, nodes=2, rounds=3, availability="0.4", dropout=0.2, out=str(out),
        nonprivate_baseline=False,
    )
    run_local(server_app, client_app, 2, config.to_mapping())
    rule = config.heterogeneity.setting(AvailabilityAxis.name)
    online = [set(np.flatnonzero(rule.online(30, r, config.seed)).tolist()) for r in (1, 2, 3)]
    ever = set().union(*online)
    assert 0 < len(ever) < 30
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    spent = {int(u) for u, ledger in ledgers.items() if Ledger.from_json(ledger).releases()}
    assert spent == ever  # one release per record: a user online in some round releases once, the others never
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rounds[0]["users_sampled"] == len(online[0]) and rounds[0]["users_offline"] == 30 - len(online[0])
