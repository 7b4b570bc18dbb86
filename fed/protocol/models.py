"""Classifiers sent to nodes (``evaluate``, ``train.central``) and the outcomes nodes return."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.learning.evaluation import Outcomes, UserOutcomes
from ldpfed.fed.learning.mlp import MAX_LAYERS, MAX_PARAMETERS, MLPModel
from ldpfed.fed.learning.server_classifier import Model
from ldpfed.fed.protocol.content import Arrays, Content, Metrics, Readable, numpy, value
from ldpfed.fed.runtime.requests import RequestRefused

MLP_LAYER = re.compile(r"layer(\d+)\.(weights|bias)")
"""The key of an MLP layer's part inside a model's arrays ("<name>.layer<i>.weights" or ".bias")."""


def models_record(models: Mapping[str, Model]) -> Arrays:
    """Classifiers as one array record: a linear model as "<name>.weights" and "<name>.bias", an MLP as
    "<name>.layer<i>.weights" and "<name>.layer<i>.bias" for each of its layers."""
    arrays = Arrays()
    for name, model in models.items():
        if isinstance(model, MLPModel):
            for i, (weights, bias) in enumerate(model.layers):
                arrays[f"{name}.layer{i}.weights"] = np.asarray(weights, dtype=np.float64)
                arrays[f"{name}.layer{i}.bias"] = np.asarray(bias, dtype=np.float64)
            continue
        arrays[f"{name}.weights"] = np.asarray(model.weights, dtype=np.float64)
        arrays[f"{name}.bias"] = np.asarray(model.bias, dtype=np.float64)
    return arrays


def evaluate_request(models: Mapping[str, Model]) -> Content:
    """Ask a node to apply the classifiers to its users' queries."""
    return Content({"models": models_record(models)})


def read_evaluate_request(content: Readable, dim: int, num_classes: int, key: str = "models") -> dict[str, Model]:
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


def _linear(record: Mapping[str, Any], name: str, found: set[str], dim: int, num_classes: int) -> LinearModel:
    """The linear model ``name`` of ``record``, checked (RequestRefused naming the problem)."""
    if found != {"weights", "bias"}:
        raise RequestRefused(f"model {name!r} needs both '{name}.weights' and '{name}.bias'")
    weights, bias = numpy(record, f"{name}.weights"), numpy(record, f"{name}.bias")
    expected = ((dim, num_classes), (num_classes,))
    if (weights.shape, bias.shape) != expected:
        raise RequestRefused(
            f"model {name!r} has weights {weights.shape} and bias {bias.shape}, expected {expected[0]} and {expected[1]}"
        )
    if not (np.issubdtype(weights.dtype, np.floating) and np.isfinite(weights).all() and np.isfinite(bias).all()):
        raise RequestRefused(f"model {name!r} must hold finite floating-point numbers")
    return LinearModel(weights, bias)


def _mlp(record: Mapping[str, Any], name: str, found: set[str], dim: int, num_classes: int) -> MLPModel:
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
        return MLPModel.checked([(numpy(record, w), numpy(record, b)) for w, b in keys], dim, num_classes)
    except ValueError as error:
        raise RequestRefused(f"model {name!r}: {error}") from None


# -- central DP-FedAvg ---------------------------------------------------------------------------
CENTRAL_HEAD = "head"
"""Name of the softmax head in the array record of a ``train.central`` message."""
CENTRAL_WEIGHT = "weight"
"""FedAvg's weighting key: every user's update counts once (the sensitivity analysis needs equal weights)."""
CENTRAL_NORM, CENTRAL_ROUND = "clipping_norm", "server-round"
"""The keys Flower's DP wrapper and FedAvg put in a ``train.central`` request's config record."""


def central_arrays(model: LinearModel) -> Arrays:
    """The head as the one array record of a ``train.central`` message (Flower's DP wrappers need exactly one)."""
    return models_record({CENTRAL_HEAD: model})


def central_request_refusal(content: Readable) -> str | None:
    """Why a ``train.central`` request has not the shape Flower's clipping mods read before the handler runs (one
    array record, one config record holding a positive finite clipping norm); None when it has."""
    if len(content.array_records) != 1 or len(content.config_records) != 1:
        return "a train.central request needs exactly one array record and one config record"
    norm = next(iter(content.config_records.values())).get(CENTRAL_NORM)
    if not isinstance(norm, float) or not np.isfinite(norm) or norm <= 0:
        return f"a train.central request needs a positive {CENTRAL_NORM!r}, got {str(norm)[:50]!r}"
    return None


def read_central_request(content: Readable, dim: int, num_classes: int) -> tuple[LinearModel, float]:
    """The global head of a ``train.central`` request and the clipping norm Flower's wrapper put in its config."""
    malformed = central_request_refusal(content)
    if malformed:
        raise RequestRefused(malformed)
    key = next(iter(content.array_records))
    models = read_evaluate_request(content, dim, num_classes, key=key)
    if set(models) != {CENTRAL_HEAD} or not isinstance(models[CENTRAL_HEAD], LinearModel):
        raise RequestRefused(f"a train.central request carries the linear model {CENTRAL_HEAD!r} only, got {sorted(models)}")
    norm = next(iter(content.config_records.values()))[CENTRAL_NORM]
    return models[CENTRAL_HEAD], norm


def read_central_round(content: Readable) -> int:
    """The server round of a ``train.central`` request read by :func:`read_central_request` (0 when it names none)."""
    return int(next(iter(content.config_records.values())).get(CENTRAL_ROUND, 0))


def central_reply(model: LinearModel) -> Content:
    """A user's locally trained head with weight 1 (fixedclipping_mod clips it against the request's)."""
    return Content({"arrays": central_arrays(model), "metrics": Metrics({CENTRAL_WEIGHT: 1.0})})


# -- evaluation outcomes -----------------------------------------------------------------------
def outcomes_reply(outcomes: Outcomes) -> Content:
    """Evaluation outcomes, marked exact (simulation only) or randomized; exact ones also per user
    (arrays "users", "queries", "correct.<model>"), which :class:`Outcomes` allows only when exact."""
    metrics = {f"correct.{k}": int(v) for k, v in outcomes.correct.items()}
    metrics.update({f"total.{k}": int(v) for k, v in outcomes.total.items()})
    metrics.update(exact=int(outcomes.exact), keep=float(outcomes.keep_probability))
    content = Content({"metrics": Metrics(metrics)})
    if outcomes.per_user is not None:
        per_user = {"users": outcomes.per_user.users, "queries": outcomes.per_user.queries}
        per_user.update({f"correct.{k}": v for k, v in outcomes.per_user.correct.items()})
        content["per-user"] = Arrays({k: np.ascontiguousarray(v, dtype=np.int64) for k, v in per_user.items()})
    return content


def read_outcomes_reply(content: Readable) -> Outcomes:
    """Inverse of :func:`outcomes_reply` (per-user arrays are read from exact outcomes only)."""
    metrics = content["metrics"]
    part = {prefix: {k.removeprefix(prefix): int(v) for k, v in metrics.items() if k.startswith(prefix)} for prefix in ("correct.", "total.")}
    exact = bool(metrics["exact"])
    per_user = None
    if exact and "per-user" in content.array_records:
        arrays = {k: value(v) for k, v in content.array_records["per-user"].items()}
        correct = {k.removeprefix("correct."): v for k, v in arrays.items() if k.startswith("correct.")}
        per_user = UserOutcomes(arrays["users"], arrays["queries"], correct)
    return Outcomes(part["correct."], part["total."], exact, float(metrics["keep"]), per_user)
