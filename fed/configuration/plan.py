"""A run's privacy plan: the calibrated randomizers, the label channel and each user's budget.

Server and users derive it from the same run options: the server to know what to ask
for, each user to set its own budget and noise floor (it refuses anything noisier-less).

Calibration (seed 000 Algs. 2 and 3) is solved against the accountant the run enforces:

- ``--enforce worst-case``: a training record is planned to be released k times
  (``--releases-per-record``; 0: the (1 - delta)-quantile of Binomial(rounds, sampling
  rate)); a query record ``max(--releases-per-query, --answers)`` times. Exact GDP.
- ``--enforce amplified``: the PLD bound of T Poisson-sampled steps, T = ``--rounds`` for
  training (a user may be asked every round) and, for inference, the steps after which
  every true query of the largest user has k answers with probability 0.99
  (:meth:`fed.privacy.sampling.UpSampling.planned_steps`).

Each calibration is checked by recomputing epsilon from the result with the same
accountant; both numbers are kept in :attr:`PrivacyPlan.calibrations` for the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any


from ldpfed.fed.configuration.sections import EncodingSections, EvaluationSpec, EncoderSpec, PlanSections, PrivacySpec, ScheduleSpec
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.randomizers import RANDOMIZERS, Randomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.runtime.requests import ClientLimits
from ldpfed.fed.privacy.sampling import TrainSampling, UpSampling

if TYPE_CHECKING:
    from ldpfed.fed.device.policy import DevicePolicy


@dataclass(frozen=True)
class PrivacyPlan:
    """Randomizers for training and query releases, label channel, budget and sampling."""

    train: Randomizer
    query: Randomizer
    labels: PublicLabels | RandomizedResponse
    budget: Budget
    enforce: str = "worst-case"
    train_sampling: TrainSampling = TrainSampling("all")
    upsampling: UpSampling = UpSampling()
    train_steps: int = 1
    query_steps: int = 1
    calibrations: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)

    def limits(self, kind: str) -> ClientLimits:
        """The user's floor for one kind of release: no run may cost more than planned."""
        randomizer = self.train if kind == "train" else self.query
        sampling = self.train_sampling.spec if kind == "train" else self.upsampling.spec
        epsilon = compose_epsilon({randomizer.event: 1}, self.budget.delta)
        return ClientLimits(epsilon, self.budget.delta, sampling=sampling, pinned=self.pinned(kind))

    def pinned(self, kind: str) -> tuple[tuple[str, Any], ...]:
        """The randomizer parameters a request of ``kind`` must give exactly as this plan does."""
        randomizer = self.train if kind == "train" else self.query
        params = randomizer.params()
        return tuple((key, params[key]) for key in sorted(randomizer.pinned))

    def sampling_spec(self, kind: str) -> str:
        """The sampling spec of ``kind`` releases (as requests and ledgers carry it)."""
        return self.train_sampling.spec if kind == "train" else self.upsampling.spec


def encoder_spec(config: EncodingSections) -> str:
    """The encoder whose output the run's records are: --encoder, or what the mechanism makes of it (snd: token
    matrices of the encoder its options name, the one its plan decodes with)."""
    cls = RANDOMIZERS[config.privacy.mechanism]
    options = cls.run_options(config.privacy.clip, config.encoder.dim, config.privacy.mechanism_option_values, config.encoder.encoder)
    return cls.encoder_spec(options.get("encoder", config.encoder.encoder), options)


def plan_refusal(plan: PrivacyPlan, bundle_spec: str, policy: DevicePolicy) -> str | None:
    """Why a node must not serve ``plan`` on a bundle whose encoder is ``bundle_spec`` (None: it may).

    A randomizer with :attr:`~fed.randomizers.base.Randomizer.pinned` parameters loads what they
    name (snd: the encoder whose upper layers decode its reports). That must be the bundle's encoder,
    which the policy must allow; checked before anything is built from the plan, so a node loads and
    opens nothing else the run names. The reason names the options, never what the node holds.
    """
    refused = policy.encoder_refusal(bundle_spec)
    if refused:
        return refused
    for kind, randomizer in (("train", plan.train), ("query", plan.query)):
        params = randomizer.params()
        if randomizer.pinned and type(randomizer).encoder_spec(params.get("encoder", ""), params) != bundle_spec:
            names = ", ".join(repr(name) for name in sorted(randomizer.pinned))
            return (
                f"--mechanism-options {names} make {params['mechanism']} {kind} releases read another encoder than "
                f"the bundle's {bundle_spec[:100]!r}; this node loads no other"
            )
    return None


def train_rate(config: PlanSections) -> float:
    """Planned per-round probability that a training record is released (fixed size: 1, no rate)."""
    sampling = config.schedule.train_sampling
    return sampling.p if sampling.kind == "poisson" else 1.0


def planned_train_releases(config: PlanSections) -> int:
    """k for worst-case training calibration: --releases-per-record, or the (1-delta)-quantile."""
    if config.schedule.releases_per_record:
        return config.schedule.releases_per_record
    from scipy.stats import binom  # SciPy is imported where a plan needs it, not by every device message

    return max(1, int(binom.ppf(1 - config.privacy.delta, config.schedule.rounds, train_rate(config))))


@dataclass(frozen=True)
class _Sections:
    """The sections a plan reads, alone: what :func:`make_plan` caches its plans by."""

    privacy: PrivacySpec
    encoder: EncoderSpec
    schedule: ScheduleSpec
    evaluation: EvaluationSpec


