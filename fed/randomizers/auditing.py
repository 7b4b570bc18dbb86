"""Distinguishing audits: the worst neighbouring pair a randomizer's sensitivity allows, and the optimal test.

For a configuration, :func:`audit` draws ``samples`` releases on each of two neighbouring
inputs x0 and x1 chosen at the diameter of the randomizer's input domain, scores each
release by the log-likelihood ratio log p(y | x1) / p(y | x0) (the Neyman-Pearson optimal
test for that pair) and turns the test's false-positive and false-negative rates into an
epsilon lower bound with Clopper-Pearson intervals (:func:`fed.privacy.audit.lr_epsilon_lower_bound`).

Each randomizer and label channel states its own worst pair and score (``audit_scores``:
e.g. +-C e_1 for the clip-and-noise family, all-0 against all-1 bit vectors for sue, oue and
ome, one record mixed beside k-1 zero records for the mixups); a mechanism is audited here
without this module knowing its class.

:func:`build_for_audit` builds a registry mechanism exactly as a run does
(:meth:`~fed.randomizers.base.Randomizer.run_options` with the class's default options,
then fixed parameters or a calibration for one release), so the audit examines what runs.
Its claimed epsilon is the calibration target, or what fixed (published) parameters state
(``ome``: its published epsilon; ``texthide``: nothing, epsilon = inf).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fed.privacy.audit import AuditResult, lr_epsilon_lower_bound
from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent
from fed.randomizers import RANDOMIZERS
from fed.randomizers.audit_pairs import Scores
from fed.randomizers.clip_and_noise import ClipAndNoise
from fed.randomizers.exponential import ExponentialMechanism
from fed.randomizers.labels import RandomizedResponse

AUDIT_ENCODER = "minilm"
"""The encoder a class that names one (snd) is built with; the audit never loads it."""

LABEL_CHANNELS: dict[str, Callable[[float, int], RandomizedResponse | ExponentialMechanism]] = {
    "randomized-response": RandomizedResponse,
    "exponential": ExponentialMechanism,
}


def auditable() -> tuple[str, ...]:
    """Every mechanism the audit knows: the registered randomizers, in the registry's order, then the label channels."""
    return (*RANDOMIZERS, *LABEL_CHANNELS)


@dataclass
class AuditCase:
    """A configuration to audit: the randomizer (or label channel), what it claims, how to score releases."""

    mechanism: str
    claimed_epsilon: float
    randomizer: Any
    scores: Scores

    @property
    def event(self) -> PrivacyEvent:
        """What one release is charged: the randomizer's own event."""
        return self.randomizer.event


def case_for(randomizer: Any, dim: int, claimed_epsilon: float) -> AuditCase:
    """The worst pair and likelihood-ratio score of a randomizer (or label channel): its own ``audit_scores``."""
    return AuditCase(randomizer.name, float(claimed_epsilon), randomizer, randomizer.audit_scores(dim))


def audit(
    case: AuditCase, delta: float, samples: int, rng: np.random.Generator, confidence: float = 0.95
) -> AuditResult:
    """Run the distinguishing test of ``case`` with ``samples`` releases per input."""
    return judge(case, delta, *case.scores(samples, rng), confidence)


def judge(case: AuditCase, delta: float, null: np.ndarray, alt: np.ndarray, confidence: float = 0.95) -> AuditResult:
    """The test of ``case`` on the scores of releases of its first (``null``) and second (``alt``) input."""
    bound = lr_epsilon_lower_bound(null, alt, delta, confidence)
    accounted = accounted_epsilon(case.event, delta)
    return AuditResult(case.mechanism, case.claimed_epsilon, accounted, delta, bound, len(null), confidence)


def calibrates(mechanism: str, epsilon: float) -> bool:
    """Whether ``mechanism`` can be built for a claim of ``epsilon`` (its class's
    :meth:`~fed.randomizers.base.Randomizer.calibrates`; a label channel: always)."""
    return mechanism in LABEL_CHANNELS or RANDOMIZERS[mechanism].calibrates(epsilon)


def dimension_free(mechanism: str) -> bool:
    """Whether the audit of ``mechanism`` is the same test at every dimension of at least 2: a label
    channel (no dimension), or a class that says so (:attr:`~fed.randomizers.base.Randomizer.audit_dimension_free`)."""
    return mechanism in LABEL_CHANNELS or RANDOMIZERS[mechanism].audit_dimension_free


def accounted_epsilon(event: PrivacyEvent, delta: float) -> float:
    """What one run of ``event`` costs in the ledger at ``delta``.

    Events too large for a PLD (``basic_epsilon`` set) are shown with their exact pure
    epsilon rather than the PLD's pessimistic infinity.
    """
    basic = getattr(event, "basic_epsilon", None)
    return float(basic) if basic is not None else compose_epsilon({event: 1}, delta)


def build_for_audit(
    mechanism: str,
    epsilon: float,
    delta: float,
    dim: int,
    options: Mapping[str, Any] | None = None,
    noise_factor: float = 1.0,
) -> AuditCase:
    """The configuration the audit command examines, built as a run with these settings builds it.

    ``options`` holds ``clip`` (default 1) and what a run's ``--mechanism-options`` would;
    the class's :meth:`~fed.randomizers.base.Randomizer.run_options` add its defaults and
    ``dim``. Calibrated mechanisms are calibrated to (epsilon, delta) for one release and
    claim epsilon; fixed ones (:meth:`~fed.randomizers.base.Randomizer.fixed_params`) claim
    what their parameters state, else what their event costs. Invalid mechanisms
    (``laplace-seed002``) are built with ``allow_invalid``: the audit exists to expose them.
    Label channels (``randomized-response``, ``exponential``) take ``labels`` (default 2).

    ``noise_factor`` builds a mutant for checking the audit's power: the noise scale of a
    clip-and-noise mechanism multiplied by it, the claim kept (below 1 the claim is false).
    """
    opts = dict(options or {})
    if mechanism not in auditable():
        raise ValueError(f"unknown mechanism {mechanism!r}; auditable: {', '.join(auditable())}")
    if noise_factor != 1.0 and not issubclass(RANDOMIZERS.get(mechanism, object), ClipAndNoise):
        raise ValueError(f"noise factor: {mechanism} has no clip-and-noise scale to multiply")
    if mechanism in LABEL_CHANNELS:
        return case_for(LABEL_CHANNELS[mechanism](epsilon, int(opts.get("labels", 2))), dim, epsilon)
    cls = RANDOMIZERS[mechanism]
    clip = float(opts.pop("clip", 1.0))
    if cls.invalid:
        opts["allow_invalid"] = True
    # ``dim`` is the input width; a class that takes no dim option (snd: a token's width) gets none
    run_options = cls.run_options(clip, dim if "dim" in cls.required_options else 0, opts, AUDIT_ENCODER)
    fixed = cls.fixed_params(epsilon, run_options)
    if fixed is None:
        randomizer, claimed = cls.calibrated(epsilon, delta, 1, run_options), epsilon
    else:
        randomizer = cls.from_params(fixed)
        claimed = randomizer.claimed_epsilon
        claimed = accounted_epsilon(randomizer.event, delta) if claimed is None else claimed
    if noise_factor != 1.0:
        params = randomizer.params()
        params[cls.noise_key] *= noise_factor
        randomizer = cls.from_params(params)
    return case_for(randomizer, dim, claimed)
