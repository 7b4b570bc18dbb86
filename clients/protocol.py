"""The ldpfed node protocol on one page: every message a node accepts, and what it returns.

Both apps import this module: the ServerApp encodes requests and decodes replies, the
ClientApp decodes requests and encodes replies. Every ``read_*`` of a request is run on the
node against untrusted content and raises :class:`fed.runtime.requests.RequestRefused` (code
``malformed``) on anything it does not expect; the node then replies :func:`refusal`.

| message type | request | reply |
|---|---|---|
| ``query.setup`` | the asset bundle (uint8 tar) | :class:`NodeInfo`: hosted users, dimension, labels, public sizes |
| ``train`` | :func:`release_request`, or several in one (:func:`release_parts`: one per privacy tier) | :func:`release_reply`, a part per request and host (reports and labels, or their sums when the request says ``summarise``; per-user refusals and ledger figures) |
| ``query.release`` | the same | the same (reports under opaque slots) |
| ``query.answer`` | :func:`answer_request` | users whose queries all have k answers |
| ``query.score`` | nothing | :class:`fed.learning.evaluation.Outcomes` of remote inference |
| ``evaluate`` | classifiers, linear or MLP (:func:`evaluate_request`) | :class:`fed.learning.evaluation.Outcomes` of local inference (also per user, simulation only) |
| ``query.ledger`` | nothing | every hosted user's ledger: in full in the simulation engine, a device's aggregates on a device (no record index or count) |
| ``train.central`` | the global softmax head (:func:`central_arrays`; Flower's DP wrapper adds the clipping norm) | the user's locally trained head, clipped by Flower's ``fixedclipping_mod`` (:func:`central_reply`; simulation only) |
| ``train.central_adaptive`` | the same | the same, clipped by ``adaptiveclipping_mod``, which adds the clipped bit |

Any of them may be answered by :func:`refusal` (a code from :class:`fed.runtime.requests.Refusal` and a
reason); per-user refusals inside a release reply carry the same codes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fed.learning.classifier import LinearModel
from fed.learning.mlp import MAX_LAYERS, MAX_PARAMETERS, MLPModel
from fed.learning.server_classifier import Model
from fed.learning.evaluation import Outcomes, UserOutcomes
from fed.runtime.hosts import MAX_PARTS
from fed.runtime.node import NodeReply
from fed.learning.report_sums import ReportSums
from fed.runtime.requests import RequestRefused

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


def setup_request(bundle: np.ndarray) -> RecordDict:
    """The asset bundle as a setup request."""
    return RecordDict({"assets": ArrayRecord({"bundle": Array(np.asarray(bundle, dtype=np.uint8))})})


def read_setup_request(content: RecordDict) -> np.ndarray:
    """The bundle bytes of a setup request."""
    bundle = _array(content, "assets", "bundle")
    if bundle.dtype != np.uint8 or bundle.ndim != 1:
        raise RequestRefused(f"the asset bundle must be a 1-D uint8 array, got {bundle.dtype} of shape {bundle.shape}")
    return bundle


def setup_reply(info: NodeInfo) -> RecordDict:
    """A node's introduction."""
    return RecordDict({"node": ConfigRecord({k.replace("_", "-"): v for k, v in asdict(info).items()})})


def read_setup_reply(content: RecordDict) -> NodeInfo:
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


# -- releases --------------------------------------------------------------------------------
def release_request(
    users: list[int], randomizer: Mapping[str, Any], records: int, sampling: str, summarise: bool = False
) -> RecordDict:
    """Ask the listed users to release through ``randomizer`` (its params); ``summarise``: send report sums."""
    request = {"users": [int(u) for u in users], "randomizer": json.dumps(dict(randomizer)), "records": int(records), "sampling": sampling}
    if summarise:
        request["summarise"] = True
    return RecordDict({"request": ConfigRecord(request)})


def release_parts(parts: Sequence[RecordDict]) -> RecordDict:
    """Several release requests in one message (one per privacy tier): records "request", "request-1", ..."""
    return RecordDict({_part("request", i): part.config_records["request"] for i, part in enumerate(parts)})


