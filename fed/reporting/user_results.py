"""Per-user local-inference results of a simulation, and their spread over users and groups.

Simulation only: a simulated node returns each user's exact correct counts with the pooled ones
(:class:`fed.learning.evaluation.UserOutcomes`); a device returns only pooled randomized bits, so a
deployed server has no per-user accuracy. Figures over users count only users with queries:

- percentiles p10 / p50 / p90 of per-user accuracy (as LEAF reports);
- the mean of the worst 10% of users and the variance across users (q-FFL's fairness figures);
- the gap between tiers: the best tier's mean per-user accuracy minus the worst tier's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfed.fed.learning.evaluation import UserOutcomes
from ldpfed.fed.reporting.groups import TIER, Axis

WORST_SHARE = 0.1
"""Share of users whose mean accuracy is the worst-users figure (q-FFL: the worst 10%)."""
MODEL = "private"
"""The model whose per-user accuracy the round metrics and group tables describe."""


@dataclass(frozen=True)
class UserResults:
    """One round's exact outcomes by user id: queries evaluated and correct counts per model."""

    queries: np.ndarray
    correct: dict[str, np.ndarray]

    @classmethod
    def pool(cls, parts: Iterable[UserOutcomes], users: int) -> "UserResults":
        """The outcomes of every node that replied, placed by user id (0 queries: no outcome)."""
        queries = np.zeros(users, dtype=np.int64)
        correct: dict[str, np.ndarray] = {}
        for part in parts:
            queries[part.users] = part.queries
            for name, values in part.correct.items():
                correct.setdefault(name, np.zeros(users, dtype=np.int64))[part.users] = values
        return cls(queries, correct)

    def accuracy(self, model: str = MODEL) -> np.ndarray:
        """Per-user accuracy of ``model`` by user id (NaN: no queries, or the model was not evaluated)."""
        if model not in self.correct:
            return np.full(len(self.queries), np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.queries > 0, self.correct[model] / self.queries, np.nan)


def spread(accuracy: np.ndarray) -> dict[str, float | int | None]:
    """Users with an accuracy, their mean, p10 / p50 / p90, worst-10% mean and variance (NaN entries skipped)."""
    values = np.sort(accuracy[np.isfinite(accuracy)])
    if not values.size:
        return {"users_evaluated": 0, "mean": None, "p10": None, "p50": None, "p90": None, "worst10_mean": None, "variance": None}
    p10, p50, p90 = np.percentile(values, [10, 50, 90])
    return {
        "users_evaluated": int(values.size),
        "mean": float(values.mean()),
        "p10": float(p10),
        "p50": float(p50),
        "p90": float(p90),
        "worst10_mean": float(values[: max(1, math.ceil(WORST_SHARE * values.size))].mean()),
        "variance": float(values.var()),
    }


def by_group(accuracy: np.ndarray, axes: Iterable[Axis]) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`spread` of per-user accuracy within every group of every axis."""
    return {axis.name: {group: spread(accuracy[members]) for group, members in axis.members()} for axis in axes}


def tier_gap(groups: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> float | None:
    """Best tier's mean per-user accuracy minus the worst tier's (None with fewer than two tiers evaluated)."""
    means = [g["mean"] for g in groups.get(TIER, {}).values() if g["mean"] is not None]
    return float(max(means) - min(means)) if len(means) > 1 else None


def round_metrics(results: UserResults, axes: list[Axis]) -> dict[str, Any]:
    """A round's per-user figures of the private model: spread over all users and per group, tier gap."""
    accuracy = results.accuracy()
    overall = spread(accuracy)
    groups = by_group(accuracy, axes)
    metrics: dict[str, Any] = {"users_evaluated": overall.pop("users_evaluated")}
    metrics.update({f"accuracy_user_{key}": value for key, value in overall.items()})
    metrics["accuracy_tier_gap"] = tier_gap(groups)
    metrics["groups"] = groups
    return metrics


def users_table(results: UserResults, node: np.ndarray, axes: list[Axis], columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """users.csv, one row per user id: the user, its node, its group on every axis, ``columns``
    (records, releases, epsilons), and the exact correct count and accuracy of every evaluated model."""
    table: dict[str, np.ndarray] = {"user": np.arange(len(results.queries)), "node": node}
    table.update({axis.name.replace(" ", "_").replace("-", "_"): axis.labels() for axis in axes})
    table.update(columns)
    table["queries_evaluated"] = results.queries
    for name in sorted(results.correct, key=lambda n: (n != MODEL, n)):
        table[f"correct_{name}"] = results.correct[name]
        table[f"accuracy_{name}"] = results.accuracy(name)
    return table


def group_summary(
    results: UserResults, axes: list[Axis], epsilon_sentence: np.ndarray, epsilon_user: np.ndarray, releases: np.ndarray
) -> dict[str, Any]:
    """Per group of every axis: the private model's per-user accuracy spread next to the group's
    worst-case epsilons (max and median over its users) and releases; the tier gap."""
    accuracy = results.accuracy()
    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for axis in axes:
        groups[axis.name] = {}
        for group, members in axis.members():
            sentence, user = epsilon_sentence[members], epsilon_user[members]
            sentence, user = sentence[~np.isnan(sentence)], user[~np.isnan(user)]
            groups[axis.name][group] = {
                "users": int(members.sum()),
                **spread(accuracy[members]),
                "epsilon_sentence_max": float(sentence.max()) if sentence.size else None,
                "epsilon_sentence_median": float(np.median(sentence)) if sentence.size else None,
                "epsilon_user_max": float(user.max()) if user.size else None,
                "epsilon_user_median": float(np.median(user)) if user.size else None,
                "releases": int(np.nansum(releases[members])),
            }
    return {"model": MODEL, "overall": spread(accuracy), "tier_gap": tier_gap(groups), "axes": groups}
