"""Each of the owner's allow-lists and caps refuses on its own (issue 26).

Every test sends the SAME request to two nodes whose policies differ only in the one field under
test: the node whose policy allows it serves the request, so no other check refuses it; the other
must refuse it, naming the field, with nothing spent. A node without that check would serve both.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.runtime.requests import Refusal, RequestRefused
from ldpfed.fed.runtime.user import UserRecords

DELTA = 1e-5
DIM = 4
SIGMA_AT_3 = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0)
BASE: dict[str, Any] = dict(epsilon_sentence=3.0, epsilon_user=math.inf, delta=DELTA, labels="public", memoize=False)


def _host(folder: Path, **policy: Any) -> NodeHost:
    """A device node (OS noise, aggregates only) hosting one user of 6 training and 3 query records."""
    randomizer = GaussianRandomizer(1.0, SIGMA_AT_3)
    plan = PrivacyPlan(randomizer, randomizer, PublicLabels(2), Budget(3.0, DELTA))
    rng = np.random.default_rng(0)
    records = {0: UserRecords(rng.normal(size=(6, DIM)), rng.integers(0, 2, 6), rng.normal(size=(3, DIM)), np.array([0, 1, 1]))}
    folder.mkdir(parents=True, exist_ok=True)
    store = LedgerStore(folder / "ledger.sqlite", durable=False)
    return NodeHost(records, plan, DevicePolicy(**{**BASE, **policy}), store, lambda uid: "device", seed=None)


def _train(host: NodeHost, randomizer: dict[str, Any]) -> Any:
    return host.release("train", {"users": [0], "records": 0, "randomizer": json.dumps(randomizer)})


def _spent(host: NodeHost) -> int:
    return host.full_ledgers()[0].releases()


def _served_then_refused(
    tmp_path: Path, allowed: dict[str, Any], refused: dict[str, Any], act: Any, reason: str
) -> None:
    """``act(host)`` is served under the ``allowed`` policy and refused (POLICY, ``reason``) under ``refused``."""
    act(_host(tmp_path / "allowed", **allowed))
    host = _host(tmp_path / "refused", **refused)
    with pytest.raises(RequestRefused, match=reason) as error:
        act(host)
    assert error.value.code == Refusal.POLICY
    assert _spent(host) == 0


def test_policy_mechanisms_allow_list_alone_refuses_a_valid_request(tmp_path: Path) -> None:
    analytic = {"mechanism": "gaussian-analytic", "clip": 1.0, "sigma": 2 * SIGMA_AT_3}
    _served_then_refused(
        tmp_path, {"mechanisms": ("gaussian", "gaussian-analytic")}, {"mechanisms": ("gaussian",)},
        lambda host: _train(host, analytic), "mechanism 'gaussian-analytic' is not allowed by this device's policy",
    )


def test_policy_allow_invalid_alone_refuses_an_invalid_mechanism(tmp_path: Path) -> None:
    invalid = {"mechanism": "laplace-seed002", "clip": 1.0, "stated_epsilon": 1.0, "dim": DIM, "allow_invalid": True}
    mechanisms = {"mechanisms": ("laplace-seed002",)}
    _served_then_refused(
        tmp_path, {**mechanisms, "allow_invalid": True}, {**mechanisms, "allow_invalid": False},
        lambda host: _train(host, invalid), "has no valid guarantee",
    )


def test_policy_max_dim_alone_refuses_a_larger_size(tmp_path: Path) -> None:
    mixup = {"mechanism": "dpie-gaussian", "k": 2, "max_coefficient": 0.75, "masks": 8, "clip": 1.0, "sigma": 4 * SIGMA_AT_3}
    _served_then_refused(
        tmp_path, {"max_dim": 8}, {"max_dim": 7},
        lambda host: _train(host, mixup), r"'masks' 8 is above this device's limit of 7 \(policy: max_dim\)",
    )


def test_policy_max_release_epsilon_alone_refuses_a_release_above_it(tmp_path: Path) -> None:
    _served_then_refused(
        tmp_path, {"max_release_epsilon": 3.0}, {"max_release_epsilon": 2.5},
        lambda host: _train(host, {"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA_AT_3}), "floor of 2.5 per release",
    )


def test_policy_min_release_epsilon_alone_refuses_a_release_below_it(tmp_path: Path) -> None:
    """Issue 39 finding 4: a release of next to no cost would take a distinct-event slot for good."""
    sigma = calibrate_gaussian_sigma(0.15, DELTA, 1, 2.0)
    _served_then_refused(
        tmp_path, {"min_release_epsilon": 0.1}, {"min_release_epsilon": 0.2},
        lambda host: _train(host, {"mechanism": "gaussian", "clip": 1.0, "sigma": sigma}), "below this device's least of 0.2 per release",
    )


def _models(count: int) -> dict[str, LinearModel]:
    return {f"m{i}": LinearModel(np.eye(DIM, 2), np.zeros(2)) for i in range(count)}


def test_policy_max_models_alone_refuses_one_model_more(tmp_path: Path) -> None:
    _served_then_refused(
        tmp_path, {"evaluation": "rr:1.0", "max_models": 3}, {"evaluation": "rr:1.0", "max_models": 2},
        lambda host: host.evaluate(_models(3)), "3 models in one message; this device's policy allows 2",
    )


def test_policy_evaluation_none_alone_keeps_outcomes_on_the_device(tmp_path: Path) -> None:
    _served_then_refused(
        tmp_path, {"evaluation": "rr:1.0"}, {"evaluation": "none"},
        lambda host: host.evaluate(_models(1)), r'evaluation outcomes may not leave this device \(policy: evaluation = "none"\)',
    )


def test_policy_max_events_alone_refuses_a_new_event_past_the_cap(tmp_path: Path) -> None:
    """Two releases under different noise: the second event fits a cap of 2, not a cap of 1 (the user is refused)."""
    first = {"mechanism": "gaussian", "clip": 1.0, "sigma": 4 * SIGMA_AT_3}
    second = {"mechanism": "gaussian", "clip": 1.0, "sigma": 5 * SIGMA_AT_3}
    allowed = _host(tmp_path / "allowed", max_events=2, min_release_epsilon=0.0)  # no least: the cap alone
    capped = _host(tmp_path / "capped", max_events=1, min_release_epsilon=0.0)
    for host in (allowed, capped):
        assert len(_train(host, first).reports) == 6
    assert len(_train(allowed, second).reports) == 6
    reply = _train(capped, second)
    assert len(reply.reports) == 0 and "policy's cap of 1" in reply.refusals[0][1], reply.refusals
    assert _spent(capped) == 6  # the first release only


# -- what a setup bundle may be: checked by the ClientApp, on a device ----------------------------
@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import write_review_folder

    return write_review_folder(tmp_path_factory.mktemp("policy-data"), {"train": 8, "dev": 4}, "record ", seed=2)


def _write_policy(path: Path, **values: Any) -> Path:
    values = {"epsilon_sentence": 3.0, "epsilon_user": "inf", "labels": "public", **values}
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path


def _device(data: Path, folder: Path, policy: Path) -> Any:
    """A one-user device whose run (the server's) names MiniLM, not yet set up."""
    from ldpfed.clients.app import app
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.device.state import init_state
    from ldpfed.simulations.local_grid import LocalGrid

    run = RunSpec.from_mapping(dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0))
    node_config = {"data": str(data), "state-dir": str(init_state(folder / "state")), "policy": str(policy)}
    return LocalGrid(app, 1, run.to_mapping(), engine=False, node_configs=[node_config])


