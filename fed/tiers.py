"""Privacy tiers: groups of simulated users, each with its own sentence-level epsilon.

``--tiers "0.5:1,0.3:3,0.2:8"`` gives half of the users a worst-case budget of 1 per record, 30% a
budget of 3 and 20% a budget of 8. Each tier is a run of its own as far as privacy goes: its users'
policy, budget, noise floor and calibrated randomizers are those of the run with ``--epsilon`` set
to the tier's (:meth:`Tiers.config`), so the server asks each tier with the tier's noise and every
user refuses anything noisier-less than its own tier allows. Which user is in which tier is drawn
from the run seed, so the server and every simulated node derive the same assignment.

Simulation only: on a device the owner's policy sets the budget, whatever the run says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from fed.shares import assign_shares, parse_shares, share_counts

if TYPE_CHECKING:
    from fed.config import RunConfig
    from fed.plan import PrivacyPlan

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

    def config(self, config: "RunConfig", tier: int) -> "RunConfig":
        """The run as tier ``tier``'s users see it: the same options with the tier's epsilon."""
        return replace(config, epsilon=self.tiers[tier].epsilon, tiers="")


def _epsilon(text: str) -> float:
    """A tier's epsilon: a positive finite number."""
    try:
        epsilon = float(text)
    except ValueError:
        epsilon = math.nan
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"a tier's epsilon must be a positive finite number, got {text!r}")
    return epsilon


def run_tiers(config: "RunConfig") -> tuple[list["RunConfig"], np.ndarray]:
    """Each tier's run config, and each user's tier by user id (one tier, the run itself, without --tiers)."""
    if not config.tiers:
        return [config], np.zeros(config.users, dtype=np.int64)
    tiers = Tiers.parse(config.tiers)
    return [tiers.config(config, t) for t in range(len(tiers.tiers))], tiers.assign(config.users, config.seed)


def tier_rows(
    configs: list["RunConfig"], plans: list["PrivacyPlan"], tier_of: np.ndarray, sentence: np.ndarray
) -> list[dict[str, float | int | None]]:
    """Each tier's users, budget, noise and the worst-case epsilon its users' ledgers reached
    (``sentence``: each user's, by user id; NaN where unknown), for the summary and privacy report."""
    rows = []
    for tier, (config, plan) in enumerate(zip(configs, plans)):
        members = tier_of == tier
        spent = sentence[members & np.isfinite(sentence)]
        rows.append(
            {
                "tier": tier + 1,
                "share": float(members.mean()) if len(members) else 0.0,
                "users": int(members.sum()),
                "epsilon": config.epsilon,
                "epsilon_budget": plan.budget.epsilon_sentence,
                "sigma_train": plan.train.params().get("sigma"),
                "sigma_query": plan.query.params().get("sigma"),
                "epsilon_sentence_max": float(spent.max()) if len(spent) else None,
            }
        )
    return rows
