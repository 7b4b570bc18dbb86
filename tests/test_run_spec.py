"""The run spec: typed sections, parsed and validated once, serialised for Flower as the flat run config it
always was, and parsed once per process by a node."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import ldpfed.clients.app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec, options
from ldpfed.fed.heterogeneity.tiers import Tiers

SAMPLE = {
    "data": "generated:300", "users": 10, "dim": 8, "mechanism": "laplace", "epsilon": 2.0, "tiers": "0.5:1,0.5:4",
    "device_tiers": "0.5:32,0.5:64", "sampling": "poisson:0.5", "rounds": 3, "inference": "remote",
    "availability": "beta:2:1", "device_speed": "lognormal:50:0.5:1000", "deadline": 3.0, "out": "runs/x", "seed": 4,
}


def test_each_option_lives_in_its_section() -> None:
    spec = RunSpec.of(**SAMPLE)
    assert (spec.data.data, spec.data.users, spec.encoder.dim) == ("generated:300", 10, 8)
    assert (spec.privacy.mechanism, spec.privacy.epsilon) == ("laplace", 2.0)
    assert (spec.schedule.rounds, spec.schedule.train_sampling.p) == (3, 0.5)
    assert (spec.evaluation.inference, spec.output.out, spec.seed) == ("remote", "runs/x", 4)
    assert spec.heterogeneity.value("tiers") == "0.5:1,0.5:4"


def test_the_flat_run_config_round_trips_in_the_order_of_the_options() -> None:
    spec = RunSpec.of(**SAMPLE)
    mapping = spec.to_mapping()
    assert list(mapping) == [option.name.replace("_", "-") for option in options()]
    assert RunSpec.from_mapping(mapping) == spec and hash(RunSpec.from_mapping(mapping)) == hash(spec)
    assert RunSpec.from_mapping({k: str(v) for k, v in mapping.items()}) == spec  # a run config of strings
    assert spec.with_options(epsilon=3.0).privacy.epsilon == 3.0 and spec.privacy.epsilon == 2.0
    with pytest.raises(ValueError, match="--users must be at least 1"):
        spec.with_options(users=0)  # changed options are validated anew


def test_an_axis_spec_is_parsed_once() -> None:
    spec = RunSpec.of(**SAMPLE)
    tiers = spec.heterogeneity.setting("privacy tier")
    assert tiers == Tiers.parse("0.5:1,0.5:4") and spec.heterogeneity.setting("privacy tier") is tiers
    assert spec.heterogeneity.setting("device tier").max_tokens == (32, 64)
    assert [axis.name for axis, _ in RunSpec().heterogeneity.active()] == ["availability"]  # on by default: everyone online


def test_a_node_parses_a_run_config_once_and_refuses_a_bad_one_every_time() -> None:
    run_config = RunSpec.of(**SAMPLE).to_mapping()
    first = client_app._spec(SimpleNamespace(run_config=run_config))
    assert client_app._spec(SimpleNamespace(run_config=dict(run_config))) is first
    hostile = {**run_config, "delta": 0.5}
    for _ in range(2):
        with pytest.raises(ValueError, match="--delta must be at most"):
            client_app._spec(SimpleNamespace(run_config=hostile))
