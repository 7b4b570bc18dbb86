"""Central DP-FedAvg (--privacy-model central): its user-level epsilon against dp_accounting for the
noise Flower's wrapper actually added, the sampling the grid actually saw and the rounds run; a small
run trains above chance; bad options are refused."""

from __future__ import annotations

import json
from pathlib import Path

import dp_accounting
import pytest
from flwr.app import Context, RecordDict
from flwr.serverapp.strategy import dp_fixed_clipping

from clients import protocol
from clients.app import app as client_app
from fed.config import RunConfig
from fed.privacy.central import calibrate
from strategies.app import app as server_app
from tests.conftest import write_review_folder
from tests.local_grid import LocalGrid


class CountingGrid(LocalGrid):
    """A LocalGrid that counts the train.central messages of each exchange (the users sampled per round)."""

    per_round: list[int] = []

    def push_messages(self, messages):  # type: ignore[override]
        messages = list(messages)
        count = sum(m.metadata.message_type == protocol.CENTRAL_TRAIN for m in messages)
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


@pytest.mark.parametrize("options", [{"epsilon": 8.0}, {"central_noise": 0.05}], ids=["calibrated", "noise-given"])
def test_central_run_epsilon_matches_dp_accounting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict) -> None:
    (tmp_path / "data").mkdir()
    data = write_review_folder(tmp_path / "data", {"train": 240, "dev": 80}, "cent", seed=5)
    out = tmp_path / "run"
    config = RunConfig.from_mapping(dict(
        data=str(data), public="none", dim=0, users=8, nodes=8, rounds=4, users_per_round=4, central_clip=1.0,
        central_lr=1.0, central_epochs=2, privacy_model="central", out=str(out), **options,
    )).to_mapping()
    noise: list[float] = []
    add = dp_fixed_clipping.add_gaussian_noise_inplace

    def recording_add(arrays, std_dev):  # type: ignore[no-untyped-def]
        noise.append(std_dev)
        return add(arrays, std_dev)

    monkeypatch.setattr(dp_fixed_clipping, "add_gaussian_noise_inplace", recording_add)
    CountingGrid.per_round = []
    grid = CountingGrid(client_app, 8, config)
    server_app(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    summary = json.loads((out / "summary.json").read_text())
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
    assert "clips its model update on the client" in (out / "privacy_report.md").read_text()


def test_calibration_meets_the_target_from_below() -> None:
    account = calibrate(3.0, 100, 10, 20, 1e-5)
    assert 2.99 <= account.epsilon <= 3.0
    assert account.epsilon == pytest.approx(_user_level_epsilon(100, 10, account.noise_multiplier / 10, 1.0, 20, 1e-5), rel=1e-9)


def test_central_options_are_checked() -> None:
    with pytest.raises(ValueError, match="one user per node"):
        RunConfig(privacy_model="central", users=4, nodes=2)
    with pytest.raises(ValueError, match="privacy-model must be"):
        RunConfig(privacy_model="trusted")
    with pytest.raises(ValueError, match="remote"):
        RunConfig(privacy_model="shuffle", inference="remote")
    with pytest.raises(ValueError, match="central-clip"):
        RunConfig(privacy_model="central", users=2, nodes=2, central_clip=0.0)
