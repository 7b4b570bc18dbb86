"""The schedule every accountant reads and the figure every accountant returns."""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.validators import check_delta, check_in_range, check_int, check_positive

Kind = Literal["enforced", "upper bound", "estimate", "lower bound"]

WORST_CASE = "none: the server may link every report to its record, so sampling does not amplify"
UNLINKABLE_POISSON = (
    "the server cannot link a report to its record: Poisson sampling of each record at rate q*p "
    "per step, add-or-remove-one neighbours with one unit = the replace-one diameter "
    "(dp_accounting's PoissonSampledDpEvent)"
)
UNLINKABLE_FIXED_SIZE = (
    "the server cannot link a report to its record: a fixed-size sample of m of the n records "
    "without replacement per step, replace-one neighbours (n public)"
)

SHORT_ASSUMPTION = {
    WORST_CASE: "linkable: no amplification",
    UNLINKABLE_POISSON: "unlinkable: Poisson sampling, add/remove",
    UNLINKABLE_FIXED_SIZE: "unlinkable: fixed-size sampling, replace-one",
}


def package_version(distribution: str) -> str:
    """'name version' of an installed distribution, or 'name (not installed)'."""
    try:
        return f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{distribution} (not installed)"


@dataclass(frozen=True)
class Schedule:
    """One record's schedule of Gaussian releases, as the amplified model sees it.

    Parameters
    ----------
    noise_multiplier:
        sigma / sensitivity, the sensitivity being the replace-one diameter (2C).
    p:
        Sampling rate per step (p_train, or p_query over the mixed query set).
    steps:
        Number of steps T.
    delta:
        The delta every figure is reported at.
    q:
        Inference true-data rate (seed 000 eq. 9); 1 for training. The per-record rate q*p
        assumes, as eq. 9 does, that p is measured against the true records (expected sample
        size / true records); if every item of the mixed set is sampled at p, a true record's
        rate is p and q amplifies nothing.
    releases:
        The number of times the record was actually released, when known (worst-case ledger).
    dataset_size:
        Number of records n, which enables fixed-size sampling figures (m = round(q*p*n)).
    labels:
        The label channel's event when every release of the record also releases its label
        once (k-ary randomized response); None when labels are public.
    """

    noise_multiplier: float
    p: float
    steps: int
    delta: float
    q: float = 1.0
    releases: int | None = None
    dataset_size: int | None = None
    labels: PrivacyEvent | None = None

    def __post_init__(self) -> None:
        check_positive("noise_multiplier", self.noise_multiplier)
        check_in_range("p", self.p, 0.0, 1.0, low_open=True)
        check_in_range("q", self.q, 0.0, 1.0, low_open=True)
        check_delta(self.delta)
        check_int("steps", self.steps, minimum=1)
        if self.releases is not None:
            check_int("releases", self.releases, minimum=0)
            if self.releases > self.steps:
                raise ValueError(f"releases ({self.releases}) cannot exceed steps ({self.steps})")
        if self.dataset_size is not None:
            check_int("dataset_size", self.dataset_size, minimum=1)

    @property
    def rate(self) -> float:
        """Probability that a given true record is released in one step: q * p (seed 000 eq. 9)."""
        return self.q * self.p

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON parameters, with the per-record rate and the label event's description."""
        labels = None if self.labels is None else self.labels.to_json()
        return {**asdict(self), "labels": labels, "rate": self.rate}


@dataclass(frozen=True)
class AccountantFigure:
    """One accountant's epsilon for a schedule, with what it is and what it assumes.

    ``key`` is a stable machine name; ``epsilon`` is None exactly when ``unavailable`` gives
    the reason. ``labels_excluded`` says why the figure leaves out the schedule's label
    releases (None: it includes them, or the labels are public).
    """

    key: str
    name: str
    version: str
    kind: Kind
    epsilon: float | None
    delta: float
    assumption: str
    parameters: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    unavailable: str | None = None
    labels_excluded: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form; infinite epsilon is written as the string 'inf'."""
        data = asdict(self)
        if data["epsilon"] is not None and math.isinf(data["epsilon"]):
            data["epsilon"] = "inf"
        return data


def reports_only(figure: AccountantFigure, schedule: Schedule, reason: str) -> AccountantFigure:
    """``figure`` marked as leaving out the schedule's label releases (unchanged for public labels)."""
    if schedule.labels is None:
        return figure
    return replace(
        figure,
        name=f"{figure.name} [reports only: labels EXCLUDED]",
        labels_excluded=reason,
        note=f"labels excluded ({reason}), so this under-states the cost of the releases; {figure.note}".rstrip("; "),
    )

