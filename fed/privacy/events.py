"""Privacy events: what one run of a randomizer on one record costs.

A randomizer states its event; the ledger is fed only from that statement. Events are
small, frozen and hashable so that a ledger can count them, and serialise to plain JSON so
that anyone can recompute a ledger's figures.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ldpfed.fed.privacy.validators import check_int, check_positive

if TYPE_CHECKING:
    import dp_accounting
    from dp_accounting.pld import privacy_loss_distribution as pld


class _OnUse:
    """A module imported on first use: dp_accounting (with SciPy) costs a device message ~1 s and
    tens of MiB, and closed-form ledgers (GDP, pure DP) never use it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attribute)


if not TYPE_CHECKING:
    dp_accounting = _OnUse("dp_accounting")
    pld = _OnUse("dp_accounting.pld.privacy_loss_distribution")

PLD_SMALLEST_LOSS = 1e-100
"""Smallest mu (Gaussian) or epsilon (Laplace) a PLD is built at; a smaller one is stated as this
(an over-statement, so a valid bound; no real release is this noisy, but a request may ask for it)."""


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
        # The loss depends on sensitivity / sigma alone; from mu, floored at PLD_SMALLEST_LOSS, so
        # that sigma 1e308 (whose square overflows) composes: a larger mu only over-states the loss.
        return pld.from_gaussian_mechanism(
            standard_deviation=1 / max(self.mu, PLD_SMALLEST_LOSS),
            sensitivity=1.0,
            value_discretization_interval=value_discretization_interval,
        )

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(noise_multiplier=self.sigma / self.sensitivity)


@dataclass(frozen=True)
class RandomizedResponseEvent(PrivacyEvent):
    """k-ary randomized response: keep the true value with prob. e^eps / (e^eps + k - 1)."""

    epsilon: float
    """Its pure epsilon (eps above)."""
    num_values: int
    """How many values it answers among (k above)."""
    mechanism: ClassVar[str] = "randomized_response"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_int("num_values", self.num_values, 2)

    @property
    def noise_parameter(self) -> float:
        """Probability of answering uniformly at random (dp_accounting's convention)."""
        k = self.num_values
        return k / (math.exp(min(self.epsilon, 709.0)) + k - 1)

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


# --------------------------------------------------------------------------------------
# Events of the further randomizers (Laplace, metric DP, bit flipping, exponential
# mechanism, instance encoding without DP). Each carries its replace-one figure.
# --------------------------------------------------------------------------------------

PURE_PLD_CAP = 64.0
"""Largest pure epsilon an event turns into a discretized PLD.

A pure-epsilon PLD spans [-epsilon, epsilon] at the accountant's grid (1e-4), so one far
above this would need gigabytes once composed with a dense PLD. Above it an event's
``to_pld`` is the pessimistic "no privacy" PLD (epsilon = inf), and its ``basic_epsilon``
gives the exact pure figure for basic composition (see ``basic_epsilon`` below).
"""


def _rounded_pure_pld(epsilon: float, interval: float) -> pld.PrivacyLossDistribution:
    """Dominating PLD of any pure epsilon-DP mechanism (binary randomized response).

    Written out rather than via ``from_privacy_parameters``, which overflows for epsilon > 709.
    """
    low = math.exp(-epsilon) / (1.0 + math.exp(-epsilon))
    pmf = {math.ceil(epsilon / interval): 1.0 - low}
    pmf[math.ceil(-epsilon / interval)] = pmf.get(math.ceil(-epsilon / interval), 0.0) + low
    return pld.PrivacyLossDistribution.create_from_rounded_probability(pmf, 0.0, interval)


def infinite_pld(interval: float) -> pld.PrivacyLossDistribution:
    """A PLD whose epsilon is infinite at every delta < 1/2 (half its mass at +infinity).

    dp_accounting cannot hold a PLD with all its mass at infinity (composition fails on
    the empty finite part), so half the mass stays at loss 0. Self-composing it more than
    about 50 times truncates that part away and fails: composition must short-circuit on
    ``basic_epsilon`` instead (see ``NoPrivacyEvent``).
    """
    return pld.PrivacyLossDistribution.create_from_rounded_probability({0: 0.5}, 0.5, interval)


def _pure_dp_event(epsilon: float) -> dp_accounting.DpEvent:
    """Binary randomized response with keep-odds e^epsilon: the worst pure epsilon-DP pair."""
    return dp_accounting.RandomizedResponseDpEvent(
        noise_parameter=2.0 / (math.exp(min(epsilon, 700.0)) + 1.0), num_buckets=2
    )


class PureEvent(PrivacyEvent):
    """A pure epsilon-DP event; subclasses give ``epsilon`` (a field or a property).

    Past ``PURE_PLD_CAP`` its PLD would need gigabytes, so it is the pessimistic "no
    privacy" PLD and ``basic_epsilon`` carries the exact pure figure for composition.
    """

    @property
    def basic_epsilon(self) -> float | None:
        """Pure epsilon when too large for a PLD (composition then adds it), else None."""
        return self.epsilon if self.epsilon > PURE_PLD_CAP else None

    def to_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        if self.basic_epsilon is not None:
            return infinite_pld(value_discretization_interval)
        return self._finite_pld(value_discretization_interval)

    def _finite_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        return _rounded_pure_pld(self.epsilon, value_discretization_interval)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return _pure_dp_event(self.epsilon)