def read_release_request(content: RecordDict) -> list[dict[str, Any]]:
    """The raw fields of each request part (validated against each user's limits by fed.runtime.requests)."""
    names = [name for name in content.config_records if name == "request" or name.startswith("request-")]
    if not names:
        raise RequestRefused("a release request needs a 'request' config record")
    if len(names) > MAX_PARTS:
        raise RequestRefused(f"a release message carries at most {MAX_PARTS} requests, got {len(names)}")
    expected = [_part("request", i) for i in range(len(names))]
    if sorted(names) != sorted(expected):
        raise RequestRefused(f"request parts must be named {', '.join(expected)}; got {', '.join(sorted(names))[:300]}")
    return [dict(content.config_records[name]) for name in expected]


def release_reply(replies: NodeReply | Sequence[NodeReply]) -> RecordDict:
    """A node's release reply: one part per reply, each with the report sums in place of reports when summarised."""
    parts = [replies] if isinstance(replies, NodeReply) else list(replies)
    content = RecordDict()
    for i, reply in enumerate(parts):
        content[_part("reports", i)], content[_part("meta", i)] = _reply_part(reply)
    return content


def _part(name: str, index: int) -> str:
    return name if index == 0 else f"{name}-{index}"


def _reply_part(reply: NodeReply) -> tuple[ArrayRecord, ConfigRecord]:
    arrays = {
        "reports": Array(np.ascontiguousarray(reply.reports, dtype=np.float32)),
        "labels": Array(reply.labels),
        "users": Array(reply.users),
        "slots": Array(reply.slots),
    }
    if reply.sums is not None:
        arrays.update(
            {
                "class-sums": Array(np.ascontiguousarray(reply.sums.class_sums, dtype=np.float64)),
                "label-counts": Array(np.ascontiguousarray(reply.sums.label_counts, dtype=np.float64)),
                "second-moment": Array(np.ascontiguousarray(reply.sums.second_moment, dtype=np.float64)),
            }
        )
    meta = ConfigRecord(
        {
            "status": "ok",
            "randomizer": json.dumps(reply.randomizer),
            "label-channel": json.dumps(reply.label_channel),
            "refusals": json.dumps({str(k): list(v) for k, v in reply.refusals.items()}),
            "ledgers": json.dumps({str(k): v for k, v in reply.ledgers.items()}),
            "host": reply.host,
            "ledger-seconds": float(reply.ledger_seconds),
            "summed-reports": -1 if reply.sums is None else int(reply.sums.count),
        }
    )
    return ArrayRecord(arrays), meta


def read_release_replies(content: RecordDict) -> list[NodeReply]:
    """Inverse of :func:`release_reply`: each part (a reply without "host", e.g. from an older node, reads as "")."""
    parts = []
    while _part("meta", len(parts)) in content.config_records:
        i = len(parts)
        parts.append(_read_reply_part(content[_part("reports", i)], content[_part("meta", i)]))
    return parts


def read_release_reply(content: RecordDict) -> NodeReply:
    """The one part of a single-part release reply (ValueError if it has several)."""
    parts = read_release_replies(content)
    if len(parts) != 1:
        raise ValueError(f"expected a release reply of one part, got {len(parts)}")
    return parts[0]


def _read_reply_part(arrays: ArrayRecord, meta: ConfigRecord) -> NodeReply:
    count = int(meta.get("summed-reports", -1))
    sums = None
    if count >= 0:
        sums = ReportSums(
            arrays["class-sums"].numpy(), arrays["label-counts"].numpy(), arrays["second-moment"].numpy(), count
        )
    return NodeReply(
        reports=arrays["reports"].numpy(),
        labels=arrays["labels"].numpy(),
        users=arrays["users"].numpy(),
        slots=arrays["slots"].numpy(),
        randomizer=json.loads(str(meta["randomizer"])),
        label_channel=json.loads(str(meta["label-channel"])),
        refusals={int(k): (str(v[0]), str(v[1])) for k, v in json.loads(str(meta["refusals"])).items()},
        ledgers={int(k): v for k, v in json.loads(str(meta["ledgers"])).items()},
        host=str(meta.get("host", "")),
        ledger_seconds=float(meta.get("ledger-seconds", 0.0)),
        sums=sums,
    )


