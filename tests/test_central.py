"""Central DP-FedAvg (--privacy-model central): its user-level epsilon against dp_accounting for the
noise Flower's wrapper actually added, the sampling the grid actually saw and the rounds run; a small
run trains above chance; bad options are refused."""

from __future__ import annotations

import json
from pathlib import Path

import dp_accounting
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp.strategy import dp_adaptive_clipping, dp_fixed_clipping

from ldpfed.fed import protocol
from ldpfed.clients.app import _train_central as central_handler
from ldpfed.clients.app import FLOWER, app as client_app
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.state import init_state
from ldpfed.fed.privacy.central import calibrate
from ldpfed.strategies.app import app as server_app
from ldpfed.fed.runtime.requests import Refusal, RequestRefused
from ldpfed.fed.learning.softmax_head import initial
from tests.conftest import DEVICE_POLICY, write_review_folder
from tests.local_grid import LocalGrid


class CountingGrid(LocalGrid):
    """A LocalGrid that counts the train.central messages of each exchange (the users sampled per round)."""

    per_round: list[int] = []

    def push_messages(self, messages):  # type: ignore[override]
        messages = list(messages)
        count = sum(m.metadata.message_type in (protocol.CENTRAL_TRAIN, protocol.CENTRAL_TRAIN_ADAPTIVE) for m in messages)
        if count:
            CountingGrid.per_round.append(count)
        return super().push_messages(messages)


def _user_level_epsilon(users: int, sampled: int, noise_std_on_mean: float, clip: float, rounds: int, delta: float) -> float:
    """dp_accounting, written out here: replace-one users, m of n without replacement, sum sensitivity 2C."""
    sigma_on_sum = noise_std_on_mean * sampled
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(users, sampled, dp_accounting.GaussianDpEvent(sigma_on_sum / (2 * clip))),
        rounds,
    )
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    return accountant.compose(event).get_epsilon(delta)


def _run(tmp_path: Path, options: dict) -> dict:
    """A central run of 8 users (one per node), 4 rounds of 4; returns its summary."""
    (tmp_path / "data").mkdir()
    data = write_review_folder(tmp_path / "data", {"train": 240, "dev": 80}, "cent", seed=5)
    out = tmp_path / "run"
    config = RunSpec.from_mapping(dict(
        data=str(data), public="none", dim=0, users=8, nodes=8, rounds=4, users_per_round=4, central_clip=1.0,
        central_lr=1.0, central_epochs=2, privacy_model="central", out=str(out), **options,
    )).to_mapping()
    CountingGrid.per_round = []
    grid = CountingGrid(client_app, 8, config)
    server_app(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    assert "clips its model update on the client" in (out / "privacy_report.md").read_text()
    return json.loads((out / "summary.json").read_text())


def _record(monkeypatch: pytest.MonkeyPatch, module: object, name: str, calls: list) -> None:
    """Record every call of ``module.name`` (arguments and result) in ``calls``."""
    original = getattr(module, name)

    def recording(*args):  # type: ignore[no-untyped-def]
        result = original(*args)
        calls.append((args, result))
        return result

    monkeypatch.setattr(module, name, recording)


@pytest.mark.parametrize("options", [{"epsilon": 8.0}, {"central_noise": 0.05}], ids=["calibrated", "noise-given"])
def test_central_run_epsilon_matches_dp_accounting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict) -> None:
    calls: list = []
    _record(monkeypatch, dp_fixed_clipping, "add_gaussian_noise_inplace", calls)
    summary = _run(tmp_path, options)
    noise = [args[1] for args, _ in calls]
    assert summary["errors"] == []
    assert CountingGrid.per_round == [4, 4, 4, 4] and len(set(noise)) == 1 and len(noise) == 4
    expected = _user_level_epsilon(8, 4, noise[0], 1.0, 4, 1e-5)
    assert summary["epsilon_user_central"] == pytest.approx(expected, rel=1e-9)
    if "epsilon" in options:
        assert expected <= 8.0 and expected == pytest.approx(8.0, rel=1e-3)
    else:
        assert summary["central"]["noise_multiplier"] == 0.05
        # little noise: the head must learn (two balanced classes, chance 0.5)
        assert summary["accuracy_local"] > 0.75


