"""Distinguishing audits: the worst neighbouring pair a randomizer's sensitivity allows, and the optimal test.

For a configuration, :func:`audit` draws ``samples`` releases on each of two neighbouring
inputs x0 and x1 chosen at the diameter of the randomizer's input domain, scores each
release by the log-likelihood ratio log p(y | x1) / p(y | x0) (the Neyman-Pearson optimal
test for that pair) and turns the test's false-positive and false-negative rates into an
epsilon lower bound with Clopper-Pearson intervals (:func:`fed.privacy.audit.lr_epsilon_lower_bound`).

Worst pairs (C: the clip radius, d: the dimension):

- gaussian family: +-C e_1 (L2 distance 2C); laplace: +-C1 e_1 (L1 distance 2*C1);
- laplace-seed002: +-(C / sqrt d) (1, ..., 1), the L1 diameter 2*C*sqrt(d) of the L2 ball;
- dchi: +-C e_1 (distance 2C);
- snd: every one of the L token vectors at +-C e_1 (``dim`` is a token's width); the score sums
  the d_chi log-likelihood ratio over tokens (optimal without the post-noise clip, valid with it);
- sue / oue / ome: the inputs whose bit vectors are all 0 and all 1 (z = 0 and the most
  negative representable value), which differ in every bit;
- dpie-*: one record at +-C e_1 beside k-1 zero records in a batch of k (it enters all k
  reports). The mixing coefficients and masks are secret, so the score is a valid but not
  optimal statistic (sum of the first coordinate without masks; with masks, which hide
  signs, the pair is C e_1 versus C e_2 and the score compares squared coordinates);
- texthide: the same with no noise at all;
- label channels: labels 0 and 1.

:func:`build_for_audit` builds a registry mechanism exactly as a run does
(:meth:`~fed.randomizers.base.Randomizer.run_options` with the class's default options,
then fixed parameters or a calibration for one release), so the audit examines what runs.
Its claimed epsilon is the calibration target, or what fixed (published) parameters state
(``ome``: its published epsilon; ``texthide``: nothing, epsilon = inf).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fed.privacy.audit import (
    AuditResult,
    bitflip_llr,
    dchi_llr,
    gaussian_llr,
    laplace_llr,
    lr_epsilon_lower_bound,
)
from fed.privacy.composition import compose_epsilon
from fed.privacy.events import PrivacyEvent
from fed.randomizers import RANDOMIZERS
from fed.randomizers.bits import BitEncodingRandomizer
from fed.randomizers.clip_and_noise import ClipAndNoise
from fed.randomizers.exponential import ExponentialMechanism
from fed.randomizers.gaussian import GaussianRandomizer
from fed.randomizers.instance_encoding import _Mixing
from fed.randomizers.labels import RandomizedResponse
from fed.randomizers.laplace import LaplaceRandomizer, Seed002LaplaceRandomizer
from fed.randomizers.metric import DChiRandomizer
from fed.randomizers.split_denoise import SplitDenoiseRandomizer

Scores = Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]]
AUDIT_ENCODER = "minilm"
"""The encoder a class that names one (snd) is built with; the audit never loads it."""
_CHUNK_ELEMENTS = 1 << 22

LABEL_CHANNELS: dict[str, Callable[[float, int], RandomizedResponse | ExponentialMechanism]] = {
    "randomized-response": RandomizedResponse,
    "exponential": ExponentialMechanism,
}
AUDITABLE: tuple[str, ...] = (*RANDOMIZERS, *LABEL_CHANNELS)


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


def _repeated_scores(
    release: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    x: np.ndarray,
    score: Callable[[np.ndarray], np.ndarray],
    n: int,
    rng: np.random.Generator,
    width: int,
) -> np.ndarray:
    """Scores of ``n`` releases of the single row ``x``, drawn in memory-bounded chunks."""
    step = max(1, _CHUNK_ELEMENTS // max(1, width))
    out = []
    for start in range(0, n, step):
        rows = min(step, n - start)
        out.append(score(release(np.repeat(x, rows, axis=0), rng)))
    return np.concatenate(out)


def _pair_case(randomizer: Any, x0: np.ndarray, x1: np.ndarray, llr: Callable[[np.ndarray], np.ndarray], width: int) -> Scores:
    def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        null = _repeated_scores(randomizer.release, x0, llr, n, rng, width)
        alt = _repeated_scores(randomizer.release, x1, llr, n, rng, width)
        return null, alt

    return scores


def _antipodal_llr(randomizer: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """The log-likelihood ratio of a clip-ball randomizer whose worst pair is +-clip on one axis."""
    if isinstance(randomizer, GaussianRandomizer):
        return lambda y, x0, x1: gaussian_llr(y, x0, x1, randomizer.sigma)
    if isinstance(randomizer, LaplaceRandomizer):
        return lambda y, x0, x1: laplace_llr(y, x0, x1, randomizer.scale)
    if isinstance(randomizer, DChiRandomizer):
        return lambda y, x0, x1: dchi_llr(y, x0, x1, randomizer.eta)
    return None


def case_for(randomizer: Any, dim: int, claimed_epsilon: float) -> AuditCase:
    """The worst pair and likelihood-ratio score of a randomizer (or label channel)."""
    name = getattr(randomizer, "name", None) or randomizer.params()["mechanism"]
    e1 = np.zeros((1, dim))
    e1[0, 0] = 1.0
    llr = _antipodal_llr(randomizer)
    if llr is not None:  # the worst pair: opposite points of the clip ball along one axis
        x0, x1 = randomizer.clip * e1, -randomizer.clip * e1
        scores = _pair_case(randomizer, x0, x1, lambda y: llr(y, x0, x1), dim)
    elif isinstance(randomizer, SplitDenoiseRandomizer):
        tokens = randomizer.length
        x0 = np.tile(randomizer.clip * e1, (1, tokens))
        x1 = -x0

        def token_llr(y: np.ndarray) -> np.ndarray:
            per_token = dchi_llr(y.reshape(-1, dim), x0[0, :dim], x1[0, :dim], randomizer.eta)
            return per_token.reshape(len(y), tokens).sum(axis=1)

        scores = _pair_case(randomizer, x0, x1, token_llr, tokens * dim)
    elif isinstance(randomizer, Seed002LaplaceRandomizer):
        if dim != randomizer.dim:
            raise ValueError(f"laplace-seed002 was built for dim {randomizer.dim}, audit asks for {dim}")
        c, b = randomizer.clip, randomizer.scale
        x0 = np.full((1, dim), c / math.sqrt(dim))
        x1 = -x0
        scores = _pair_case(randomizer, x0, x1, lambda y: laplace_llr(y, x0, x1, b), dim)
    elif isinstance(randomizer, BitEncodingRandomizer):
        x0 = randomizer.mean[None, :].copy()
        x1 = (randomizer.mean - randomizer.std * 2.0**randomizer.integer_bits)[None, :]
        b0, b1 = randomizer.preprocess(x0)[0], randomizer.preprocess(x1)[0]
        p, q = randomizer.p, randomizer.q
        scores = _pair_case(randomizer, x0, x1, lambda y: bitflip_llr(y, b0, b1, p, q), randomizer.num_bits)
    elif isinstance(randomizer, _Mixing):
        scores = _mixup_scores(randomizer, dim)
    elif isinstance(randomizer, (RandomizedResponse, ExponentialMechanism)):
        logt = np.log(randomizer.transition_matrix())
        weights = logt[1] - logt[0]

        def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
            null = randomizer.release(np.zeros(n, dtype=np.int64), rng)
            alt = randomizer.release(np.ones(n, dtype=np.int64), rng)
            return weights[null], weights[alt]

        name = "randomized-response" if isinstance(randomizer, RandomizedResponse) else "exponential"
    else:
        raise ValueError(f"no audit for {type(randomizer).__name__}")
    return AuditCase(name, float(claimed_epsilon), randomizer, scores)


def _mixup_scores(randomizer: _Mixing, dim: int) -> Scores:
    k = randomizer.records_per_report
    clip = getattr(randomizer, "clip", 1.0)
    masked = randomizer.mixup.masks > 0
    x0 = np.zeros((k, dim))
    x1 = np.zeros((k, dim))
    x0[0, 0] = clip
    if masked:
        x1[0, 1] = clip
    else:
        x1[0, 0] = -clip

    def score(reports: np.ndarray) -> np.ndarray:  # (groups, k, dim) -> (groups,)
        if masked:
            return (reports[..., 1] ** 2 - reports[..., 0] ** 2).sum(axis=1)
        return -reports[..., 0].sum(axis=1)

    def draw(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        step = max(1, _CHUNK_ELEMENTS // (k * dim))
        out = []
        for start in range(0, n, step):
            groups = min(step, n - start)
            reports, _, _ = randomizer.release_groups(np.broadcast_to(x, (groups, k, dim)), rng)
            out.append(score(reports))
        return np.concatenate(out)

    def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return draw(x0, n, rng), draw(x1, n, rng)

    return scores


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


def dimension_free(mechanism: str) -> bool:
    """Whether the audit of ``mechanism`` is the same test at every dimension of at least 2.

    True for the gaussian family and laplace: their noise is i.i.d. per coordinate with a
    scale calibrated to a sensitivity the clip alone fixes (2C); the worst pair +-C e_1
    differs on the first axis only, where the log-likelihood ratio reads it (``gaussian_llr``,
    ``laplace_llr``: every other coordinate has the same mean under both inputs and adds
    exactly 0), so the score's distribution, and the event audited, do not depend on the
    dimension. Likewise dpie-* and texthide (mixing, masks and noise act on each coordinate
    alone; the statistic reads the first two) and the label channels (no dimension). Not
    dchi or snd (noise shaped by the norm of the whole vector), laplace-seed002 (its
    violation grows with sqrt(d)) or sue, oue and ome (the pair differs in every bit).
    """
    if mechanism in LABEL_CHANNELS:
        return True
    return issubclass(RANDOMIZERS[mechanism], (GaussianRandomizer, LaplaceRandomizer, _Mixing))


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
    if mechanism not in AUDITABLE:
        raise ValueError(f"unknown mechanism {mechanism!r}; auditable: {', '.join(AUDITABLE)}")
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