@register_event
@dataclass(frozen=True)
class LaplaceEvent(PureEvent):
    """I.i.d. Laplace(scale) noise per coordinate on an input of L1 diameter ``sensitivity``.

    Exact for replace-one when the L1 diameter is attained along one coordinate (an L1
    ball); for any other domain it is an upper bound whose pure epsilon is exact, because
    a one-dimensional shift by the whole L1 distance dominates every split of it.
    """

    sensitivity: float
    scale: float
    mechanism: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        check_positive("sensitivity", self.sensitivity)
        check_positive("scale", self.scale)

    @property
    def epsilon(self) -> float:
        """Pure epsilon of one run: L1 diameter / scale."""
        return self.sensitivity / self.scale

    def _finite_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        # As GaussianEvent.to_pld: from epsilon alone, floored (a sensitivity of 1e-323 breaks the PLD).
        return pld.from_laplace_mechanism(
            parameter=1 / max(self.epsilon, PLD_SMALLEST_LOSS),
            sensitivity=1.0,
            value_discretization_interval=value_discretization_interval,
        )

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(noise_multiplier=self.scale / self.sensitivity)


@register_event
@dataclass(frozen=True)
class PureEpsilonEvent(PureEvent):
    """Any pure epsilon-DP run, accounted by its dominating pair (binary randomized response)."""

    epsilon: float
    mechanism: ClassVar[str] = "pure_epsilon"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)



@register_event
@dataclass(frozen=True)
class MetricDPEvent(PureEvent):
    """eta * d_chi privacy (seed 003) on ``tokens`` vectors of a domain of L2 diameter ``diameter``.

    Each token's run is pure (eta * diameter)-DP over the bounded domain actually used;
    one release of a record runs it on all ``tokens`` of its vectors (the sentence is
    padded or cut to that length), so the event is their composition.
    """

    eta: float
    diameter: float
    tokens: int = 1
    mechanism: ClassVar[str] = "metric_dp"

    def __post_init__(self) -> None:
        check_positive("eta", self.eta)
        check_positive("diameter", self.diameter)
        check_int("tokens", self.tokens)

    @property
    def epsilon_per_token(self) -> float:
        """Worst-case pure epsilon of one token: eta times the domain's diameter."""
        return self.eta * self.diameter

    @property
    def epsilon(self) -> float:
        """Pure epsilon of one run on all tokens (basic composition over tokens)."""
        return self.tokens * self.epsilon_per_token

    def _finite_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        one = _rounded_pure_pld(self.epsilon_per_token, value_discretization_interval)
        return one.self_compose(self.tokens) if self.tokens > 1 else one

    def to_dp_event(self) -> dp_accounting.DpEvent:
        one = _pure_dp_event(self.epsilon_per_token)
        return one if self.tokens == 1 else dp_accounting.SelfComposedDpEvent(one, self.tokens)


@register_event
@dataclass(frozen=True)
class CoordinateMetricDPEvent(MetricDPEvent):
    """Seed 003's per-coordinate sampler (its authors' code) on ``tokens`` vectors of a domain of L1
    diameter ``diameter``.

    Per coordinate Gamma(d, rate eta) times U(-1, 1): each vector's run is pure
    eta * ||x - x'||_1-private (fed.encoders.word_split), so eta * diameter per token with the
    L1 diameter; composed over the tokens like :class:`MetricDPEvent`.
    """

    mechanism: ClassVar[str] = "metric_dp_l1"


@register_event
@dataclass(frozen=True)
class BitFlipEvent(PureEvent):
    """A bit-flip randomizer on ``bits`` bits (SUE, OUE, OME; seed 004).

    ``epsilon`` is the true pure epsilon: per bit the largest |log ratio| of output
    probabilities over both input bit values, summed over the bits (all of them can differ
    between two inputs). ``claimed_epsilon`` is what the protocol's paper states; it is
    carried for reports only and never used for accounting.
    """

    protocol: str
    epsilon: float
    claimed_epsilon: float
    bits: int
    mechanism: ClassVar[str] = "bit_flip"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_positive("claimed_epsilon", self.claimed_epsilon)
        check_int("bits", self.bits)



@register_event
@dataclass(frozen=True)
class NoPrivacyEvent(PrivacyEvent):
    """A release with no differential-privacy guarantee (e.g. plain TextHide): epsilon = inf."""

    scheme: str
    mechanism: ClassVar[str] = "no_dp"

    @property
    def basic_epsilon(self) -> float:
        return math.inf

    def to_pld(self, value_discretization_interval: float) -> pld.PrivacyLossDistribution:
        return infinite_pld(value_discretization_interval)

    def to_dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.NonPrivateDpEvent()
