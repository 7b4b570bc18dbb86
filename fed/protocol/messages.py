"""The message types a node serves, and the small messages: setup, remote-inference answers, ledgers, refusals."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ldpfed.fed.protocol.content import Arrays, Config, Content, Readable, array
from ldpfed.fed.runtime.requests import RequestRefused

SETUP = "query.setup"
TRAIN = "train"
RELEASE = "query.release"
ANSWER = "query.answer"
SCORE = "query.score"
EVALUATE = "evaluate"
LEDGER = "query.ledger"
CENTRAL_TRAIN = "train.central"
CENTRAL_TRAIN_ADAPTIVE = "train.central_adaptive"
MESSAGE_TYPES = (SETUP, TRAIN, RELEASE, ANSWER, SCORE, EVALUATE, LEDGER, CENTRAL_TRAIN, CENTRAL_TRAIN_ADAPTIVE)
"""Every message type a node serves; any other is refused (clients.app.NodeApp)."""


# -- setup -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeInfo:
    """What a node says about itself at setup (dataset sizes are public, design.md section 2)."""

    users: list[int]
    dim: int
    num_labels: int
    train_counts: list[int]
    query_counts: list[int]
    sampler: str
    """Where its noise comes from: fed.privacy.noise.ENGINE_SAMPLER or fed.privacy.noise.DEVICE_SAMPLER."""


def setup_request(bundle: np.ndarray) -> Content:
    """The asset bundle as a setup request."""
    return Content({"assets": Arrays({"bundle": np.asarray(bundle, dtype=np.uint8)})})


def read_setup_request(content: Readable) -> np.ndarray:
    """The bundle bytes of a setup request."""
    bundle = array(content, "assets", "bundle")
    if bundle.dtype != np.uint8 or bundle.ndim != 1:
        raise RequestRefused(f"the asset bundle must be a 1-D uint8 array, got {bundle.dtype} of shape {bundle.shape}")
    return bundle


def setup_reply(info: NodeInfo) -> Content:
    """A node's introduction."""
    return Content({"node": Config({k.replace("_", "-"): v for k, v in asdict(info).items()})})


def read_setup_reply(content: Readable) -> NodeInfo:
    """Inverse of :func:`setup_reply`."""
    record = content["node"]
    return NodeInfo(
        users=[int(u) for u in record["users"]],
        dim=int(record["dim"]),
        num_labels=int(record["num-labels"]),
        train_counts=[int(n) for n in record["train-counts"]],
        query_counts=[int(n) for n in record["query-counts"]],
        sampler=str(record["sampler"]),
    )


# -- remote-inference answers ------------------------------------------------------------------
def answer_request(users: np.ndarray, slots: np.ndarray, scores: np.ndarray) -> Content:
    """The server's scores for released query slots."""
    return Content({"answers": Arrays({"users": users, "slots": slots, "scores": scores})})


def read_answer_request(content: Readable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users, slots, scores) of an answer request (checked further by the node)."""
    return tuple(array(content, "answers", name) for name in ("users", "slots", "scores"))  # type: ignore[return-value]


def answer_reply(finished: list[int]) -> Content:
    """The users whose true queries now all have k answers."""
    return Content({"answered": Config({"finished": json.dumps([int(u) for u in finished])})})


def read_answer_reply(content: Readable) -> list[int]:
    """Inverse of :func:`answer_reply`."""
    return [int(u) for u in json.loads(str(content["answered"]["finished"]))]


# -- ledgers ---------------------------------------------------------------------------------
def ledger_reply(ledgers: Mapping[int, Mapping[str, Any]]) -> Content:
    """Every hosted user's ledger answer (fed.runtime.node.NodeHost.ledgers), for the run directory."""
    return Content({"ledgers": Config({"json": json.dumps({str(k): v for k, v in ledgers.items()})})})


def read_ledger_reply(content: Readable) -> dict[int, dict[str, Any]]:
    """Inverse of :func:`ledger_reply`."""
    return {int(k): v for k, v in json.loads(str(content["ledgers"]["json"])).items()}


# -- refusals --------------------------------------------------------------------------------
def refusal(code: str, reason: str) -> Content:
    """A structured refusal: a normal reply saying why nothing was released."""
    return Content({"meta": Config({"status": "refused", "code": str(code), "reason": reason})})


def read_refusal(content: Readable) -> tuple[str, str] | None:
    """(code, reason) of a refusal, or None when the reply is not one."""
    if "meta" not in content.config_records or str(content["meta"].get("status", "")) != "refused":
        return None
    return str(content["meta"]["code"]), str(content["meta"]["reason"])
