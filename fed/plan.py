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
  (:meth:`fed.sampling.UpSampling.planned_steps`).

Each calibration is checked by recomputing epsilon from the result with the same
accountant; both numbers are kept in :attr:`PrivacyPlan.calibrations` for the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any


from fed.config import RunConfig
from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent
from fed.privacy.ledger import Budget
from fed.randomizers import RANDOMIZERS, Randomizer
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.requests import ClientLimits
from fed.sampling import TrainSampling, UpSampling

if TYPE_CHECKING:
    from fed.policy import DevicePolicy


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


def encoder_spec(config: RunConfig) -> str:
    """The encoder whose output the run's records are: --encoder, or what the mechanism makes of it (snd: token
    matrices of the encoder its options name, the one its plan decodes with)."""
    cls = RANDOMIZERS[config.mechanism]
    options = cls.run_options(config.clip, config.dim, config.mechanism_option_values, config.encoder)
    return cls.encoder_spec(options.get("encoder", config.encoder), options)


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


def train_rate(config: RunConfig) -> float:
    """Planned per-round probability that a training record is released (fixed size: 1, no rate)."""
    sampling = config.train_sampling
    return sampling.p if sampling.kind == "poisson" else 1.0


def planned_train_releases(config: RunConfig) -> int:
    """k for worst-case training calibration: --releases-per-record, or the (1-delta)-quantile."""
    if config.releases_per_record:
        return config.releases_per_record
    from scipy.stats import binom  # SciPy is imported where a plan needs it, not by every device message

    return max(1, int(binom.ppf(1 - config.delta, config.rounds, train_rate(config))))


