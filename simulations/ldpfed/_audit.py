"""audit(): distinguishing audit of a randomizer against its claimed epsilon."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ldpfed.fed.runtime.threads import limit_blas_threads

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from ldpfed.fed.randomizers.auditing import AuditCase

RUN_DIM = 384
"""The default dimension: MiniLM's, as runs use it."""
DEVICE_DIM = 2
"""The device sampler's default dimension for a mechanism whose audit does not depend on it
(:func:`fed.randomizers.auditing.dimension_free`): OpenDP takes about 0.1 ms per coordinate."""
WARMUP_RELEASES = 16
"""Releases per input in the first, untimed batch: it pays for imports and OpenDP's setup."""
TIMED_SECONDS = 0.1
"""How long the batches after the warm-up must have lasted before they time the sampler for the estimate."""
BAR_STEPS = 40
"""The largest batch is 1/BAR_STEPS of the draw: the progress bar moves at least this often."""
MECHANISM_OPTIONS = (
    "lambda", "integer_bits", "fraction_bits", "k", "max_coefficient", "masks", "post_clip", "labels", "length", "sampler", "l1_clip",
)
"""The mechanism parameters an audit may set besides ``clip`` (as a run's --mechanism-options would)."""


@dataclass(frozen=True)
class AuditResult:
    """Claimed, accounted and audited epsilon of one randomizer configuration.

    Attributes
    ----------
    mechanism : str
        The randomizer or label channel audited.
    claimed_epsilon : float
        What it states: the calibration target, or the published epsilon of fixed parameters.
    accounted_epsilon : float
        What one release costs in the ledger at ``delta`` (the true cost).
    audited_lower_bound : float
        Epsilon proven by the likelihood-ratio test, with probability ``confidence``.
    verdict : str
        'claim violated' when the audit proves more than the claim, else 'pass'.
    delta, samples, confidence, dim, noise_factor, sampler, seconds
        The audit's settings, the noise generator's name and its wall time.
    params : Mapping[str, Any]
        The privacy event one release is charged.
    randomizer : Mapping[str, Any]
        The randomizer's parameters.
    """

    mechanism: str
    claimed_epsilon: float
    accounted_epsilon: float
    audited_lower_bound: float
    verdict: str
    delta: float
    samples: int
    confidence: float
    dim: int
    noise_factor: float
    sampler: str
    params: Mapping[str, Any]
    randomizer: Mapping[str, Any]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The row ``ldpfed audit --json`` prints."""
        return {
            "mechanism": self.mechanism, "claimed_epsilon": self.claimed_epsilon, "accounted_epsilon": self.accounted_epsilon,
            "delta": self.delta, "audited_lower_bound": self.audited_lower_bound, "samples": self.samples,
            "confidence": self.confidence, "verdict": self.verdict, "dim": self.dim, "noise_factor": self.noise_factor,
            "sampler": self.sampler, "params": dict(self.params), "randomizer": dict(self.randomizer), "seconds": self.seconds,
        }


def audit(
    mechanism: str,
    epsilon: float,
    *,
    delta: float = 1e-5,
    dim: int | None = None,
    clip: float = 1.0,
    samples: int = 50_000,
    confidence: float = 0.95,
    seed: int = 0,
    sampler: str = "engine",
    noise_factor: float = 1.0,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> AuditResult:
    """Audit one randomizer as ``ldpfed audit`` does: its worst neighbouring pair, released ``samples``
    times each, the likelihood-ratio test, and an epsilon lower bound against its claim.

    Parameters
    ----------
    mechanism : str
        A registered randomizer or label channel (fed.randomizers.auditing.auditable()).
    epsilon : float
        The claimed epsilon: the calibration target, or the published epsilon of ome.
    delta, clip, samples, confidence, seed
        As the command's flags (seed: the engine sampler's only).
    dim : int, optional
        Representation dimension (default 384, MiniLM; the device sampler: 2 where the audit is the same at every dimension).
    sampler : str
        'engine' (numpy, seeded, as the simulation draws) or 'device' (OpenDP + ChaCha20 from the OS).
    noise_factor : float
        Power check: the noise scale multiplied by this, the claim kept.
    options : Mapping[str, Any], optional
        Mechanism parameters (:data:`MECHANISM_OPTIONS`, e.g. ``{"lambda": 100}``); the others as runs use them.
    progress : bool
        Print the estimate and a progress bar for long audits.

    Raises
    ------
    ValueError
        A bad setting; or (fed.randomizers.auditing.AuditScoreError) a mechanism whose audit score does not
        point the way the audit reads it: larger means "released from the pair's second input". It is checked on
        a copy of the mechanism at epsilon 100, where any sound score separates its pair, and on the audit's own
        draws. The pair itself is the mechanism's own statement of its worst case, and trusted.
    """
    limit_blas_threads()
    import numpy as np
    from rich.console import Console

    from ldpfed.fed.privacy.noise import SecureGenerator, sampler as sampler_name
    from ldpfed.fed.randomizers.auditing import auditable, build_for_audit, check_direction, judge

    check(samples, confidence, dim, noise_factor)
    if sampler not in ("engine", "device"):
        raise ValueError(f"sampler must be 'engine' or 'device', got {sampler!r}")
    if mechanism not in auditable():
        raise ValueError(f"unknown mechanism {mechanism!r}; auditable: {', '.join(auditable())}")
    unknown = sorted(set(options or {}) - set(MECHANISM_OPTIONS))
    if unknown:
        raise ValueError(f"unknown mechanism option {unknown[0]!r}; options: {', '.join(MECHANISM_OPTIONS)}")
    started = time.perf_counter()
    dim = default_dim(mechanism, sampler) if dim is None else dim
    case = build_for_audit(mechanism, epsilon, delta, dim, {"clip": clip, **(options or {})}, noise_factor)
    check_direction(mechanism, delta, dim, {"clip": clip, **(options or {})})  # the score must point the audit's way
    rng = SecureGenerator.from_os() if sampler == "device" else np.random.default_rng(seed)
    null, alt = _draw(case, samples, rng, f"{sampler} sampler, dim {dim}", Console(stderr=True, quiet=not progress))
    result = judge(case, delta, null, alt, confidence)
    return AuditResult(
        result.mechanism, result.claimed_epsilon, result.accounted_epsilon, result.lower_bound, result.verdict,
        result.delta, result.samples, result.confidence, dim, noise_factor, sampler_name(rng), case.event.to_json(),
        case.randomizer.params(), round(time.perf_counter() - started, 2),
    )


def check(samples: int, confidence: float, dim: int | None, noise_factor: float) -> None:
    """ValueError naming the first setting an audit cannot run with."""
    if samples < 100:
        raise ValueError("--samples must be at least 100")
    if not 0 < confidence < 1:
        raise ValueError("--confidence must lie in (0, 1)")
    if dim is not None and dim < 2:
        raise ValueError("--dim must be at least 2")
    if not 0 < noise_factor < math.inf:
        raise ValueError(f"--noise-factor must be positive and finite, got {noise_factor}")


def default_dim(mechanism: str, sampler: str) -> int:
    """The dimension audited unless ``dim`` is given: MiniLM's, or the device sampler's shortcut
    for a mechanism whose audit is the same at every dimension."""
    from ldpfed.fed.randomizers.auditing import dimension_free

    return DEVICE_DIM if sampler == "device" and dimension_free(mechanism) else RUN_DIM


def _draw(
    case: AuditCase, samples: int, rng: np.random.Generator, where: str, console: Console
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of ``samples`` releases per input in batches, with an estimate and a progress bar.

    Once the batches after the untimed warm-up have lasted :data:`TIMED_SECONDS`, the
    estimate of the whole draw is printed from them and the rest is drawn under a progress
    bar; an audit that ends sooner prints neither. The batch sizes depend on ``samples``
    only, so a seeded draw is reproducible.
    """
    import numpy as np
    from rich.progress import (
        BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn,
    )

    started = time.perf_counter()
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    timed, timed_seconds = 0, 0.0
    with ExitStack() as stack:
        bar = task = None
        for size in _batch_sizes(samples):
            batch_started = time.perf_counter()
            parts.append(case.scores(size, rng))
            done = sum(len(null) for null, _ in parts)
            if bar is not None:
                bar.update(task, completed=done)
            elif len(parts) > 1:
                timed, timed_seconds = timed + size, timed_seconds + time.perf_counter() - batch_started
                if timed_seconds >= TIMED_SECONDS and done < samples:
                    total = time.perf_counter() - started + (samples - done) * timed_seconds / timed
                    hint = " (--samples or --dim shorten it)" if total > 120 else ""
                    console.print(
                        f"{case.mechanism}: about {_duration(total)} for {samples:,} releases per input ({where}){hint}"
                    )
                    columns = (
                        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(),
                    )
                    bar = stack.enter_context(Progress(*columns, console=console, disable=console.quiet))
                    task = bar.add_task(case.mechanism, total=samples, completed=done)
    return np.concatenate([null for null, _ in parts]), np.concatenate([alt for _, alt in parts])


def _batch_sizes(samples: int) -> Iterator[int]:
    """The warm-up batch, then doubling batches up to 1/:data:`BAR_STEPS` of ``samples``, adding up to ``samples``."""
    cap = max(WARMUP_RELEASES, math.ceil(samples / BAR_STEPS))
    size = done = 0
    while done < samples:
        size = min(max(WARMUP_RELEASES, 2 * size), cap, samples - done)
        yield size
        done += size


def _duration(seconds: float) -> str:
    """``seconds`` as a person reads an estimate: s, min or h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