# -- remote-inference answers ------------------------------------------------------------------
def answer_request(users: np.ndarray, slots: np.ndarray, scores: np.ndarray) -> RecordDict:
    """The server's scores for released query slots."""
    return RecordDict({"answers": ArrayRecord({"users": Array(users), "slots": Array(slots), "scores": Array(scores)})})


def read_answer_request(content: RecordDict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(users, slots, scores) of an answer request (checked further by the node)."""
    return tuple(_array(content, "answers", name) for name in ("users", "slots", "scores"))  # type: ignore[return-value]


def answer_reply(finished: list[int]) -> RecordDict:
    """The users whose true queries now all have k answers."""
    return RecordDict({"answered": ConfigRecord({"finished": json.dumps([int(u) for u in finished])})})


def read_answer_reply(content: RecordDict) -> list[int]:
    """Inverse of :func:`answer_reply`."""
    return [int(u) for u in json.loads(str(content["answered"]["finished"]))]


# -- evaluation outcomes -----------------------------------------------------------------------
MLP_LAYER = re.compile(r"layer(\d+)\.(weights|bias)")
"""The key of an MLP layer's part inside a model's arrays ("<name>.layer<i>.weights" or ".bias")."""


def models_record(models: Mapping[str, Model]) -> ArrayRecord:
    """Classifiers as one ArrayRecord: a linear model as "<name>.weights" and "<name>.bias", an MLP as
    "<name>.layer<i>.weights" and "<name>.layer<i>.bias" for each of its layers."""
    arrays: dict[str, Array] = {}
    for name, model in models.items():
        if isinstance(model, MLPModel):
            for i, (weights, bias) in enumerate(model.layers):
                arrays[f"{name}.layer{i}.weights"] = Array(np.asarray(weights, dtype=np.float64))
                arrays[f"{name}.layer{i}.bias"] = Array(np.asarray(bias, dtype=np.float64))
            continue
        arrays[f"{name}.weights"] = Array(np.asarray(model.weights, dtype=np.float64))
        arrays[f"{name}.bias"] = Array(np.asarray(model.bias, dtype=np.float64))
    return ArrayRecord(arrays)


def evaluate_request(models: Mapping[str, Model]) -> RecordDict:
    """Ask a node to apply the classifiers to its users' queries."""
    return RecordDict({"models": models_record(models)})


def read_evaluate_request(content: RecordDict, dim: int, num_classes: int, key: str = "models") -> dict[str, Model]:
    """The classifiers of an evaluate request (or of the array record ``key``): linear models and MLPs whose
    shapes fit ``dim`` inputs and ``num_classes`` scores, within the MLP size caps (fed.learning.mlp), holding
    finite floating-point numbers; anything else is refused before any array is read."""
    if key not in content.array_records:
        raise RequestRefused(f"the request needs a {key!r} array record")
    record = content.array_records[key]
    parts: dict[str, set[str]] = {}
    for item in record:
        name, _, part = item.partition(".")
        parts.setdefault(name, set()).add(part)
    models: dict[str, Model] = {}
    for name, found in sorted(parts.items()):
        if found <= {"weights", "bias"}:
            models[name] = _linear(record, name, found, dim, num_classes)
        elif all(MLP_LAYER.fullmatch(part) for part in found):
            models[name] = _mlp(record, name, found, dim, num_classes)
        else:
            odd = sorted(part for part in found if part not in ("weights", "bias") and not MLP_LAYER.fullmatch(part))
            raise RequestRefused(
                f"model {name!r} must be linear ('{name}.weights', '{name}.bias') or an MLP ('{name}.layer<i>.weights', "
                f"'{name}.layer<i>.bias'), got {', '.join(repr(f'{name}.{part}') for part in odd or sorted(found))}"[:400]
            )
    return models


def _linear(record: ArrayRecord, name: str, found: set[str], dim: int, num_classes: int) -> LinearModel:
    """The linear model ``name`` of ``record``, checked (RequestRefused naming the problem)."""
    if found != {"weights", "bias"}:
        raise RequestRefused(f"model {name!r} needs both '{name}.weights' and '{name}.bias'")
    weights, bias = _numpy(record, f"{name}.weights"), _numpy(record, f"{name}.bias")
    expected = ((dim, num_classes), (num_classes,))
    if (weights.shape, bias.shape) != expected:
        raise RequestRefused(
            f"model {name!r} has weights {weights.shape} and bias {bias.shape}, expected {expected[0]} and {expected[1]}"
        )
    if not (np.issubdtype(weights.dtype, np.floating) and np.isfinite(weights).all() and np.isfinite(bias).all()):
        raise RequestRefused(f"model {name!r} must hold finite floating-point numbers")
    return LinearModel(weights, bias)


def _mlp(record: ArrayRecord, name: str, found: set[str], dim: int, num_classes: int) -> MLPModel:
    """The MLP ``name`` of ``record``, checked against the size caps on the arrays' stated shapes before
    their bytes are read, and in full after (RequestRefused naming the problem)."""
    count = len(found) // 2
    if count > MAX_LAYERS:
        raise RequestRefused(f"model {name!r}: an MLP may have at most {MAX_LAYERS} layers, got {count}")
    expected = {f"layer{i}.{part}" for i in range(count) for part in ("weights", "bias")}
    if found != expected:
        raise RequestRefused(f"model {name!r}: an MLP needs the weights and bias of layers 0 to n-1, got {sorted(found)}"[:400])
    keys = [(f"{name}.layer{i}.weights", f"{name}.layer{i}.bias") for i in range(count)]
    stated = sum(int(np.prod(record[k].shape, dtype=np.float64)) for pair in keys for k in pair)
    if stated > MAX_PARAMETERS:
        raise RequestRefused(f"model {name!r}: an MLP may hold at most {MAX_PARAMETERS} numbers, got {stated}")
    try:
        return MLPModel.checked([(_numpy(record, w), _numpy(record, b)) for w, b in keys], dim, num_classes)
    except ValueError as error:
        raise RequestRefused(f"model {name!r}: {error}") from None


# -- central DP-FedAvg ---------------------------------------------------------------------------
CENTRAL_HEAD = "head"
"""Name of the softmax head in the array record of a ``train.central`` message."""
CENTRAL_WEIGHT = "weight"
"""FedAvg's weighting key: every user's update counts once (the sensitivity analysis needs equal weights)."""


def central_arrays(model: LinearModel) -> ArrayRecord:
    """The head as the one ArrayRecord of a ``train.central`` message (Flower's DP wrappers need exactly one)."""
    return models_record({CENTRAL_HEAD: model})


def read_central_request(content: RecordDict, dim: int, num_classes: int) -> tuple[LinearModel, float]:
    """The global head of a ``train.central`` request and the clipping norm Flower's wrapper put in its config."""
    if len(content.array_records) != 1 or len(content.config_records) != 1:
        raise RequestRefused("a train.central request needs exactly one array record and one config record")
    key = next(iter(content.array_records))
    models = read_evaluate_request(content, dim, num_classes, key=key)
    if set(models) != {CENTRAL_HEAD} or not isinstance(models[CENTRAL_HEAD], LinearModel):
        raise RequestRefused(f"a train.central request carries the linear model {CENTRAL_HEAD!r} only, got {sorted(models)}")
    config = next(iter(content.config_records.values()))
    norm = config.get("clipping_norm")
    if not isinstance(norm, float) or not np.isfinite(norm) or norm <= 0:
        raise RequestRefused(f"a train.central request needs a positive 'clipping_norm', got {norm!r}")
    return models[CENTRAL_HEAD], norm


def central_reply(model: LinearModel) -> RecordDict:
    """A user's locally trained head with weight 1 (fixedclipping_mod clips it against the request's)."""
    return RecordDict({"arrays": central_arrays(model), "metrics": MetricRecord({CENTRAL_WEIGHT: 1.0})})


def outcomes_reply(outcomes: Outcomes) -> RecordDict:
    """Evaluation outcomes, marked exact (simulation only) or randomized; exact ones also per user
    (arrays "users", "queries", "correct.<model>"), which :class:`Outcomes` allows only when exact."""
    metrics = {f"correct.{k}": int(v) for k, v in outcomes.correct.items()}
    metrics.update({f"total.{k}": int(v) for k, v in outcomes.total.items()})
    metrics.update(exact=int(outcomes.exact), keep=float(outcomes.keep_probability))
    content = RecordDict({"metrics": MetricRecord(metrics)})
    if outcomes.per_user is not None:
        per_user = {"users": outcomes.per_user.users, "queries": outcomes.per_user.queries}
        per_user.update({f"correct.{k}": v for k, v in outcomes.per_user.correct.items()})
        content["per-user"] = ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=np.int64)) for k, v in per_user.items()})
    return content


