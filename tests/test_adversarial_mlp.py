"""A hostile server sends a device a non-linear model (design.md section 2b): the MLP layers of an
evaluate request are untrusted input. Each bad model is refused as malformed with a reason naming
the problem, and nothing is released or charged; a well-formed MLP is scored and charged like a
linear model (one randomized bit per query and model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from ldpfed.fed import protocol
from ldpfed.fed.learning.mlp import MAX_LAYERS, MAX_PARAMETERS, MAX_WIDTH, MLPModel
from ldpfed.fed.runtime.requests import Refusal
from tests.test_adversarial_server import DEV, TRAIN, _device, _ledger, _policy, _send, bundle, data  # noqa: F401 (fixtures)

DIM = 384  # MiniLM, no projection (the devices of tests.test_adversarial_server)


def _layers(*widths: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(a, b)) / np.sqrt(a), rng.normal(size=b)) for a, b in zip(widths[:-1], widths[1:])]


def _request(layers: list[tuple[np.ndarray, np.ndarray]], name: str = "private") -> RecordDict:
    arrays = {}
    for i, (weights, bias) in enumerate(layers):
        arrays[f"{name}.layer{i}.weights"] = Array(np.ascontiguousarray(weights))
        arrays[f"{name}.layer{i}.bias"] = Array(np.ascontiguousarray(bias))
    return RecordDict({"models": ArrayRecord(arrays)})


def _nan(layers: list) -> list:
    (w, b), *rest = layers
    w = w.copy()
    w[3, 1] = np.nan
    return [(w, b), *rest]


def _missing_bias(layers: list) -> RecordDict:
    content = _request(layers)
    del content["models"]["private.layer1.bias"]
    return content


def _gap() -> RecordDict:
    content = _request(_layers(DIM, 8, 8, 2))
    del content["models"]["private.layer1.weights"], content["models"]["private.layer1.bias"]
    return content


HOSTILE = {
    "input dimension": (_request(_layers(16, 8, 2)), "expected (384, h)"),
    "output classes": (_request(_layers(DIM, 8, 3)), "expected (8, 2)"),
    "layers that do not chain": (_request([*_layers(DIM, 8), *_layers(9, 2)]), "expected (8, 2)"),
    "a bias of the wrong length": (_request([(np.zeros((DIM, 8)), np.zeros(7)), *_layers(8, 2)]), "expected (384, h)"),
    "not finite": (_request(_nan(_layers(DIM, 8, 2))), "finite floating-point"),
    "integers": (_request([(np.ones((DIM, 2), dtype=np.int64), np.zeros(2, dtype=np.int64))]), "finite floating-point"),
    "too many layers": (_request(_layers(DIM, *[4] * MAX_LAYERS, 2)), f"at most {MAX_LAYERS} layers"),
    "too wide": (_request(_layers(DIM, MAX_WIDTH + 1, 2)), f"at most {MAX_WIDTH}"),
    "too many numbers": (_request([(np.zeros((DIM, 2048)), np.zeros(2048)), (np.zeros((2048, 2048)), np.zeros(2048)), *_layers(2048, 2)]), f"at most {MAX_PARAMETERS} numbers"),
    "a missing bias": (_missing_bias(_layers(DIM, 8, 2)), "layers 0 to n-1"),
    "a layer gap": (_gap(), "layers 0 to n-1"),
    "unknown parts": (RecordDict({"models": ArrayRecord({"private.layer0.weights": Array(np.zeros((DIM, 2))),
                                                          "private.code": Array(np.zeros(2))})}), "must be linear"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_mlp_is_refused_and_nothing_is_released(case: str, data: Path, bundle: np.ndarray, tmp_path: Path) -> None:  # noqa: F811
    content, reason = HOSTILE[case]
    device = _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0, evaluation="rr:1.0"))
    refused = protocol.read_refusal(_send(device, protocol.EVALUATE, content).content)
    assert refused is not None and refused[0] == Refusal.MALFORMED and reason in refused[1], refused
    assert _ledger(device).record_counts().sum() == 0  # nothing released, nothing charged


def test_a_well_formed_mlp_is_scored_and_charged_like_a_linear_model(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:  # noqa: F811
    device = _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0, evaluation="rr:1.0"))
    model = MLPModel.checked(_layers(DIM, 32, 2), DIM, 2)
    reply = _send(device, protocol.EVALUATE, protocol.evaluate_request({"private": model}))
    outcomes = protocol.read_outcomes_reply(reply.content)
    assert not outcomes.exact and outcomes.total == {"private": DEV}
    assert (_ledger(device).record_counts()[:, TRAIN:] == 1).all()  # one randomized bit per query


def test_an_mlp_survives_the_protocol_exactly() -> None:
    model = MLPModel.checked(_layers(6, 5, 4, 3), 6, 3)
    (read,) = protocol.read_evaluate_request(protocol.evaluate_request({"m": model}), 6, 3).values()
    assert isinstance(read, MLPModel) and all(np.array_equal(a, b) for la, lb in zip(model.layers, read.layers) for a, b in zip(la, lb))
    x = np.random.default_rng(0).normal(size=(10, 6))
    assert np.array_equal(read.scores(x), model.scores(x))