def schedule_warnings(config: RunConfig) -> list[str]:
    """What this run's schedule of training releases wastes, one sentence each (empty: nothing).

    Three settings make a run misleading: users that are never asked (--users-per-round x
    --rounds below --users), rounds with nothing left to release (under --enforce worst-case
    with --sampling all and no --records-per-user-round, an asked user releases every record
    it may, so each user's budget lasts k asks, k the planned releases per record), and noise
    calibrated for more releases of a record than the schedule makes (more than one per round,
    or more than a user is asked on average).
    """
    per_round = min(config.users_per_round or config.users, config.users)
    asked = config.rounds * per_round
    warnings = []
    if asked < config.users:
        warnings.append(
            f"at most {asked} of the {config.users} users take part (--users-per-round {config.users_per_round} x "
            f"--rounds {config.rounds}): the other users' records are never released. Use --users-per-round 0 "
            "(every user, every round) or more --rounds."
        )
    if config.enforce != "worst-case" or config.privacy_model == "central":  # the rest is about local releases
        return warnings
    k = planned_train_releases(config)
    whole = config.train_sampling.kind == "all" and not config.records_per_user_round  # an asked user releases all
    if whole and (k == 1 or per_round == config.users):
        busy = -(-config.users * k // per_round)  # every user asked k times: no budget left (exact in these cases)
        if busy < config.rounds:
            warnings.append(
                f"rounds {busy + 1} to {config.rounds} release nothing: an asked user releases all its records and "
                f"each record at most {k} time(s) (--releases-per-record), so every budget is spent after round "
                f"{busy}. Use --rounds {busy}, or --releases-per-record 0 to release every record in every round "
                "(noise calibrated for that many releases)."
            )
    if k > config.rounds:
        warnings.append(
            f"the noise is calibrated for {k} releases of each training record (--releases-per-record), but a "
            f"record is released at most once per round ({config.rounds} rounds): every report is noisier than the "
            f"run needs. Use --releases-per-record {config.rounds} or fewer."
        )
    elif k > 1 and asked < k * config.users:
        warnings.append(
            f"the noise is calibrated for {k} releases of each training record, but a user is asked "
            f"{asked / config.users:.2g} times on average (--users-per-round {config.users_per_round} of {config.users} "
            f"users x --rounds {config.rounds}): most records are released fewer times than the noise assumes. "
            "Lower --releases-per-record, or use --users-per-round 0."
        )
    return warnings


@lru_cache(maxsize=64)
def make_plan(config: RunConfig, num_labels: int, max_queries: int = 1) -> PrivacyPlan:
    """Calibrate (or take --sigma) and set the per-record and per-user budgets.

    ``max_queries`` is the largest number of query records one user holds (dataset sizes are
    public); it sets the planned number of inference steps under up-sampling. A user plans
    with its own users' largest count, which never asks for more noise than the server's plan.
    """
    labels: PublicLabels | RandomizedResponse = (
        PublicLabels(num_labels) if config.label_epsilon is None else RandomizedResponse(config.label_epsilon, num_labels)
    )
    cls = RANDOMIZERS[config.mechanism]
    user_epsilon = config.user_epsilon or float("inf")
    upsampling = config.upsampling
    train_steps = config.rounds
    query_steps = upsampling.planned_steps(max_queries)
    k_train = planned_train_releases(config)
    k_query = max(config.releases_per_query, config.answers)
    label_events: dict[PrivacyEvent, int] = {} if labels.event is None else {labels.event: k_train}
    rate_train, rate_query = train_rate(config), upsampling.p
    common = dict(
        enforce=config.enforce,
        train_sampling=config.train_sampling,
        upsampling=upsampling,
        train_steps=train_steps,
        query_steps=query_steps,
    )

    def figure(randomizer: Randomizer, kind: str) -> dict[str, Any]:
        event = randomizer.event
        sigma = getattr(event, "sigma", None)
        z = None if sigma is None else sigma / event.sensitivity
        if config.enforce == "amplified":
            from fed.privacy.accountants.enforced import pld_epsilon  # dp_accounting: only for amplified plans

            steps, rate = (train_steps, rate_train) if kind == "train" else (query_steps, rate_query)
            return {
                "accountant": "pld",
                "noise_multiplier": z,
                "sigma": sigma,
                "epsilon": pld_epsilon(((rate, z, steps),), config.delta),
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
            "epsilon": compose_epsilon({event: k, **extra}, config.delta),
            "steps": train_steps if kind == "train" else query_steps,
            "rate": rate_train if kind == "train" else rate_query,
            "releases": k,
        }

    options = cls.run_options(config.clip, config.dim, config.mechanism_option_values, config.encoder)
    if config.sigma > 0:
        train = query = cls.from_params({"mechanism": config.mechanism, **options, "sigma": config.sigma})
        calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
        epsilon = max(c["epsilon"] for c in calibrations.values())
        for c in calibrations.values():
            c["target_epsilon"] = None
        return PrivacyPlan(train, query, labels, Budget(epsilon, config.delta, user_epsilon), calibrations=calibrations, **common)
    fixed = cls.fixed_params(config.epsilon, options)
    if fixed is not None:
        # Published/fixed parameters: --epsilon is (at most) the claimed figure; the budget is
        # the TRUE cost of the planned releases, from the randomizer's own event.
        train = query = cls.from_params(fixed)
        calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
        for c in calibrations.values():
            c["target_epsilon"] = None
            c["claimed_epsilon"] = train.claimed_epsilon
        epsilon = max(c["epsilon"] for c in calibrations.values())
        budget = Budget(epsilon * (1 + 1e-9) if math.isfinite(epsilon) else epsilon, config.delta, user_epsilon)
        return PrivacyPlan(train, query, labels, budget, calibrations=calibrations, **common)
    if config.enforce == "amplified":
        sensitivity = cls.calibrated(1.0, config.delta, 1, options).event.sensitivity

        def amplified(steps: int, rate: float) -> Randomizer:
            from fed.privacy.accountants.calibration import calibrate_noise_multiplier  # dp_accounting: only here

            z = calibrate_noise_multiplier("pld", config.epsilon, config.delta, steps, rate).noise_multiplier
            return cls.from_params({"mechanism": config.mechanism, **options, "sigma": z * sensitivity})

        train = amplified(train_steps, rate_train)
        query = amplified(query_steps, rate_query)
    else:
        train = cls.calibrated(config.epsilon, config.delta, k_train, options, label_events)
        query = cls.calibrated(config.epsilon, config.delta, k_query, options)
    calibrations = {"train": figure(train, "train"), "query": figure(query, "query")}
    for c in calibrations.values():
        c["target_epsilon"] = config.epsilon
        if c["epsilon"] > config.epsilon * (1 + 1e-9):
            raise RuntimeError(f"calibration check failed: recomputed epsilon {c['epsilon']} > {config.epsilon}")
    # A calibration may land within 1e-9 (relative) above its target (e.g. the analytic Gaussian's
    # closed form against the exact GDP ledger): the budget must admit the plan's own releases.
    epsilon = max([config.epsilon, *(c["epsilon"] for c in calibrations.values())])
    budget = Budget(epsilon, config.delta, user_epsilon)
    return PrivacyPlan(train, query, labels, budget, calibrations=calibrations, **common)
