"""How ldpfed's payloads travel in Flower records (shared by ClientApp and ServerApp)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fed.classifier import LinearModel
from fed.node import NodeReply


def reply_to_record(reply: NodeReply) -> RecordDict:
    """A node's release reply as a RecordDict."""
    arrays = ArrayRecord(
        {
            "reports": Array(np.ascontiguousarray(reply.reports, dtype=np.float32)),
            "labels": Array(reply.labels),
            "users": Array(reply.users),
            "slots": Array(reply.slots),
        }
    )
    meta = ConfigRecord(
        {
            "status": "ok",
            "randomizer": json.dumps(reply.randomizer),
            "label-channel": json.dumps(reply.label_channel),
            "refusals": json.dumps({str(k): v for k, v in reply.refusals.items()}),
            "ledgers": json.dumps({str(k): v for k, v in reply.ledgers.items()}),
        }
    )
    return RecordDict({"reports": arrays, "meta": meta})


def record_to_reply(content: RecordDict) -> NodeReply:
    """Inverse of :func:`reply_to_record`."""
    arrays, meta = content["reports"], content["meta"]
    return NodeReply(
        reports=arrays["reports"].numpy(),
        labels=arrays["labels"].numpy(),
        users=arrays["users"].numpy(),
        slots=arrays["slots"].numpy(),
        randomizer=json.loads(str(meta["randomizer"])),
        label_channel=json.loads(str(meta["label-channel"])),
        refusals={int(k): v for k, v in json.loads(str(meta["refusals"])).items()},
        ledgers={int(k): v for k, v in json.loads(str(meta["ledgers"])).items()},
    )


def models_to_record(models: Mapping[str, LinearModel]) -> ArrayRecord:
    """Classifiers as one ArrayRecord ("<name>.weights", "<name>.bias")."""
    arrays: dict[str, Array] = {}
    for name, model in models.items():
        arrays[f"{name}.weights"] = Array(np.asarray(model.weights, dtype=np.float64))
        arrays[f"{name}.bias"] = Array(np.asarray(model.bias, dtype=np.float64))
    return ArrayRecord(arrays)


def record_to_models(record: ArrayRecord, dim: int, num_classes: int) -> dict[str, LinearModel]:
    """Inverse of :func:`models_to_record`, checking shapes and finiteness (server is untrusted)."""
    models = {}
    for key in record:
        name, _, part = key.rpartition(".")
        if part != "weights":
            continue
        weights, bias = record[key].numpy(), record[f"{name}.bias"].numpy()
        if weights.shape != (dim, num_classes) or bias.shape != (num_classes,):
            raise ValueError(f"model {name!r} has shape {weights.shape}, expected {(dim, num_classes)}")
        if not (np.isfinite(weights).all() and np.isfinite(bias).all()):
            raise ValueError(f"model {name!r} contains NaN or infinite values")
        models[name] = LinearModel(weights, bias)
    return models


def refusal(reason: str) -> RecordDict:
    """A structured refusal: a normal reply saying why nothing was released."""
    return RecordDict({"meta": ConfigRecord({"status": "refused", "reason": reason})})


def is_refusal(content: RecordDict) -> bool:
    """Whether a reply is a structured refusal."""
    return "meta" in content and str(content["meta"].get("status", "")) == "refused"
