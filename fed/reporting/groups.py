"""Which group each simulated user belongs to: privacy tier, size and label-skew quartiles, availability.

Simulation only. The server of a simulation rebuilds the run's :class:`~fed.data.population.Population`
(as the non-private baseline does) to read each user's record counts and labels; a deployed
server never sees a user's labels, so nothing here runs there.

- tier: the user's sentence-level budget (one group per distinct budget);
- size quantile: quartiles of the number of training records;
- label-skew quantile: quartiles of the total-variation distance between the user's training
  label distribution and the whole training split's;
- availability: users that answered at least one training request against those that never did (the
  groups and their names are the availability axis's, fed.heterogeneity.registry.participation_groups);
- each heterogeneity axis that reports groups (fed.heterogeneity.registry), e.g. the device tier
  (with --device-tiers): the most tokens the user's device encoder reads.

Quartile edges come from the values themselves, so users with equal values always share a group
(with equal sizes, e.g. an iid partition, there are fewer than four size groups).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ldpfed.fed.heterogeneity.registry import participation_groups, reported_groups
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.data.population import Population
from ldpfed.fed.configuration.run_spec import RunSpec

TIER, SIZE, SKEW = "tier", "size quantile", "label-skew quantile"


@dataclass(frozen=True)
class Axis:
    """One way of splitting users: each user's group (index into ``groups``; -1: none), by user id."""

    name: str
    codes: np.ndarray
    groups: tuple[str, ...]

    def members(self) -> Iterator[tuple[str, np.ndarray]]:
        """Each group's name and its users as a boolean mask over user ids."""
        for code, group in enumerate(self.groups):
            yield group, self.codes == code

    def labels(self) -> np.ndarray:
        """Each user's group name ("" where it has none)."""
        return np.array(list(self.groups) + [""], dtype=object)[self.codes]


def tiers(budgets: np.ndarray) -> Axis:
    """One group per distinct sentence-level budget, smallest first."""
    values = np.unique(budgets)
    return Axis(TIER, np.searchsorted(values, budgets).astype(np.int64), tuple(f"epsilon {v:g}" for v in values))


def quartiles(name: str, values: np.ndarray, unit: str, spec: str = "g") -> Axis:
    """Quartile groups of ``values`` (NaN: no group), named by their quartile and range of values."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    edges = np.quantile(values[finite], [0.25, 0.5, 0.75]) if finite.any() else np.zeros(0)
    quartile = np.where(finite, np.searchsorted(edges, values, side="left"), -1)
    present = [q for q in range(4) if (quartile == q).any()]
    ranges = [(values[quartile == q].min(), values[quartile == q].max()) for q in present]
    names = tuple(
        f"Q{q + 1}: {lo:{spec}} {unit}" if f"{lo:{spec}}" == f"{hi:{spec}}" else f"Q{q + 1}: {lo:{spec}}-{hi:{spec}} {unit}"
        for q, (lo, hi) in zip(present, ranges)
    )
    lookup = np.full(5, -1, dtype=np.int64)
    lookup[present] = np.arange(len(present))
    return Axis(name, lookup[quartile], names)


def participation(took_part: np.ndarray) -> tuple[Axis, ...]:
    """Users that answered at least one training request, and those that never did, as the axes that group so
    (fed.heterogeneity.registry; the availability axis)."""
    return tuple(Axis(name, codes, names) for name, codes, names in participation_groups(took_part))


def heterogeneity_axes(spec: RunSpec) -> tuple[Axis, ...]:
    """The groups of every heterogeneity axis of the run that reports them (e.g. device tiers), in registry order."""
    return tuple(Axis(name, codes, names) for name, codes, names in reported_groups(spec))


def label_skew(population: Population) -> np.ndarray:
    """Total-variation distance of each user's training labels from the training split's (NaN: no records),
    rounded to 9 decimals so that users with the same label distribution fall in the same quartile."""
    labels = population.train.labels
    k = int(population.train.num_labels)
    sizes = np.array([len(part) for part in population.train_parts], dtype=np.int64)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    rows = labels[np.concatenate(population.train_parts)] if len(sizes) else np.zeros(0, np.int64)
    counts = np.bincount(owner * k + rows, minlength=len(sizes) * k).reshape(len(sizes), k)
    overall = np.bincount(labels, minlength=k) / max(len(labels), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        own = counts / sizes[:, None]
    return np.round(0.5 * np.abs(own - overall).sum(axis=1), 9)


def simulated_budgets(plans: Sequence[PrivacyPlan], tier_of: np.ndarray) -> np.ndarray:
    """Each simulated user's sentence-level budget, by user id: its privacy tier's (``plans`` by tier, fed.heterogeneity.tiers)."""
    return np.array([plan.budget.epsilon_sentence for plan in plans], dtype=np.float64)[tier_of]


@dataclass(frozen=True)
class UserAttributes:
    """What a simulation knows about each user, by user id."""

    budget: np.ndarray
    train_records: np.ndarray
    query_records: np.ndarray
    label_skew: np.ndarray
    heterogeneity: tuple[Axis, ...] = ()
    """The groups of the run's heterogeneity axes (:func:`heterogeneity_axes`)."""

    @classmethod
    def from_population(
        cls, population: Population, budgets: np.ndarray, heterogeneity: tuple[Axis, ...] = ()
    ) -> "UserAttributes":
        """Record counts and label skew from the run's population; ``budgets`` by user id; ``heterogeneity``: the
        groups of the run's heterogeneity axes."""
        return cls(
            budget=np.asarray(budgets, dtype=np.float64),
            train_records=np.array([len(p) for p in population.train_parts], dtype=np.int64),
            query_records=np.array([len(p) for p in population.query_parts], dtype=np.int64),
            label_skew=label_skew(population),
            heterogeneity=heterogeneity,
        )

    def with_budgets(self, budgets: np.ndarray) -> "UserAttributes":
        """The same users with ``budgets`` (by user id; NaN keeps the one held), e.g. those the ledgers enforced."""
        return replace(self, budget=np.where(np.isnan(budgets), self.budget, budgets))

    def axes(self, took_part: np.ndarray) -> list[Axis]:
        """Every grouping of the users (``took_part``: by user id, whether it answered a training request)."""
        return [
            tiers(self.budget),
            quartiles(SIZE, self.train_records, "records"),
            quartiles(SKEW, self.label_skew, "TV", ".2f"),
            *participation(took_part),
            *self.heterogeneity,
        ]
