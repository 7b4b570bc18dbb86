"""Privacy events: what one run of a randomizer on one record costs.

A randomizer states its event; the ledger is fed only from that statement. Events are
small, frozen and hashable so that a ledger can count them, and serialise to plain JSON so
that anyone can recompute a ledger's figures.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld


def check_positive(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


@dataclass(frozen=True)
class PrivacyEvent:
    """Base class of every event; subclasses set ``mechanism``."""

    mechanism: ClassVar[str] = ""

    def to_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        """Privacy loss distribution of one run under replace-one neighbours."""
        raise NotImplementedError

    def to_dp_event(self) -> dp_accounting.DpEvent:
        """The matching dp_accounting event under ADD_OR_REMOVE_ONE neighbours.

        dp_accounting measures noise against a one-unit change under add-or-remove; our
        sensitivity is already the replace-one diameter, so that unit is the diameter.
        """
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON description: mechanism and parameters."""
        return {"mechanism": self.mechanism, **asdict(self)}


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """Gaussian noise N(0, sigma^2 I) on an input of L2 diameter ``sensitivity``."""

    sensitivity: float
    sigma: float
    mechanism: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        check_positive("sensitivity", self.sensitivity)
        check_positive("sigma", self.sigma)

    @property
    def mu(self) -> float:
        """Gaussian-DP parameter of one run (Dong et al. 2021)."""
        return self.sensitivity / self.sigma

    def to_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        return pld.from_gaussian_mechanism(
            standard_deviation=self.sigma,
            sensitivity=self.sensitivity,
            value_discretization_interval=value_discretization_interval,
        )

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(noise_multiplier=self.sigma / self.sensitivity)


@dataclass(frozen=True)
class RandomizedResponseEvent(PrivacyEvent):
    """k-ary randomized response: keep the true value with prob. e^eps / (e^eps + k - 1)."""

    epsilon: float
    num_values: int
    mechanism: ClassVar[str] = "randomized_response"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        if int(self.num_values) != self.num_values or self.num_values < 2:
            raise ValueError(f"num_values must be an integer >= 2, got {self.num_values!r}")

    @property
    def noise_parameter(self) -> float:
        """Probability of answering uniformly at random (dp_accounting's convention)."""
        k = self.num_values
        return k / (math.exp(self.epsilon) + k - 1)

    def to_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        return pld.from_randomized_response(
            noise_parameter=self.noise_parameter,
            num_buckets=self.num_values,
            value_discretization_interval=value_discretization_interval,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.RandomizedResponseDpEvent(
            noise_parameter=self.noise_parameter, num_buckets=self.num_values
        )


EVENT_TYPES: dict[str, type[PrivacyEvent]] = {
    cls.mechanism: cls for cls in (GaussianEvent, RandomizedResponseEvent)
}


def register_event(cls: type[PrivacyEvent]) -> type[PrivacyEvent]:
    """Make an event type known to :func:`event_from_json` (usable as a decorator)."""
    EVENT_TYPES[cls.mechanism] = cls
    return cls


def event_from_json(data: dict[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`PrivacyEvent.to_json` output."""
    fields = dict(data)
    mechanism = fields.pop("mechanism", None)
    if mechanism not in EVENT_TYPES:
        raise ValueError(f"unknown privacy mechanism {mechanism!r}; known: {sorted(EVENT_TYPES)}")
    return EVENT_TYPES[mechanism](**fields)
