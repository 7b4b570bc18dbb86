"""Device speed, availability traces and stragglers on the virtual clock (--device-speed, --behavior-trace, --deadline)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app as client_app
from ldpfed.fed.runtime.assets import build_bundle
from ldpfed.fed.heterogeneity.behavior_trace import BehaviorTrace
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.heterogeneity.device_speed import DeviceSpeed, round_duration
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.heterogeneity import registry
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.heterogeneity.virtual_clock import ClockPart, VirtualClock
from ldpfed.fed.configuration.option import Option
from ldpfed.strategies.app import app as server_app
from tests.local_grid import LocalGrid, run_local

CAPACITY = {101: {"computation": 20.0, "communication": 800.0}, 7: {"computation": 300.0, "communication": 50.0}}
BEHAVIOR = {
    1: {"active": [0, 20], "inactive": [10, 30], "finish_time": 40, "duration": 40, "model": "x"},
    2: {"active": [10], "inactive": [40], "finish_time": 40, "duration": 40, "model": "y"},
}


class _Exploit:
    """A pickle that would run a command when loaded by a plain unpickler."""

    def __reduce__(self) -> tuple:
        return (os.system, ("touch /tmp/ldpfed-trace-pwned",))


@pytest.mark.parametrize(
    "values,message",
    [
        ({"device_speed": "lognormal:0:1:100"}, "needs ms > 0, skew >= 0 and kbps > 0"),
        ({"device_speed": "lognormal:50:1"}, "lognormal:<ms>:<skew>:<kbps>"),
        ({"deadline": 5.0}, "give --device-speed too"),
        ({"device_speed": "lognormal:50:1:100", "deadline": -1.0}, "--deadline must be"),
        ({"behavior_trace": "/no/such/trace.pkl"}, "give --device-speed too"),
    ],
)
def test_bad_speed_options_are_refused_by_name(values: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunSpec.of(**values)


def test_bad_trace_files_are_refused_by_name_and_code_in_one_never_runs(tmp_path: Path) -> None:
    marker = Path("/tmp/ldpfed-trace-pwned")
    marker.unlink(missing_ok=True)
    path = tmp_path / "capacity.pkl"
    path.write_bytes(pickle.dumps({1: {"computation": _Exploit(), "communication": 1.0}}))
    with pytest.raises(ValueError, match="names posix.system; a trace holds plain dicts"):
        VirtualClock.start(RunSpec.of(device_speed=str(path)), dim=16)
    assert not marker.exists()
    bad = tmp_path / "behavior.json"
    bad.write_text(json.dumps({"1": {"active": [0, 5], "inactive": [3], "finish_time": 10}}))
    with pytest.raises(ValueError, match="as many 'active' as 'inactive'"):
        VirtualClock.start(RunSpec.of(device_speed="lognormal:50:1:100", behavior_trace=str(bad)), dim=16)
    capacity = tmp_path / "capacity.json"
    capacity.write_text(json.dumps({"1": {"computation": -3, "communication": 1.0}}))
    with pytest.raises(ValueError, match="client '1' needs positive 'computation'"):
        DeviceSpeed(str(capacity)).source
    with pytest.raises(ValueError, match="or a FedScale capacity trace file"):
        DeviceSpeed("/no/such/trace.pkl").source


def test_the_cli_refuses_a_bad_trace_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ldpfed.simulations.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--device-speed", str(tmp_path / "missing.pkl"), "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "or a FedScale capacity trace file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_node_never_opens_the_trace_files_a_server_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run options reach nodes too: a hostile server naming files on the device (to probe whether they
    exist, or to have them parsed) gets a node that serves as usual and reads none of them."""
    opened: list[str] = []
    for module in ("ldpfed.fed.heterogeneity.device_speed", "ldpfed.fed.heterogeneity.behavior_trace"):
        monkeypatch.setattr(f"{module}.read_trace", lambda path: opened.append(str(path)) or CAPACITY)
    secret = tmp_path / "secret.pkl"
    secret.write_bytes(pickle.dumps(CAPACITY))
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=4, nodes=1, out=str(tmp_path / "run"),
        device_speed=str(secret), behavior_trace=str(secret), deadline=1.0,
    )
    grid = LocalGrid(client_app, 1, config.to_mapping())
    setup = Message(
        RecordDict({"assets": ArrayRecord({"bundle": Array(build_bundle(config, None, tmp_path))})}),
        dst_node_id=1000, message_type=protocol.SETUP,
    )
    (reply,) = grid.send_and_receive([setup])
    assert protocol.read_refusal(reply.content) is None
    plan = make_plan(config, 2)
    request = protocol.release_request([0, 1], plan.train.params(), 0, plan.train_sampling.spec)
    (reply,) = grid.send_and_receive([Message(FLOWER(request), dst_node_id=1000, message_type=protocol.TRAIN)])
    assert protocol.read_refusal(reply.content) is None and len(protocol.read_release_reply(reply.content).reports)
    assert opened == []


def test_speeds_follow_the_trace_or_the_lognormal_model_and_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "capacity.pkl"
    path.write_bytes(pickle.dumps(CAPACITY))
    ms, kbps = DeviceSpeed(str(path)).per_user(2_000, seed=0)
    assert set(zip(ms, kbps)) == {(20.0, 800.0), (300.0, 50.0)}
    assert 0.45 < np.mean(ms == 20.0) < 0.55
    model = DeviceSpeed("lognormal:50:0.6:1000")
    ms, kbps = model.per_user(20_000, seed=1)
    assert abs(np.median(ms) / 50 - 1) < 0.03 and abs(np.std(np.log(ms)) - 0.6) < 0.01 and np.all(kbps == 1000)
    assert np.array_equal(ms, model.per_user(20_000, seed=1)[0]) and not np.array_equal(ms, model.per_user(20_000, seed=2)[0])
    # 10 records at 20 ms, then 10 x 16 values x 32 bits = 5.12 kbit at 800 kbit/s
    np.testing.assert_allclose(model.seconds(np.array([20.0]), np.array([800.0]), np.array([10]), 16), [0.2 + 5.12 / 800])


