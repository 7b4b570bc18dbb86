"""Privacy tiers: groups of simulated users, each with its own sentence-level epsilon.

``--tiers "0.5:1,0.3:3,0.2:8"`` gives half of the users a worst-case budget of 1 per record, 30% a
budget of 3 and 20% a budget of 8. Each tier is a run of its own as far as privacy goes: its users'
policy, budget, noise floor and calibrated randomizers are those of the run with ``--epsilon`` set
to the tier's (:meth:`PrivacyTiers.overrides`), so the server asks each tier with the tier's noise and every
user refuses anything noisier-less than its own tier allows. Which user is in which tier is drawn
from the run seed, so the server and every simulated node derive the same assignment.

Simulation only: on a device the owner's policy sets the budget, whatever the run says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis, ServedGroups
from ldpfed.fed.heterogeneity.shares import assign_shares, parse_shares, share_counts
from ldpfed.fed.configuration.option import Option

if TYPE_CHECKING:
    from ldpfed.fed.configuration.plan import PrivacyPlan
    from ldpfed.fed.configuration.run_spec import RunSpec

TIER_STREAM = 7
"""Seed tag of the tier assignment, apart from the run's other seeded draws."""


@dataclass(frozen=True)
class Tier:
    """A share of the users and their sentence-level epsilon."""

    share: float
    epsilon: float


@dataclass(frozen=True)
class Tiers:
    """The run's privacy tiers, in the order given."""

    tiers: tuple[Tier, ...]

    @classmethod
    def parse(cls, spec: str) -> "Tiers":
        """``"0.5:1,0.3:3,0.2:8"`` (share:epsilon, shares summing to 1); ValueError naming the problem."""
        return cls(tuple(Tier(share, epsilon) for share, epsilon in parse_shares(spec, "--tiers", "epsilon", _epsilon)))

    def counts(self, users: int) -> np.ndarray:
        """Users per tier: the shares of ``users`` rounded by largest remainder (they sum to ``users``)."""
        return share_counts([t.share for t in self.tiers], users)

    def assign(self, users: int, seed: int) -> np.ndarray:
        """Each user's tier index, by user id: :meth:`counts` users per tier, placed by a seeded permutation."""
        return assign_shares([t.share for t in self.tiers], users, seed, TIER_STREAM)


def _epsilon(text: str) -> float:
    """A tier's epsilon: a positive finite number."""
    try:
        epsilon = float(text)
    except ValueError:
        epsilon = math.nan
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"a tier's epsilon must be a positive finite number, got {text!r}")
    return epsilon


class PrivacyTiers(HeterogeneityAxis):
    """The privacy-tier axis (--tiers): each tier's users are served with the tier's epsilon."""

    name = "privacy tier"
    options = (
        Option(
            "tiers", str, "",
            "privacy tiers as share:epsilon pairs, e.g. '0.5:1,0.3:3,0.2:8': each share of the users (drawn by --seed) "
            "gets its own sentence-level epsilon in place of --epsilon, with its own policy, noise and ledger budget "
            "(simulation only; a device's policy sets its own). Empty: every user has --epsilon",
        ),
    )

    def parse(self, values: Mapping[str, Any]) -> Tiers | None:
        """The parsed --tiers (None: no tiers)."""
        return Tiers.parse(values["tiers"]) if values["tiers"] else None

    def check(self, setting: Tiers, spec: "RunSpec") -> None:
        """A tier's noise is calibrated to its epsilon: the run must calibrate, not take --sigma or fixed parameters."""
        from ldpfed.fed.randomizers import RANDOMIZERS  # here: importing the registry stays light

        privacy = spec.privacy
        if privacy.sigma > 0:
            raise ValueError("--tiers sets each tier's noise from its epsilon: drop --sigma")
        if RANDOMIZERS[privacy.mechanism].fixed_params(privacy.epsilon, privacy.mechanism_option_values) is not None:
            raise ValueError(f"--tiers needs a randomizer calibrated to epsilon; {privacy.mechanism} has fixed parameters")

    def assign(self, setting: Tiers, users: int, seed: int) -> np.ndarray:
        """Each user's tier (:meth:`Tiers.assign`)."""
        return setting.assign(users, seed)

    def group_names(self, setting: Tiers) -> tuple[str, ...]:
        """Each tier's epsilon."""
        return tuple(f"epsilon {tier.epsilon:g}" for tier in setting.tiers)

    def overrides(self, setting: Tiers, group: int) -> dict[str, Any]:
        """The run as tier ``group``'s users see it: the same options with the tier's epsilon."""
        return {"epsilon": setting.tiers[group].epsilon, "tiers": ""}

    def reported_groups(self, setting: Tiers) -> bool:
        """No: reports group users by the budget their ledgers enforced (fed.reporting.groups.tiers), with or without tiers."""
        return False

    def group_baseline(self, setting: Tiers) -> bool:
        """Yes: the largest-budget tier's reports alone show what the other tiers add."""
        return True

    def summary(self, setting: Tiers, groups: ServedGroups) -> dict[str, Any]:
        """``tiers``: each tier's row (:func:`tier_rows`)."""
        return {"tiers": tier_rows(groups.specs, groups.plans, groups.group_of, groups.sentence)}

    def report_lines(self, setting: Tiers, spec: "RunSpec", result: Mapping[str, Any], fmt: Callable[[Any], str]) -> list[str]:
        """The section on privacy tiers (:func:`tier_lines`)."""
        return tier_lines(result["tiers"], spec.evaluation.weighting, result, fmt) if result.get("tiers") else []


