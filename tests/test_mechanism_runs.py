"""Every registry mechanism runs end to end (in-process ClientApp + ServerApp), and the run's
ledger charges the TRUE cost that the randomizer's own event states (issue 3); for the Gaussians,
Laplace and d_chi also the cost computed from the mechanism's own parameters (tests/true_cost.py,
issue 26), so that a wrong event cannot pass."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.config import MECHANISMS
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.sections import parse_mechanism_options
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local
from tests.true_cost import true_epsilon

CASES = {
    "gaussian": dict(epsilon=8.0),
    "gaussian-classical": dict(epsilon=0.9),
    "gaussian-analytic": dict(epsilon=8.0),
    "laplace": dict(epsilon=8.0, clip=6.0),
    "dchi-eta": dict(mechanism="dchi", epsilon=3.0, mechanism_options="eta=20"),
    "sue": dict(epsilon=8.0),
    "oue": dict(epsilon=8.0, mechanism_options="integer_bits=2,fraction_bits=2"),
    "ome": dict(epsilon=1.0, mechanism_options="lambda=100"),
    "dpie-gaussian": dict(epsilon=8.0, mechanism_options="k=2,masks=4,max_coefficient=0.75"),
    "dpie-laplace": dict(epsilon=8.0, clip=6.0),
    "texthide": dict(epsilon=1.0, mechanism_options="k=4,masks=16"),
    "snd": dict(epsilon=20000.0, dim=0, mechanism_options="length=8"),
}


def test_config_mechanisms_match_the_registry() -> None:
    assert set(MECHANISMS) == set(RANDOMIZERS)


def test_mechanism_options_parse_and_errors() -> None:
    assert parse_mechanism_options("lambda=100,integer_bits=2,post_clip=1.5,allow_invalid=true,x=abc") == {
        "lambda": 100, "integer_bits": 2, "post_clip": 1.5, "allow_invalid": True, "x": "abc"
    }
    assert parse_mechanism_options("") == {}
    for bad, message in (("lambda", "key=value"), ("a=1,a=2", "twice"), ("clip=2", "--clip")):
        with pytest.raises(ValueError, match=message):
            RunSpec.of(mechanism="ome", mechanism_options=bad)
    with pytest.raises(ValueError, match="--mechanism"):
        RunSpec.of(mechanism="rot13")
    with pytest.raises(ValueError, match="--sigma"):
        RunSpec.of(mechanism="laplace", sigma=1.0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_mechanism_runs_and_its_ledger_charges_the_true_cost(case: str, tmp_path: Path) -> None:
    values = dict(
        mechanism=case, data="generated:200", public="generated:200", users=4, nodes=2, rounds=2, users_per_round=0,
        out=str(tmp_path), nonprivate_baseline=False,
    )
    values.update(CASES[case])
    mixup = case in ("dpie-gaussian", "dpie-laplace", "texthide")
    values["save_reports"] = mixup
    config = RunSpec.from_mapping(values)
    run_local(server_app, client_app, 2, config.to_mapping())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["errors"] == []
    assert summary["releases"] > 0
    assert summary["accuracy_local"] is not None
    plan = make_plan(config, 2)
    ledgers = json.loads((tmp_path / "ledgers.json").read_text())["users"]
    for state in ledgers.values():
        state["budget"] = {k: float(v) for k, v in state["budget"].items()}  # JSON writes inf as "inf"
        ledger = Ledger.from_json(state)
        most = int(ledger.counts.max(initial=0))
        expected = compose_epsilon({plan.train.event: most}, config.privacy.delta) if most else 0.0
        assert ledger.sentence_epsilon() == pytest.approx(expected, rel=1e-9)
        true = true_epsilon(plan.train.params(), most, config.privacy.delta)  # from sigma, clip, scale, eta: not the event
        if true is not None:
            assert ledger.sentence_epsilon() == pytest.approx(true, rel=1e-6)
        assert ledger.sentence_epsilon() <= plan.budget.epsilon_sentence
    if case == "texthide":
        assert math.isinf(float(summary["epsilon_sentence_max"]))
    else:
        assert math.isfinite(summary["epsilon_sentence_max"])
    if case == "snd":  # users that run only the embedding layer: the shipped denoiser on their query releases
        assert summary["accuracy_local_denoised"] is not None
    if case == "ome":
        assert summary["epsilon_sentence_max"] > 1000  # true cost, far above the published 1
    if mixup:  # labels travel mixed with the reports' own coefficients: soft rows summing to one
        labels = np.load(tmp_path / "reports.npz")["labels"]
        assert labels.shape == (summary["releases"], 4)  # the generated corpus has 4 topics
        np.testing.assert_allclose(labels.sum(axis=1), 1.0)
        assert ((labels > 0) & (labels < 1)).any()
