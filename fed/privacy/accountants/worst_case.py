"""The worst-case ledger's figure for a schedule: no amplification, k releases of the record.

A record released k times costs ``compose_epsilon({event: k}, delta)``, exact GDP for the
Gaussian; with randomized-response labels each release also releases the label once, so
the record costs ``compose_epsilon({event: k, label event: k}, delta)`` (a PLD, as the
ledger composes it). Which k is reported is stated in each figure:

- ``releases``: the count the record actually had, when the schedule knows it;
- the (1 - delta)-quantile of Binomial(T, q*p): a record's release count exceeds it with
  probability at most delta (a prediction of what the ledger will charge, not a bound on
  every record: records past it are refused by the ledger, never under-charged);
- T: a record released at every step, the schedule's all-T worst case.

Only the actual count's figure is what the ledger enforces; the quantile's is an estimate and T's
an upper bound (the names the run's privacy report gives them).
"""

from __future__ import annotations


from ldpfed.fed.privacy.accountants.base import WORST_CASE, AccountantFigure, Kind, Schedule
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent

NAME = "worst-case ledger"
VERSION = "ldpfed fed.privacy.composition (exact GDP; pessimistic PLD with labels)"


def quantile_releases(schedule: Schedule) -> int:
    """The (1 - delta)-quantile of a record's release count, Binomial(T, q*p)."""
    from scipy.stats import binom  # imported where needed: device messages do not

    return int(binom.ppf(1 - schedule.delta, schedule.steps, schedule.rate))


def epsilon_for_releases(
    noise_multiplier: float, releases: int, delta: float, labels: PrivacyEvent | None = None
) -> float:
    """Worst-case epsilon of ``releases`` Gaussian releases (sensitivity 1, sigma = noise multiplier).

    With ``labels``, each release also runs the label event once.
    """
    counts: dict[PrivacyEvent, int] = {GaussianEvent(1.0, noise_multiplier): releases}
    if labels is not None:
        counts[labels] = releases
    return compose_epsilon(counts, delta)


def figures(schedule: Schedule) -> list[AccountantFigure]:
    """The ledger's figure at each reported k (actual count if known, the quantile, and T)."""
    choices: list[tuple[str, str, int, Kind, str]] = []
    if schedule.releases is not None:
        choices.append(
            (
                "worst_case_actual", "k = actual", schedule.releases, "enforced",
                "k = the record's actual number of releases",
            )
        )
    choices.append(
        (
            "worst_case_quantile",
            "k = (1-delta)-quantile",
            quantile_releases(schedule),
            "estimate",
            "k = the (1 - delta)-quantile of Binomial(T, q*p): a record is released more often "
            "with probability at most delta",
        )
    )
    choices.append(
        ("worst_case_all_steps", "k = T", schedule.steps, "upper bound", "k = T: the record released at every step")
    )
    labelled = "" if schedule.labels is None else "; each release also releases the record's label (included)"
    return [
        AccountantFigure(
            key=key,
            name=f"{NAME}, {label}",
            version=VERSION,
            kind=kind,
            delta=schedule.delta,
            assumption=WORST_CASE,
            parameters={
                "noise_multiplier": schedule.noise_multiplier,
                "releases": k,
                **({} if schedule.labels is None else {"label_releases": k}),
            },
            epsilon=epsilon_for_releases(schedule.noise_multiplier, k, schedule.delta, schedule.labels),
            note=meaning + labelled,
        )
        for key, label, k, kind, meaning in choices
    ]
