"""Hostile messages never crash a node, overrun its budget, or spend without a release (issue 9, item 4).

A seeded slice of ``simulations.checks.fuzz_benchmark``: 1,000 hostile messages of every message type
(and of unknown types) per run, split over two devices (memoize on and off) and one
simulation-engine node, each built once for the module. Spending is checked against the owner's
policy (fuzz_benchmark.POLICY), query releases against the true queries the users released.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.simulations.checks import fuzz_benchmark
from ldpfed.simulations.checks.fuzz_benchmark import MESSAGE_TYPES, NODE

PER_RUN = 1000
"""Hostile messages of every type per test run, summed over the node kinds (issue 9, item 4)."""
DEVICE = {**dict.fromkeys(MESSAGE_TYPES, 300), protocol.TRAIN: 100, protocol.RELEASE: 100}
ENGINE = {t: PER_RUN - 2 * n for t, n in DEVICE.items()}
SLICES = {"device-memoize": (True, False, DEVICE), "device": (False, False, DEVICE), "simulation": (False, True, ENGINE)}
"""Node kind -> (memoize, simulation engine, messages per type). A device's served release costs
hundreds of milliseconds (privacy accounting and OpenDP noise, against 2 ms for most messages), so
the devices get fewer training and query releases and the engine node the rest, and the finite
extremes (fuzz_benchmark.FINITE_EXTREMES in every number of every randomizer, as training and query
releases); the benchmark (``python -m ldpfed.simulations.checks.fuzz_benchmark --messages N``) runs the long
version on every kind."""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The devices' shared cache folder: the corpus is encoded once for both."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module", params=sorted(SLICES))
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cache: Path) -> tuple[object, str]:
    """One set-up node per kind, reused by every test of the module."""
    memoize, engine, _ = SLICES[request.param]
    return fuzz_benchmark.node(tmp_path_factory.mktemp(request.param), memoize=memoize, engine=engine, cache=cache), request.param


def test_hostile_messages_are_refused_or_served_within_budget(node: tuple[object, str]) -> None:
    grid, kind = node
    memoize, engine, per_type = SLICES[kind]
    stats = fuzz_benchmark.fuzz(grid, per_type, seed=sorted(SLICES).index(kind), exact=engine, extremes=engine)
    report = fuzz_benchmark.table(stats)
    extremes = len(fuzz_benchmark.Hostile(np.random.default_rng(0), np.zeros(1, np.uint8), 384, 4).extremes()) // 2 if engine else 0
    for message_type, entry in stats.items():
        assert entry.sent == per_type[message_type] + (extremes if message_type in (protocol.TRAIN, protocol.RELEASE) else 0)
        assert (entry.uncaught, entry.generic, entry.overruns, entry.spend_without_release) == (0, 0, 0, 0), report
    for message_type in (protocol.TRAIN, protocol.RELEASE, protocol.EVALUATE, protocol.SETUP):
        assert stats[message_type].served > 0, report  # the stream also holds valid requests
    for message_type in fuzz_benchmark.UNKNOWN_TYPES:
        assert stats[message_type].refused == {"malformed": per_type[message_type]}, report


def test_an_unknown_message_type_gets_a_refusal_naming_it(node: tuple[object, str]) -> None:
    grid, _ = node
    (reply,) = grid.send_and_receive([Message(RecordDict(), dst_node_id=NODE, message_type="query.nope")])
    assert not reply.has_error()
    code, reason = protocol.read_refusal(reply.content)
    assert code == "malformed" and "'query.nope'" in reason and protocol.LEDGER in reason


def test_a_wrong_shape_model_is_refused_naming_both_shapes(node: tuple[object, str]) -> None:
    grid, _ = node
    models = ArrayRecord({"m.weights": Array(np.zeros((16, 4))), "m.bias": Array(np.zeros(4))})
    (reply,) = grid.send_and_receive([Message(RecordDict({"models": models}), dst_node_id=NODE, message_type=protocol.EVALUATE)])
    code, reason = protocol.read_refusal(reply.content)
    assert code == "malformed"
    assert "weights (16, 4) and bias (4,), expected (384, 4) and (4,)" in reason  # the generated corpus has 4 labels


def test_unreadable_array_bytes_are_refused_naming_the_field(node: tuple[object, str]) -> None:
    grid, _ = node
    garbage = Array(dtype="float64", shape=(3,), stype="numpy.ndarray", data=b"")
    (reply,) = grid.send_and_receive(
        [Message(RecordDict({"answers": ArrayRecord({"users": garbage})}), dst_node_id=NODE, message_type=protocol.ANSWER)]
    )
    code, reason = protocol.read_refusal(reply.content)
    assert code == "malformed" and "'answers.users' is not a readable numpy array" in reason


def test_the_benchmark_runs_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz_benchmark.main(["--messages", "3", "--seed", "5", "--no-extremes"]) == 0  # the engine slice sends them
    out = capsys.readouterr().out
    assert "device, memoize off" in out and "simulation engine" in out and "query.nope" in out
