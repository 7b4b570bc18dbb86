"""ldpfed.fed.protocol: plain content that each app hands to Flower through its record classes, read the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

from ldpfed.clients.app import FLOWER as NODE_SIDE
from ldpfed.fed import protocol
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.learning.evaluation import Outcomes, UserOutcomes
from ldpfed.fed.learning.mlp import MLPModel
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.runtime.node import NodeReply
from ldpfed.fed.runtime.requests import RequestRefused
from ldpfed.strategies.strategy import FLOWER as SERVER_SIDE

RNG = np.random.default_rng(0)
LINEAR = LinearModel(RNG.normal(size=(4, 2)), RNG.normal(size=2))
MLP = MLPModel(((RNG.normal(size=(4, 3)), RNG.normal(size=3)), (RNG.normal(size=(3, 2)), RNG.normal(size=2))))
REPLY = NodeReply(
    RNG.normal(size=(3, 4)), np.array([0, 1, 1]), np.array([0, 0, 2]), np.array([5, 6, 7]), {"mechanism": "gaussian", "sigma": 1.0},
    {"kind": "public"}, {3: ("budget", "no budget left")}, {0: {"eps": 1.5}}, "host", 0.25,
)
SUMMED = NodeReply(
    np.zeros((0, 4), np.float32), np.zeros(0, np.int64), np.array([1]), np.array([0]), {"mechanism": "gaussian"}, {},
    sums=ReportSums(RNG.normal(size=(2, 4)), np.array([1.0, 2.0]), RNG.normal(size=(4, 4)), 3),
)
OUTCOMES = Outcomes({"private": 3}, {"private": 5}, True, 1.0, UserOutcomes(np.array([0, 1]), np.array([2, 3]), {"private": np.array([1, 2])}))
INFO = protocol.NodeInfo([0, 1], 4, 2, [10, 11], [3, 4], "engine")

MESSAGES = {  # each message, and how it is read (what the reader returns, made comparable)
    "setup request": (protocol.setup_request(np.arange(10, dtype=np.uint8)), lambda c: protocol.read_setup_request(c).tolist()),
    "setup reply": (protocol.setup_reply(INFO), protocol.read_setup_reply),
    "release parts": (
        protocol.release_parts([protocol.release_request([0], {"a": 1}, 1, "all"), protocol.release_request([1], {"b": 2}, 0, "all", True)]),
        protocol.read_release_request,
    ),
    "release reply": (
        protocol.release_reply([REPLY, SUMMED]),
        lambda c: [(r.reports.tolist(), r.labels.tolist(), r.refusals, r.ledgers, r.host, r.sums and r.sums.count) for r in protocol.read_release_replies(c)],
    ),
    "answer request": (
        protocol.answer_request(np.array([0, 1]), np.array([3, 4]), RNG.normal(size=(2, 2))),
        lambda c: [a.tolist() for a in protocol.read_answer_request(c)],
    ),
    "answer reply": (protocol.answer_reply([1, 2]), protocol.read_answer_reply),
    "evaluate request": (
        protocol.evaluate_request({"private": LINEAR, "mlp": MLP}),
        lambda c: {k: repr(m) for k, m in protocol.read_evaluate_request(c, 4, 2).items()},
    ),
    "outcomes reply": (
        protocol.outcomes_reply(OUTCOMES), lambda c: (lambda o: (o.correct, o.total, o.per_user.users.tolist()))(protocol.read_outcomes_reply(c)),
    ),
    "ledger reply": (protocol.ledger_reply({0: {"eps": 1.0}}), protocol.read_ledger_reply),
    "refusal": (protocol.refusal("policy", "no"), protocol.read_refusal),
}
KINDS = {protocol.Arrays: ArrayRecord, protocol.Config: ConfigRecord, protocol.Metrics: MetricRecord}


@pytest.mark.parametrize("name", MESSAGES)
def test_a_message_is_the_same_in_flower_and_is_read_the_same(name: str) -> None:
    content, read = MESSAGES[name]
    flower = recorddict_from_proto(recorddict_to_proto(SERVER_SIDE(content)))  # as it arrives over the wire
    assert list(flower) == list(content)
    for record, plain in content.items():
        assert isinstance(flower[record], KINDS[type(plain)]) and list(flower[record]) == list(plain)
        if isinstance(plain, protocol.Arrays):
            assert [np.dtype(a.dtype) for a in flower[record].values()] == [np.asarray(a).dtype for a in plain.values()]
    assert read(flower) == read(content)
    assert recorddict_to_proto(NODE_SIDE(content)) == recorddict_to_proto(SERVER_SIDE(content))  # one conversion, two apps


def test_only_plain_records_are_converted() -> None:
    with pytest.raises(TypeError, match="plain record"):
        SERVER_SIDE({"request": ConfigRecord({"users": [0]})})


def test_an_unreadable_array_is_refused_with_its_name() -> None:
    hostile = RecordDict({"assets": ArrayRecord({"bundle": Array(dtype="uint8", shape=(4,), stype="numpy.ndarray", data=b"\x00\x01")})})
    with pytest.raises(RequestRefused, match="'assets.bundle' is not a readable numpy array"):
        protocol.read_setup_request(hostile)
    with pytest.raises(RequestRefused, match="needs 'assets.bundle'"):
        protocol.read_setup_request(protocol.Content({"assets": protocol.Config({"bundle": 1})}))
