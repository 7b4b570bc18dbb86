"""Heterogeneity as a registry: an axis is one class and one registry entry.

The axis below exists only in this test. Registered, it is seen everywhere an axis is: the run spec
parses its option (and the CLI lists it), the registry assigns users to its groups from the seed, a
simulated node serves each group with the group's run options (here each club's user-level budget,
which the node's ledgers enforce), the server fits the largest-budget group's baseline where the axis
asks for it, central DP and the attacks refuse it as they refuse privacy tiers, and the reports group
users by it and carry its summary entry and privacy-report section. No module outside an axis's own
names that axis (its module, or its options by name), so none can special-case it.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.reporting.groups import heterogeneity_axes, participation
from ldpfed.fed.heterogeneity import registry
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis, ServedGroups
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.device.site import Site
from ldpfed.fed.configuration.option import Option
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.commands.simulate import add_arguments
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local

BUDGET = 1000.0
"""Club k's users have a user-level budget of BUDGET + k (large: it shows in the ledgers without refusing)."""


class Clubs(HeterogeneityAxis):
    """Test-only axis: user u is in club u mod --clubs, with its club's user-level budget."""

    name = "club"
    options = (Option("clubs", int, 0, "test only: clubs of users, user u in club u mod clubs (0: none)"),)

    def parse(self, values: Mapping[str, Any]) -> int | None:
        if values["clubs"] < 0:
            raise ValueError(f"--clubs must be at least 0, got {values['clubs']}")
        return values["clubs"] or None

    def assign(self, setting: int, users: int, seed: int) -> np.ndarray:
        return np.arange(users) % setting

    def group_names(self, setting: int) -> tuple[str, ...]:
        return tuple(f"club {k}" for k in range(setting))

    def overrides(self, setting: int, group: int) -> dict[str, Any]:
        return {"user_epsilon": BUDGET + group}

    def group_baseline(self, setting: int) -> bool:
        return True

    def summary(self, setting: int, groups: ServedGroups) -> dict[str, Any]:
        return {"clubs": [int((groups.group_of == k).sum()) for k in range(len(groups.specs))]}

    def report_lines(self, setting: int, spec: RunSpec, result: Mapping[str, Any], fmt: Callable[[Any], str]) -> list[str]:
        return ["## Clubs", "", f"users per club: {result['clubs']}; top club alone {fmt(result['accuracy_top_tier_only'])}"]