def read_outcomes_reply(content: RecordDict) -> Outcomes:
    """Inverse of :func:`outcomes_reply` (per-user arrays are read from exact outcomes only)."""
    metrics = content["metrics"]
    part = {prefix: {k.removeprefix(prefix): int(v) for k, v in metrics.items() if k.startswith(prefix)} for prefix in ("correct.", "total.")}
    exact = bool(metrics["exact"])
    per_user = None
    if exact and "per-user" in content.array_records:
        arrays = {k: v.numpy() for k, v in content.array_records["per-user"].items()}
        correct = {k.removeprefix("correct."): v for k, v in arrays.items() if k.startswith("correct.")}
        per_user = UserOutcomes(arrays["users"], arrays["queries"], correct)
    return Outcomes(part["correct."], part["total."], exact, float(metrics["keep"]), per_user)


# -- ledgers ---------------------------------------------------------------------------------
def ledger_reply(ledgers: Mapping[int, Mapping[str, Any]]) -> RecordDict:
    """Every hosted user's ledger answer (fed.runtime.node.NodeHost.ledgers), for the run directory."""
    return RecordDict({"ledgers": ConfigRecord({"json": json.dumps({str(k): v for k, v in ledgers.items()})})})


def read_ledger_reply(content: RecordDict) -> dict[int, dict[str, Any]]:
    """Inverse of :func:`ledger_reply`."""
    return {int(k): v for k, v in json.loads(str(content["ledgers"]["json"])).items()}


