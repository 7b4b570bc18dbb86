"""``ldpfed audit``: distinguishing audit of a randomizer against its claimed epsilon."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from fed.randomizers.auditing import AuditCase

HELP = "Audit a randomizer: worst neighbouring pair, likelihood-ratio test, epsilon lower bound vs its claim."

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Mechanism, claim, domain and sample size."""
    parser.add_argument(
        "--mechanism", required=True, help="randomizer to audit, as in docs/randomizers.md ('all': each in turn)"
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        required=True,
        help="claimed epsilon: the calibration target (laplace-seed002: its stated epsilon), or the published epsilon of ome",
    )
    parser.add_argument("--delta", type=float, default=1e-5, help="delta of the claim (default 1e-5)")
    parser.add_argument(
        "--dim",
        type=int,
        help=f"representation dimension (default {RUN_DIM}, MiniLM; device sampler: {DEVICE_DIM} where the audit "
        "is the same test at every dimension, see docs/randomizers.md)",
    )
    parser.add_argument("--clip", type=float, default=1.0, help="clip radius C (L1 radius for laplace, dpie-laplace)")
    parser.add_argument("--samples", type=int, default=50_000, help="releases drawn on each input (default 50000)")
    parser.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bound (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0; engine sampler only)")
    parser.add_argument(
        "--sampler",
        choices=("engine", "device"),
        default="engine",
        help="noise as the simulation engine draws it (numpy, seeded; default) or as a device does (OpenDP + ChaCha20 from the OS)",
    )
    parser.add_argument("--lambda", dest="lam", type=float, help="OME randomization factor (default: as runs use it)")
    parser.add_argument("--integer-bits", type=int, help="fixed-point integer bits m (default: as runs use it)")
    parser.add_argument("--fraction-bits", type=int, help="fixed-point fraction bits n (default: as runs use it)")
    parser.add_argument("--k", type=int, help="records per mixup for dpie-* and texthide (default: as runs use it)")
    parser.add_argument("--max-coefficient", type=float, help="largest mixup coefficient for dpie-* (default: as runs use it)")
    parser.add_argument("--masks", type=int, help="sign-mask pool size for dpie-* and texthide (default: as runs use it)")
    parser.add_argument("--post-clip", type=float, help="dchi: clip of the noisy vector (seed 003 eq. 3)")
    parser.add_argument("--labels", type=int, help="number of label values for label channels (default 2)")
    parser.add_argument(
        "--noise-factor",
        type=float,
        default=1.0,
        help="power check: multiply the noise scale of gaussian*, laplace or dpie-* by this and keep the claim "
        "(0.5: half the noise, which the audit must report as 'claim violated'; default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run(args: argparse.Namespace) -> int:
    """Build each configuration, audit it and print claimed, accounted and audited epsilon."""
    import numpy as np
    from rich.console import Console

    from fed.privacy.noise import SecureGenerator, sampler
    from fed.randomizers.auditing import auditable, build_for_audit, calibrates, judge

    if args.samples < 100:
        raise ValueError("--samples must be at least 100")
    if not 0 < args.confidence < 1:
        raise ValueError("--confidence must lie in (0, 1)")
    if args.dim is not None and args.dim < 2:
        raise ValueError("--dim must be at least 2")
    if not 0 < args.noise_factor < math.inf:
        raise ValueError(f"--noise-factor must be positive and finite, got {args.noise_factor}")
    options = {
        key: value
        for key, value in {
            "clip": args.clip,
            "lambda": args.lam,
            "integer_bits": args.integer_bits,
            "fraction_bits": args.fraction_bits,
            "k": args.k,
            "max_coefficient": args.max_coefficient,
            "masks": args.masks,
            "post_clip": args.post_clip,
            "labels": args.labels,
        }.items()
        if value is not None
    }
    if args.mechanism != "all" and args.mechanism not in auditable():
        raise ValueError(f"unknown mechanism {args.mechanism!r}; auditable: {', '.join(auditable())}, all")
    names = auditable() if args.mechanism == "all" else (args.mechanism,)
    rows = []
    for offset, name in enumerate(names):
        if args.mechanism == "all" and not calibrates(name, args.epsilon):
            continue  # e.g. the classical Gaussian formula, which holds for epsilon < 1 only
        started = time.perf_counter()
        dim = default_dim(name, args.sampler) if args.dim is None else args.dim
        case = build_for_audit(name, args.epsilon, args.delta, dim, options, args.noise_factor)
        rng = SecureGenerator.from_os() if args.sampler == "device" else np.random.default_rng(args.seed + offset)
        null, alt = _draw(case, args.samples, rng, f"{args.sampler} sampler, dim {dim}", Console(stderr=True))
        result = judge(case, args.delta, null, alt, args.confidence)
        rows.append(
            {
                **result.to_json(),
                "dim": dim,
                "noise_factor": args.noise_factor,
                "sampler": sampler(rng),
                "params": case.event.to_json(),
                "randomizer": case.randomizer.params(),
                "seconds": round(time.perf_counter() - started, 2),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2, default=_json_default))
    else:
        _print_table(rows, args)
    return 0


def default_dim(mechanism: str, sampler: str) -> int:
    """The dimension audited unless ``--dim`` is given: MiniLM's, or the device sampler's shortcut
    for a mechanism whose audit is the same at every dimension."""
    from fed.randomizers.auditing import dimension_free

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
                    bar = stack.enter_context(Progress(*columns, console=console))
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


def _json_default(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return str(value)


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _print_table(rows: list[dict], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    header = ("mechanism", "dim", "claimed eps", "accounted eps", "audited eps >=", "verdict")
    body = [
        (
            r["mechanism"], str(r["dim"]), _fmt(r["claimed_epsilon"]), _fmt(r["accounted_epsilon"]),
            f"{r['audited_lower_bound']:.3f}", r["verdict"],
        )
        for r in rows
    ]
    mutant = f", noise x {args.noise_factor:g} (claim kept)" if args.noise_factor != 1.0 else ""
    title = (
        f"Distinguishing audit: delta={args.delta:g}, {args.samples} releases per input, "
        f"{args.confidence:.0%} Clopper-Pearson lower bound, {args.sampler} sampler ({rows[0]['sampler'] if rows else '-'}){mutant}"
    )
    table = Table(title=title)
    for name in header:
        text = name in ("mechanism", "verdict")
        table.add_column(name, justify="left" if text else "right", no_wrap=text)
    for row in body:
        style = "bold red" if row[-1] == "claim violated" else None
        table.add_row(*row, style=style)
    Console().print(table)
    print(
        "claimed: what the mechanism states (calibration target or published epsilon); accounted: what the "
        "ledger charges per release (true cost); audited: epsilon proven by the likelihood-ratio test."
    )