def tier_rows(
    specs: Sequence["RunSpec"], plans: Sequence["PrivacyPlan"], tier_of: np.ndarray, sentence: np.ndarray
) -> list[dict[str, float | int | None]]:
    """Each tier's users, budget, noise and the worst-case epsilon its users' ledgers reached
    (``sentence``: each user's, by user id; NaN where unknown), for the summary and privacy report.

    A row per group of users served with their own run options (fed.heterogeneity.registry.spec_groups): a
    tier, or with another axis that sets run options, a tier's share of that axis's group."""
    rows = []
    for tier, (spec, plan) in enumerate(zip(specs, plans)):
        members = tier_of == tier
        spent = sentence[members & np.isfinite(sentence)]
        rows.append(
            {
                "tier": tier + 1,
                "share": float(members.mean()) if len(members) else 0.0,
                "users": int(members.sum()),
                "epsilon": spec.privacy.epsilon,
                "epsilon_budget": plan.budget.epsilon_sentence,
                "sigma_train": plan.train.params().get("sigma"),
                "sigma_query": plan.query.params().get("sigma"),
                "epsilon_sentence_max": float(spent.max()) if len(spent) else None,
            }
        )
    return rows


def tier_lines(
    rows: list[dict[str, Any]], weighting: str, accuracies: Mapping[str, Any], fmt: Callable[[Any], str]
) -> list[str]:
    """The privacy report's section on privacy tiers (rows: :func:`tier_rows`), with the whole model's
    local-inference accuracy next to that of the largest-budget tier's reports alone."""
    lines = [
        "## Privacy tiers",
        "",
        "Each tier's users hold their own policy: the budget below, and noise calibrated to it. The randomizer, "
        "calibration and accountant sections above describe the tier with the largest budget.",
        "",
        "| tier | users | share | epsilon | budget per record | sigma (training) | sigma (queries) | worst-case epsilon, max over its users |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['tier']} | {row['users']} | {row['share']:.3f} | {row['epsilon']:g} | {row['epsilon_budget']:.4f} | "
            f"{fmt(row['sigma_train'])} | {fmt(row['sigma_query'])} | {fmt(row['epsilon_sentence_max'])} |"
        )
    top = max(rows, key=lambda row: row["epsilon"])["tier"]
    lines += [
        "",
        f"Local-inference accuracy of the classifier trained on every tier's reports ({weighting} weighting): "
        f"{fmt(accuracies.get('accuracy_local')) or '-'}; on tier {top}'s reports alone: "
        f"{fmt(accuracies.get('accuracy_top_tier_only')) or '-'}.",
    ]
    return lines
