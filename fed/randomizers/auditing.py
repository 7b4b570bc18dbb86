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

The score's direction is the one convention every ``audit_scores`` must keep (:data:`CONVENTION`):
a larger score means "released from the pair's second input". A reversed score would make the
test prove nothing (a claim of 3 whose true cost is 24 once audited at 0.000, "pass"), so the audit
checks it twice and refuses with :class:`AuditScoreError`: :func:`judge` on the audit's own draws
(the second input's releases must not score significantly lower than the first's, which a true
likelihood ratio never does), and :func:`check_direction` on a copy of the mechanism at a large
epsilon, where any sound score must separate the pair (a score that does not, such as a constant,
would pass every claim). The pair itself is the mechanism's own statement of its worst case: the
audit trusts it (a plugin's pair included) and cannot tell whether a worse pair exists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfed.fed.privacy.audit import AuditResult, lr_epsilon_lower_bound
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.randomizers.audit_pairs import Scores
from ldpfed.fed.randomizers.clip_and_noise import ClipAndNoise
from ldpfed.fed.randomizers.exponential import ExponentialMechanism
from ldpfed.fed.randomizers.labels import RandomizedResponse

CONVENTION = (
    "an audit score's convention (docs/plugins.md): audit_scores(dim) returns a function (n, rng) -> (scores of n "
    "releases on the pair's first input x0, scores of n releases on its second input x1), a larger score meaning "
    "'released from x1', as the log-likelihood ratio log p(y | x1) / p(y | x0) does"
)
"""What :class:`AuditScoreError` tells a plugin author."""
DIRECTION_Z = 5.0
"""Standard errors (of the rank statistic, :func:`separation`) by which the releases of x1 must score higher than
those of x0 at :data:`PROBE_EPSILON`, and below which the audit's own draws must not fall. Measured with
:data:`PROBE_SAMPLES` on every built-in mechanism at dims 2, 8 and 384: the least separated gave 17.4 (snd at 384)."""
PROBE_EPSILON = 100.0
"""The large epsilon at which :func:`check_direction` builds a mechanism: any sound score separates its pair there."""
PROBE_SAMPLES = 1000
"""Releases per input that :func:`check_direction` draws (about a second at dim 384 for the slowest mechanism)."""


class AuditScoreError(ValueError):
    """A mechanism's audit score does not point the way the audit reads it (:data:`CONVENTION`)."""


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
    calibrated: bool = True
    """Built for the claimed epsilon (False: fixed, published parameters that state their own claim)."""

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
    """The test of ``case`` on the scores of releases of its first (``null``) and second (``alt``) input.

    Raises :class:`AuditScoreError` when the second input's releases score significantly lower than the first's
    (:data:`DIRECTION_Z` standard errors): the score points the wrong way, and the test would prove nothing.
    """
    z, share = separation(null, alt)
    if z <= -DIRECTION_Z:
        raise AuditScoreError(
            f"the audit score of {case.mechanism} points the wrong way: releases of its pair's second input x1 score "
            f"higher than releases of its first x0 in only {share:.1%} of pairs (z = {z:.1f}), so the test would prove "
            f"nothing whatever the leakage. Fix audit_scores: {CONVENTION}"
        )
    bound = lr_epsilon_lower_bound(null, alt, delta, confidence)
    accounted = accounted_epsilon(case.event, delta)
    return AuditResult(case.mechanism, case.claimed_epsilon, accounted, delta, bound, len(null), confidence)


def separation(null: np.ndarray, alt: np.ndarray) -> tuple[float, float]:
    """How far releases of x1 (``alt``) score above releases of x0 (``null``): the z-score of the Mann-Whitney
    statistic (0 when the score tells nothing) and the share of (x0, x1) release pairs where x1's scores higher
    (ties count half). Ranks, so infinite scores and any scale are fine. For a likelihood ratio x1's scores are
    stochastically larger (its distribution is the tilt of x0's by the ratio), so the share is at least 1/2."""
    from scipy.stats import rankdata

    null, alt = np.asarray(null, dtype=np.float64).ravel(), np.asarray(alt, dtype=np.float64).ravel()
    n0, n1 = len(null), len(alt)
    ranks = rankdata(np.concatenate([null, alt]))
    share = float((ranks[n0:].sum() - n1 * (n1 + 1) / 2) / (n0 * n1))
    return (share - 0.5) / float(np.sqrt((n0 + n1 + 1) / (12 * n0 * n1))), share


def check_direction(
    mechanism: str, delta: float, dim: int, options: Mapping[str, Any] | None = None, seed: int = 0
) -> float | None:
    """Check that the audit score of ``mechanism`` separates its pair the right way at a large epsilon.

    The mechanism is built as :func:`build_for_audit` builds it, calibrated to :data:`PROBE_EPSILON` (a
    clip-and-noise mechanism that calibrates only below it: at the largest of 1, 0.5, 0.1 it calibrates to, its
    noise scaled down to match); :data:`PROBE_SAMPLES` releases per input, drawn by a generator of its own
    (the audit's draws do not change). Returns the epsilon checked at, or None for a mechanism with fixed
    (published) parameters, which has no larger epsilon to build (:func:`judge` still checks the audit's own draws).

    Raises
    ------
    AuditScoreError
        When x1's releases do not score higher than x0's by :data:`DIRECTION_Z` standard errors there.
    """
    epsilon, noise_factor = PROBE_EPSILON, 1.0
    if not calibrates(mechanism, PROBE_EPSILON):
        epsilon = next((e for e in (1.0, 0.5, 0.1) if calibrates(mechanism, e)), math.nan)
        if math.isnan(epsilon) or not issubclass(RANDOMIZERS[mechanism], ClipAndNoise):
            return None
        noise_factor = epsilon / PROBE_EPSILON
    case = build_for_audit(mechanism, epsilon, delta, dim, options, noise_factor)
    if not case.calibrated:
        return None
    epsilon = PROBE_EPSILON
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # a near-deterministic channel's log ratios
        null, alt = case.scores(PROBE_SAMPLES, np.random.default_rng(seed))
    z, share = separation(null, alt)
    if z < DIRECTION_Z:
        what = "points the wrong way" if z <= -DIRECTION_Z else "tells its pair apart no better than chance"
        raise AuditScoreError(
            f"the audit score of {mechanism} {what} at epsilon {epsilon:g}, where any sound score separates the pair: "
            f"releases of its second input x1 score higher than releases of its first x0 in {share:.1%} of pairs "
            f"(z = {z:.1f}, at least {DIRECTION_Z:g} needed), so its audit would pass any claim. Fix audit_scores: {CONVENTION}"
        )
    return epsilon


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
    opts = {**cls.audit_options, **opts}
    clip = float(opts["clip"] if "clip" in cls.audit_options else opts.pop("clip", 1.0))
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
    case = case_for(randomizer, dim, claimed)
    case.calibrated = fixed is None
    return case