def make_plan(config: PlanSections, num_labels: int, max_queries: int = 1) -> PrivacyPlan:
    """Calibrate (or take --sigma) and set the per-record and per-user budgets.

    Reads the run's privacy, encoder, schedule and evaluation sections only (a RunSpec, or any object with them).
    ``max_queries`` is the largest number of query records one user holds (dataset sizes are
    public); it sets the planned number of inference steps under up-sampling. A user plans
    with its own users' largest count, which never asks for more noise than the server's plan.
    """
    return _make_plan(_Sections(config.privacy, config.encoder, config.schedule, config.evaluation), num_labels, max_queries)


@lru_cache(maxsize=64)
def _make_plan(config: _Sections, num_labels: int, max_queries: int) -> PrivacyPlan:
    """:func:`make_plan`, once per plan's sections, label count and query count."""
    labels: PublicLabels | RandomizedResponse = (
        PublicLabels(num_labels) if config.privacy.label_epsilon is None else RandomizedResponse(config.privacy.label_epsilon, num_labels)
    )
    cls = RANDOMIZERS[config.privacy.mechanism]
    user_epsilon = config.privacy.user_epsilon or float("inf")
    upsampling = config.evaluation.upsampling
    train_steps = config.schedule.rounds
    query_steps = upsampling.planned_steps(max_queries)
    k_train = planned_train_releases(config)
    k_query = max(config.schedule.releases_per_query, config.evaluation.answers)
    label_events: dict[PrivacyEvent, int] = {} if labels.event is None else {labels.event: k_train}
    rate_train, rate_query = train_rate(config), upsampling.p
    common = dict(
        enforce=config.privacy.enforce,
        train_sampling=config.schedule.train_sampling,
        upsampling=upsampling,
        train_steps=train_steps,
        query_steps=query_steps,
    )

    def figure(randomizer: Randomizer, kind: str) -> dict[str, Any]:
        event = randomizer.event
        sigma = getattr(event, "sigma", None)
        z = None if sigma is None else sigma / event.sensitivity
        if config.privacy.enforce == "amplified":
            from ldpfed.fed.privacy.accountants.enforced import pld_epsilon  # dp_accounting: only for amplified plans

            steps, rate = (train_steps, rate_train) if kind == "train" else (query_steps, rate_query)
            return {
                "accountant": "pld",
                "noise_multiplier": z,
                "sigma": sigma,
                "epsilon": pld_epsilon(((rate, z, steps),), config.privacy.delta),
                "steps": steps,
                "rate": rate,
                "releases": None,
            }
        k = k_train if kind == "train" else k_query
        extra = label_events if kind == "train" else {}
        return {
            "accountant": "worst-case",
            "noise_multiplier": z,
            "sigma": sigma,
            "epsilon": compose_epsilon({event: k, **extra}, config.privacy.delta),
            "steps": train_steps if kind == "train" else query_steps,
            "rate": rate_train if kind == "train" else rate_query,
            "releases": k,
        }

    options = cls.run_options(config.privacy.clip, config.encoder.dim, config.privacy.mechanism_option_values, config.encoder.encoder)
    if config.privacy.sigma > 0:
        train = query = cls.from_params({"mechanism": config.privacy.mechanism, **options, "sigma": config.privacy.sigma})
        calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
        epsilon = max(c["epsilon"] for c in calibrations.values())
        for c in calibrations.values():
            c["target_epsilon"] = None
        return PrivacyPlan(train, query, labels, Budget(epsilon, config.privacy.delta, user_epsilon), calibrations=calibrations, **common)
    fixed = cls.fixed_params(config.privacy.epsilon, options)
    if fixed is not None:
        # Published/fixed parameters: --epsilon is (at most) the claimed figure; the budget is
        # the TRUE cost of the planned releases, from the randomizer's own event.
        train = query = cls.from_params(fixed)
        calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
        for c in calibrations.values():
            c["target_epsilon"] = None
            c["claimed_epsilon"] = train.claimed_epsilon
        epsilon = max(c["epsilon"] for c in calibrations.values())
        budget = Budget(epsilon * (1 + 1e-9) if math.isfinite(epsilon) else epsilon, config.privacy.delta, user_epsilon)
        return PrivacyPlan(train, query, labels, budget, calibrations=calibrations, **common)
    if config.privacy.enforce == "amplified":
        sensitivity = cls.calibrated(1.0, config.privacy.delta, 1, options).event.sensitivity

        def amplified(steps: int, rate: float) -> Randomizer:
            from ldpfed.fed.privacy.accountants.calibration import calibrate_noise_multiplier  # dp_accounting: only here

            z = calibrate_noise_multiplier("pld", config.privacy.epsilon, config.privacy.delta, steps, rate).noise_multiplier
            return cls.from_params({"mechanism": config.privacy.mechanism, **options, "sigma": z * sensitivity})

        train = amplified(train_steps, rate_train)
        query = amplified(query_steps, rate_query)
    else:
        train = cls.calibrated(config.privacy.epsilon, config.privacy.delta, k_train, options, label_events)
        query = cls.calibrated(config.privacy.epsilon, config.privacy.delta, k_query, options)
    calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
    for c in calibrations.values():
        c["target_epsilon"] = config.privacy.epsilon
        if c["epsilon"] > config.privacy.epsilon * (1 + 1e-9):
            raise RuntimeError(f"calibration check failed: recomputed epsilon {c['epsilon']} > {config.privacy.epsilon}")
    # A calibration may land within 1e-9 (relative) above its target (e.g. the analytic Gaussian's
    # closed form against the exact GDP ledger): the budget must admit the plan's own releases.
    epsilon = max([config.privacy.epsilon, *(c["epsilon"] for c in calibrations.values())])
    budget = Budget(epsilon, config.privacy.delta, user_epsilon)
    return PrivacyPlan(train, query, labels, budget, calibrations=calibrations, **common)
