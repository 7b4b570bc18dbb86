"""Issue 27: nodes read only the sections of the run spec they need.

Each reader below is given an object holding only the sections its signature names (fed.configuration.sections'
protocols) and must answer as it does for the whole RunSpec: a reader that reached for another section
would fail here. The plan is cached by its sections alone, so runs that differ elsewhere share it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.runtime.assets import build_bundle, check_public, default_cache_dir, load_public
from ldpfed.fed.configuration.plan import encoder_spec, make_plan
from ldpfed.fed.configuration.run_spec import RunSpec

SPECS = [
    RunSpec(),
    RunSpec.of(rounds=2, sampling="poisson:0.5", user_epsilon=20.0, epsilon=3.0),
    RunSpec.of(mechanism="laplace", epsilon=2.0, inference="remote", upsampling_q=0.5, answers=2),
]


def only(spec: RunSpec, *names: str) -> SimpleNamespace:
    """``spec``'s sections ``names`` and nothing else."""
    return SimpleNamespace(**{name: getattr(spec, name) for name in names})


PLAN = ("privacy", "encoder", "schedule", "evaluation")


@pytest.mark.parametrize("spec", SPECS)
def test_the_plan_and_the_simulated_policy_read_their_sections_only(spec: RunSpec) -> None:
    plan = make_plan(spec, 3, 4)
    assert make_plan(only(spec, *PLAN), 3, 4) is plan
    assert encoder_spec(only(spec, "privacy", "encoder")) == encoder_spec(spec)
    assert DevicePolicy.from_run(only(spec, "privacy", "encoder"), plan) == DevicePolicy.from_run(spec, plan)


def test_runs_that_differ_outside_the_plans_sections_share_the_plan(tmp_path: Path) -> None:
    spec = SPECS[0]
    other = spec.with_options(seed=spec.seed + 1, out=str(tmp_path), data="generated:999", availability="0.5")
    assert make_plan(other, 2) is make_plan(spec, 2)
    assert make_plan(spec.with_options(epsilon=4.0), 2) is not make_plan(spec, 2)


def test_the_assets_read_their_sections_only(tmp_path: Path) -> None:
    spec = RunSpec.of(public="generated:60", dim=0, cache_dir=str(tmp_path / "cache"), seed=5)
    assert default_cache_dir(only(spec, "output")) == default_cache_dir(spec) == tmp_path / "cache"
    public = load_public(only(spec, "data", "encoder", "seed"))
    assert public.texts == load_public(spec).texts and np.array_equal(public.labels, load_public(spec).labels)
    labels = [str(i) for i in range(public.num_labels)]
    assert check_public(only(spec, "data", "encoder", "seed"), public, labels) == check_public(spec, public, labels)
    bare = spec.with_options(public="none")
    assert np.array_equal(build_bundle(only(bare, *PLAN, "seed"), None, tmp_path), build_bundle(bare, None, tmp_path))