def test_adaptive_clipping_run_is_accounted_by_its_effective_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stdv: list = []
    params: list = []
    _record(monkeypatch, dp_adaptive_clipping, "compute_stdv", stdv)
    _record(monkeypatch, dp_adaptive_clipping, "compute_adaptive_noise_params", params)
    summary = _run(tmp_path, {"central_noise": 0.3, "central_clipping": "adaptive"})
    assert summary["errors"] == [] and CountingGrid.per_round == [4, 4, 4, 4]
    norms = [args[1] for args, _ in stdv]
    assert len(stdv) == 4 and len(set(norms)) > 1  # the clipping norm moved
    (count_std, update_multiplier), = [result for _, result in params]
    assert all(args[0] == update_multiplier and args[2] == 4 for args, _ in stdv)
    # one Gaussian on (sum of updates, count of clipped ones): sensitivities 2 C_t and 1 under replace-one
    ratio = ((2 / update_multiplier) ** 2 + (1 / count_std) ** 2) ** 0.5
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(8, 4, dp_accounting.GaussianDpEvent(1 / ratio)), 4
    )
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert summary["epsilon_user_central"] == pytest.approx(accountant.compose(event).get_epsilon(1e-5), rel=1e-9)


def test_calibration_meets_the_target_from_below() -> None:
    account = calibrate(3.0, 100, 10, 20, 1e-5)
    assert 2.99 <= account.epsilon <= 3.0
    assert account.epsilon == pytest.approx(_user_level_epsilon(100, 10, account.noise_multiplier / 10, 1.0, 20, 1e-5), rel=1e-9)


def test_central_options_are_checked() -> None:
    with pytest.raises(ValueError, match="one user per node"):
        RunSpec.of(privacy_model="central", users=4, nodes=2)
    with pytest.raises(ValueError, match="privacy-model must be"):
        RunSpec.of(privacy_model="trusted")
    with pytest.raises(ValueError, match="remote"):
        RunSpec.of(privacy_model="shuffle", inference="remote")
    with pytest.raises(ValueError, match="central-clip"):
        RunSpec.of(privacy_model="central", users=2, nodes=2, central_clip=0.0)


@pytest.mark.parametrize("engine", [False, True], ids=["device", "engine"])
def test_a_device_refuses_central_training(tmp_path: Path, engine: bool) -> None:
    """A clipped update without local noise never leaves a device; the simulation engine serves it."""
    (tmp_path / "data").mkdir()
    data = write_review_folder(tmp_path / "data", {"train": 24, "dev": 8}, "dev", seed=2)
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "encoder.txt").write_text("minilm")
    (tmp_path / "policy.toml").write_text(DEVICE_POLICY)
    state = tmp_path / "state"
    init_state(state)
    run = RunSpec.of(data=str(data), public="none", dim=0, users=1, nodes=1, privacy_model="central").to_mapping()
    grid = LocalGrid(client_app, 1, run, engine=engine,
                     node_configs=[{"data": str(data), "state-dir": str(state), "policy": str(tmp_path / "policy.toml")}])
    (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(pack(tmp_path / "bundle"))), dst_node_id=1000, message_type=protocol.SETUP)])
    assert protocol.read_refusal(reply.content) is None
    head = initial(384, 2)
    content = RecordDict({"arrays": FLOWER.record(protocol.central_arrays(head)), "config": ConfigRecord({"clipping_norm": 1.0, "server-round": 1})})
    (reply,) = grid.send_and_receive([Message(content, dst_node_id=1000, message_type=protocol.CENTRAL_TRAIN)])
    if engine:
        assert not reply.has_error() and list(reply.content.array_records) == ["arrays"]
        return
    # Flower's mod turns the handler's refusal (no arrays) into an error reply: nothing is released ...
    assert reply.has_error() or not reply.content.array_records
    # ... and the reason is the device's rule, not an accident of the request
    message = Message(content, dst_node_id=1000, message_type=protocol.CENTRAL_TRAIN)
    with pytest.raises(RequestRefused, match="simulation only") as refused:
        central_handler(message, grid.node_ctx[1000])
    assert refused.value.code == Refusal.POLICY


def test_each_round_samples_set_up_node_ids_whatever_their_size(tmp_path: Path) -> None:
    """Flower node ids are uint64: ids above and below 2**63 together must come back exact (no float rounding)."""
    from ldpfed.fed.reporting.run_record import RunRecord
    from ldpfed.strategies.central import CentralFedAvg

    nodes = [17, 556448001829138333, 2**63 + 12345, 2**64 - 3]
    config = RunSpec.of(users=4, users_per_round=4, privacy_model="central", nodes=4, seed=0)
    strategy = CentralFedAvg(config, nodes, RunRecord.__new__(RunRecord))
    strategy._construct_messages = lambda content, chosen, message_type: chosen  # the destinations (no Flower run here)
    for server_round in (1, 2):
        assert strategy.configure_train(server_round, FLOWER.record(protocol.central_arrays(initial(2, 2))), ConfigRecord(), None) == nodes