def test_a_round_waits_for_the_slowest_or_ends_at_the_deadline() -> None:
    seconds = np.array([1.0, 4.0, 2.5])
    assert round_duration(seconds, 0.0)[0] == 4.0 and not round_duration(seconds, 0.0)[1].any()
    duration, late = round_duration(seconds, 3.0)
    assert duration == 3.0 and late.tolist() == [False, True, False]
    assert round_duration(seconds, 5.0)[0] == 4.0 and round_duration(np.zeros(0), 3.0)[0] == 0.0


def test_behavior_traces_repeat_every_finish_time(tmp_path: Path) -> None:
    path = tmp_path / "behavior.pkl"
    path.write_bytes(pickle.dumps(BEHAVIOR))
    trace = BehaviorTrace.load(str(path), 200, seed=0)
    first = np.array([p[0] == 0 for p in trace.starts])  # users that follow client 1
    assert 0.35 < first.mean() < 0.65
    for t, one, two in [(5, True, False), (15, False, True), (25, True, True), (45, True, False), (70, True, True)]:
        active = trace.active(t)
        assert np.all(active[first] == one) and np.all(active[~first] == two), t


def test_stragglers_spend_but_the_server_leaves_their_reports_out(tmp_path: Path) -> None:
    """One round, every user asked for every record: the users the clock makes late (recomputed here
    from the seed) released and spent, and only the others' reports reached the classifier."""
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=30, nodes=2, out=str(out), nonprivate_baseline=False,
        device_speed="lognormal:20:1.0:2000", deadline=0.6,
    )
    run_local(server_app, client_app, 2, config.to_mapping())
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    releases = np.array([Ledger.from_json(ledgers[str(u)]).releases() for u in range(30)])
    assert releases.min() > 0  # everyone released, stragglers included
    late = VirtualClock.start(config, dim=384).run_round(np.arange(30), releases)  # MiniLM reports: 384 values
    assert 0 < late.sum() < 30
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["users_late"] == late.sum() and metrics["reports_late"] == releases[late].sum()
    assert metrics["reports_received"] == metrics["reports_total"] == releases[~late].sum()
    assert metrics["virtual_seconds"] == 0.6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["virtual_seconds"] == 0.6 and summary["users_late"] == late.sum()


def test_users_offline_in_the_trace_are_not_asked(tmp_path: Path) -> None:
    path = tmp_path / "behavior.json"
    path.write_text(json.dumps({str(k): v for k, v in BEHAVIOR.items()}))
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=20, nodes=1, rounds=2, out=str(out), nonprivate_baseline=False,
        device_speed="lognormal:10000:0:2000", behavior_trace=str(path), records_per_user_round=1,
    )
    run_local(server_app, client_app, 1, config.to_mapping())
    trace = BehaviorTrace.load(str(path), 20, config.seed)
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # Round 1 starts at 0 s (client 1 active, client 2 not) and lasts one record's 10 s and upload;
    # round 2 starts there (client 1 inactive from 10 s, client 2 active).
    start = rounds[0]["virtual_seconds"]
    assert 10 < start < 10.1
    first, second = trace.active(0.0), trace.active(start)
    assert 0 < first.sum() < 20 and np.array_equal(second, ~first)
    assert [r["users_offline"] for r in rounds] == [20 - first.sum(), 20 - second.sum()]
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    spent = np.array([Ledger.from_json(ledgers[str(u)]).releases() if str(u) in ledgers else 0 for u in range(20)])
    assert np.all(spent == 1)  # each user online in exactly one round, asked for one record then


class _Beats(HeterogeneityAxis, ClockPart):
    """Test-only axis and clock part: every round lasts --beat virtual seconds and odd user ids are late."""

    name = "beat"
    options = (Option("beat", float, 0.0, "test only: seconds per round (0: none)"),)

    def parse(self, values: dict) -> float | None:
        return values["beat"] or None

    def on_clock(self, setting: float, spec: RunSpec, dim: int) -> "_Beats":
        self.seconds = setting
        return self

    def round(self, users: np.ndarray, records: np.ndarray) -> tuple[float, np.ndarray]:
        return self.seconds, users % 2 == 1


def test_the_clock_plays_whatever_parts_the_axes_give_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock names no axis: device speed, a behaviour trace or an axis added in a test each bring their own part."""
    assert VirtualClock.start(RunSpec.of(users=4), dim=16) is None  # no axis on the clock
    monkeypatch.setattr(registry, "AXES", (*registry.AXES, _Beats()))
    clock = VirtualClock.start(RunSpec.of(users=4, beat=2.5), dim=16)
    assert list(clock.parts) == ["beat"]
    assert clock.run_round(np.arange(4), np.ones(4)).tolist() == [False, True, False, True] and clock.now == 2.5
    speed = RunSpec.of(users=4, beat=2.5, device_speed="lognormal:1000:0:1000000", deadline=0.5)
    clock = VirtualClock.start(speed, dim=16)  # each user answers one record in 1 s: all late, the round ends at 0.5 s
    assert list(clock.parts) == ["device speed", "beat"]
    assert clock.run_round(np.arange(4), np.ones(4)).all() and clock.now == 0.5 + 2.5
