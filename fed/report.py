"""The run's summary.json and privacy_report.md, computed from the users' full ledgers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fed.config import RunConfig
from fed.plan import PrivacyPlan
from fed.privacy.accountants import clt
from fed.privacy.accountants.base import AccountantFigure, Schedule
from fed.privacy.ledger import Ledger


@dataclass(frozen=True)
class LedgerFigures:
    """Worst-case figures per user, recomputed by the server from the ledgers it collected."""

    sentence: np.ndarray
    user: np.ndarray
    releases: int

    @classmethod
    def from_ledgers(cls, ledgers: dict[int, dict[str, Any]]) -> "LedgerFigures":
        """Compose every user's ledger (sentence level: max over records; user level: all releases)."""
        parsed = [Ledger.from_json(data) for data in ledgers.values()]
        return cls(
            sentence=np.array([ledger.sentence_epsilon() for ledger in parsed]),
            user=np.array([ledger.user_epsilon() for ledger in parsed]),
            releases=sum(ledger.releases() for ledger in parsed),
        )


def amplified_estimate(config: RunConfig, plan: PrivacyPlan) -> AccountantFigure:
    """Seed 000 eq. 8 for this run: rate = share of users sampled per round, T = rounds."""
    rate = config.users_per_round / config.users if config.users_per_round else 1.0
    event = plan.train.event
    return clt.figure(Schedule(event.sigma / event.sensitivity, rate, config.rounds, config.delta))


def summary(
    config: RunConfig,
    plan: PrivacyPlan,
    figures: LedgerFigures,
    accuracies: dict[str, float | None],
    seconds: float,
) -> dict[str, Any]:
    """summary.json: accuracies next to the privacy figures that paid for them."""
    estimate = amplified_estimate(config, plan)
    return {
        **accuracies,
        "epsilon_sentence_max": float(figures.sentence.max(initial=0.0)),
        "epsilon_sentence_median": float(np.median(figures.sentence)) if figures.sentence.size else 0.0,
        "epsilon_user_max": float(figures.user.max(initial=0.0)),
        "epsilon_user_median": float(np.median(figures.user)) if figures.user.size else 0.0,
        "epsilon_budget_sentence": plan.budget.epsilon_sentence,
        "epsilon_amplified_clt_estimate": estimate.epsilon,
        "delta": config.delta,
        "sigma_train": plan.train.params().get("sigma"),
        "sigma_query": plan.query.params().get("sigma"),
        "mechanism": config.mechanism,
        "labels": config.labels,
        "users": config.users,
        "rounds": config.rounds,
        "releases": figures.releases,
        "seconds": seconds,
    }


def privacy_report(config: RunConfig, plan: PrivacyPlan, figures: LedgerFigures, result: dict[str, Any]) -> str:
    """privacy_report.md: unit, neighbouring relation, and every figure with its label."""
    estimate = amplified_estimate(config, plan)
    labels = (
        "public (declared by the run; not protected)"
        if config.label_epsilon is None
        else f"randomized response, epsilon {config.label_epsilon} per release, charged to the same ledger"
    )
    lines = [
        "# Privacy report",
        "",
        "Enforced: worst-case ledger (no amplification assumed).",
        "",
        "| what | value |",
        "|---|---|",
        "| unit | one record: a sentence (or sentence pair) with its label |",
        "| neighbouring relation | replace one record of one user; dataset sizes are public |",
        f"| delta | {config.delta:g} |",
        f"| randomizer | {plan.train.params()} (training), {plan.query.params()} (queries) |",
        f"| labels | {labels} |",
        f"| sentence-level epsilon, worst case (max over users) | {result['epsilon_sentence_max']:.4f} |",
        f"| sentence-level epsilon, worst case (median over users) | {result['epsilon_sentence_median']:.4f} |",
        f"| user-level epsilon, worst case (max over users) | {result['epsilon_user_max']:.4f} |",
        f"| user-level epsilon, worst case (median over users) | {result['epsilon_user_median']:.4f} |",
        f"| sentence-level budget per record | {plan.budget.epsilon_sentence:.4f} |",
        f"| releases | {figures.releases} |",
        "",
        "## Amplified figure (not enforced)",
        "",
        f"{estimate.name}: epsilon {estimate.epsilon:.4f} at delta {estimate.delta:g}, "
        f"parameters {estimate.parameters}.",
        "",
        f"This is an **estimate**, not a bound ({estimate.note}). It assumes {estimate.assumption}. "
        "Reports travel as individual vectors, so a server that knows a user's other records "
        "can often tell which report is the target's; then sampling does not shrink epsilon, "
        "and only the worst-case figure above holds.",
        "",
    ]
    return "\n".join(lines)