def _send(grid: Any, message_type: str, content: Any) -> tuple[str, str] | None:
    from flwr.app import Message

    from ldpfed.clients.app import FLOWER
    from ldpfed.fed import protocol

    (reply,) = grid.send_and_receive([Message(FLOWER(content), dst_node_id=1000, message_type=message_type)])
    assert not reply.has_error(), reply.error.reason
    return protocol.read_refusal(reply.content)


def _minilm_bundle(folder: Path) -> np.ndarray:
    from ldpfed.fed.runtime.assets import pack

    folder.mkdir()
    (folder / "encoder.txt").write_text("minilm")
    return pack(folder)


def test_policy_encoders_allow_list_alone_refuses_the_runs_own_encoder(data: Path, tmp_path: Path) -> None:
    """The bundle names the run's encoder (so the bundle-against-run check passes); only the owner's
    list refuses it: at setup, and (the owner narrowing the list later) at the next release."""
    from ldpfed.fed import protocol

    bundle = _minilm_bundle(tmp_path / "bundle")
    policy = _write_policy(tmp_path / "allowed.toml", encoders=["minilm"])
    assert _send(_device(data, tmp_path / "allowed", policy), protocol.SETUP, protocol.setup_request(bundle)) is None
    grid = _device(data, tmp_path / "refused", _write_policy(tmp_path / "refused.toml", encoders=["bilstm"]))
    refused = _send(grid, protocol.SETUP, protocol.setup_request(bundle))
    assert refused == (Refusal.POLICY, "encoder 'minilm' is not allowed by this device's policy (allowed: bilstm)")
    assert "node" not in grid.node_ctx[1000].state.config_records  # not set up

    grid = _device(data, tmp_path / "narrowed", _write_policy(tmp_path / "narrowed.toml", encoders=["minilm"]))
    assert _send(grid, protocol.SETUP, protocol.setup_request(bundle)) is None
    request = protocol.release_request([0], {"mechanism": "gaussian", "clip": 1.0, "sigma": SIGMA_AT_3}, 0, "all")
    _write_policy(tmp_path / "narrowed.toml", encoders=["bilstm"])  # the owner edits the policy file
    refused = _send(grid, protocol.TRAIN, request)
    assert refused == (Refusal.POLICY, "encoder 'minilm' is not allowed by this device's policy (allowed: bilstm)")
    _write_policy(tmp_path / "narrowed.toml", encoders=["minilm"])
    assert _send(grid, protocol.TRAIN, request) is None  # the same request, allowed again


def test_policy_max_bundle_bytes_alone_refuses_a_larger_bundle(data: Path, tmp_path: Path) -> None:
    from ldpfed.fed import protocol

    bundle = _minilm_bundle(tmp_path / "bundle")
    size = int(bundle.nbytes)
    allowed = _device(data, tmp_path / "allowed", _write_policy(tmp_path / "allowed.toml", max_bundle_bytes=size))
    assert _send(allowed, protocol.SETUP, protocol.setup_request(bundle)) is None
    grid = _device(data, tmp_path / "refused", _write_policy(tmp_path / "refused.toml", max_bundle_bytes=size - 1))
    refused = _send(grid, protocol.SETUP, protocol.setup_request(bundle))
    assert refused is not None and f"asset bundle of {size} bytes exceeds {size - 1}" in refused[1]
    assert "node" not in grid.node_ctx[1000].state.config_records