@pytest.fixture()
def clubs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with the test axis added: its one line."""
    monkeypatch.setattr(registry, "AXES", (*registry.AXES, Clubs()))


def test_an_unregistered_axis_is_unknown() -> None:
    with pytest.raises(ValueError, match="unknown run option 'clubs'"):
        RunSpec.from_mapping({"clubs": 2})


def test_a_registered_axis_is_parsed_listed_and_serialised(clubs: None) -> None:
    spec = RunSpec.from_mapping({"clubs": "3", "users": 7})
    assert spec.heterogeneity.setting("club") == 3
    assert spec.to_mapping()["clubs"] == 3 and RunSpec.from_mapping(spec.to_mapping()) == spec
    assert RunSpec().heterogeneity.setting("club") is None
    with pytest.raises(ValueError, match="--clubs must be at least 0, got -1"):
        RunSpec.of(clubs=-1)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--clubs", "2"]).clubs == 2
    assert "test only: clubs of users" in parser.format_help()


def test_a_registered_axis_assigns_users_and_sets_their_run_options(clubs: None, tmp_path: Path) -> None:
    spec = RunSpec.of(clubs=2, users=6, tiers="0.5:1,0.5:4")
    specs, group_of = registry.spec_groups(spec)
    tier_of = spec.heterogeneity.setting("privacy tier").assign(6, spec.seed)
    assert np.array_equal(group_of, tier_of * 2 + np.arange(6) % 2)  # with privacy tiers: one group per tier and club
    assert [(s.privacy.epsilon, s.privacy.user_epsilon) for s in specs] == [
        (1.0, BUDGET), (1.0, BUDGET + 1), (4.0, BUDGET), (4.0, BUDGET + 1)
    ]
    site = Site(True, spec, tmp_path, tmp_path / "ledger.sqlite", None)
    assert [(s, list(m)) for s, m in site.tiers()] == [(s, list(group_of)) for s in specs]
    (names, codes, groups), = [g for g in registry.reported_groups(spec) if g[0] == "club"]
    assert list(codes) == [0, 1, 0, 1, 0, 1] and groups == ("club 0", "club 1")
    assert [axis.name for axis in heterogeneity_axes(spec)] == ["club"]


def test_a_registered_axis_reaches_the_nodes_and_the_reports(clubs: None, tmp_path: Path) -> None:
    """A whole run: each user's ledger (kept by its node) holds its club's budget; users.csv and groups.md
    group users by club."""
    out = tmp_path / "run"
    spec = RunSpec.of(data="generated:300", public="none", dim=0, users=6, clubs=2, out=str(out), nonprivate_baseline=False)
    run_local(server_app, client_app, 1, spec.to_mapping())
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    assert {int(uid): Ledger.from_json(ledger).budget.epsilon_user for uid, ledger in ledgers.items()} == {
        uid: BUDGET + uid % 2 for uid in range(6)
    }
    with open(out / "users.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["club"] for row in rows] == [f"club {uid % 2}" for uid in range(6)]
    assert "club 1" in (out / "groups.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["clubs"] == [3, 3]  # the axis's summary entry
    assert summary["accuracy_top_tier_only"] is not None  # the baseline the axis asks for was fitted and evaluated
    report = (out / "privacy_report.md").read_text()
    assert f"users per club: [3, 3]; top club alone {summary['accuracy_top_tier_only']:.4g}" in report
    assert len(list(out.glob("policy-tier-*.toml"))) == 2  # each club's simulated policy


class Turnout(HeterogeneityAxis):
    """Test-only axis without options: it groups users by whether they took part, as the availability axis does."""

    name = "turnout"

    def parse(self, values: Mapping[str, Any]) -> None:
        return None

    def participation(self, took_part: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
        return np.where(took_part, 1, 0), ("stayed away", "came")


def test_the_groups_of_users_that_took_part_are_the_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    took_part = np.array([True, False, True])
    assert [(a.name, a.codes.tolist(), a.groups) for a in participation(took_part)] == [
        ("availability", [0, 1, 0], ("took part", "never took part"))
    ]
    assert [a.groups for a in participation(np.ones(2, bool))] == [("took part",)]  # a group without users is left out
    monkeypatch.setattr(registry, "AXES", (*registry.AXES, Turnout()))
    assert [(a.name, a.codes.tolist(), a.groups) for a in participation(took_part)][1:] == [
        ("turnout", [1, 0, 1], ("stayed away", "came"))
    ]


def test_a_registered_axis_that_sets_run_options_is_refused_where_groups_cannot_apply(clubs: None) -> None:
    with pytest.raises(ValueError, match="central trains on clean local data: --clubs 2 does not apply"):
        RunSpec.of(clubs=2, privacy_model="central", users=4, nodes=4, epsilon=3.0)


AXIS_ONLY = re.compile(r"heterogeneity\.(value|setting)\(\s*[\"']")
"""An axis's option or setting asked for by its literal name."""


def test_no_module_outside_an_axis_names_the_axis() -> None:
    """Site, strategy, reports and CLI reach axes through the registry only: no module outside
    fed/heterogeneity imports an axis's module or asks for one axis's option or setting by name."""
    root = Path(__file__).resolve().parents[1]
    axis_modules = {type(axis).__module__ for axis in registry.AXES}
    assert "ldpfed.fed.heterogeneity.tiers" in axis_modules
    found = []
    for top in ("fed", "strategies", "clients", "simulations"):
        for path in (root / top).rglob("*.py"):
            if path.is_relative_to(root / "fed" / "heterogeneity"):
                continue
            text = path.read_text()
            for node in ast.walk(ast.parse(text)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                found += [f"{path.relative_to(root)} imports {name}" for name in names if name in axis_modules]
            found += [f"{path.relative_to(root)}: {m.group(0)}" for m in AXIS_ONLY.finditer(text)]
    assert found == []