# -- refusals --------------------------------------------------------------------------------
def refusal(code: str, reason: str) -> RecordDict:
    """A structured refusal: a normal reply saying why nothing was released."""
    return RecordDict({"meta": ConfigRecord({"status": "refused", "code": str(code), "reason": reason})})


def read_refusal(content: RecordDict) -> tuple[str, str] | None:
    """(code, reason) of a refusal, or None when the reply is not one."""
    if "meta" not in content.config_records or str(content["meta"].get("status", "")) != "refused":
        return None
    return str(content["meta"]["code"]), str(content["meta"]["reason"])


def _array(content: RecordDict, record: str, key: str) -> np.ndarray:
    if record not in content.array_records or key not in content.array_records[record]:
        raise RequestRefused(f"the request needs '{record}.{key}'")
    return _numpy(content.array_records[record], key, f"{record}.")


def _numpy(record: ArrayRecord, key: str, prefix: str = "") -> np.ndarray:
    """The numpy array under ``key``; RequestRefused naming it when its bytes are not a readable numpy array."""
    try:
        return record[key].numpy()
    except Exception as error:  # noqa: BLE001 - any bytes may arrive, and np.load raises many kinds of errors on them
        raise RequestRefused(f"'{prefix}{key}' is not a readable numpy array ({type(error).__name__}: {error})"[:300]) from None
