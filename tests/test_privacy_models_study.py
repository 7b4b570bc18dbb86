"""The privacy-models study (issue 29 item 3): every setting's options give the user-level epsilon it is named after."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ldpfed.fed.privacy.gdp import epsilon_for_delta, mu_for_epsilon
from ldpfed.fed.privacy.shuffle import shuffled_epsilon
from ldpfed.simulations.study import load_study

CONFIG = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "studies" / "privacy_models.toml"
MATCH = 1e-3
"""Largest relative shortfall of a setting's user-level epsilon below its target (options are rounded down)."""


@pytest.fixture(scope="module")
def study():
    return load_study(CONFIG)


def _target(name: str) -> float:
    return float(re.fullmatch(r"(local|shuffle|central)-eps(\d+)", name).group(2))


def test_the_grid_is_three_tasks_by_three_models_by_three_epsilons_over_three_seeds(study) -> None:
    assert study.axes["task"] == ["sst2", "snips", "ag_news"]
    assert sorted({name.split("-")[0] for name in study.axes["setting"]}) == ["central", "local", "shuffle"]
    assert sorted({_target(name) for name in study.axes["setting"]}) == [1.0, 3.0, 8.0]
    assert study.seeds == (0, 1, 2) and len(study.runs()) == 81
    assert "accuracy_public_only" in study.baselines


def test_local_settings_compose_to_the_user_level_target_over_each_users_records(study) -> None:
    records = study.base["train_limit"] // study.base["users"]  # iid: every user holds exactly this many
    delta = study.base["delta"]
    for name, options in study.sets["setting"].items():
        if name.startswith("local"):
            assert options.get("mechanism", "gaussian") == "gaussian" and options["rounds"] == 1
            user = epsilon_for_delta(math.sqrt(records) * mu_for_epsilon(options["epsilon"], delta), delta)
            assert _target(name) * (1 - MATCH) <= user <= _target(name), name


def test_shuffle_settings_reach_the_target_after_shuffling_one_report_per_user(study) -> None:
    delta = study.base["delta"]
    for name, options in study.sets["setting"].items():
        if name.startswith("shuffle"):
            assert options["mechanism"] == "laplace" and options["privacy_model"] == "shuffle"
            assert options["rounds"] == 1 and options["records_per_user_round"] == 1
            central = shuffled_epsilon(study.base["users"], options["epsilon"], delta)
            assert _target(name) * (1 - MATCH) <= central <= _target(name), name


def test_central_settings_target_the_user_level_epsilon_with_one_user_per_node(study) -> None:
    for name, options in study.sets["setting"].items():
        if name.startswith("central"):
            assert options["privacy_model"] == "central" and options["epsilon"] == _target(name)
            assert options["nodes"] == study.base["users"]
