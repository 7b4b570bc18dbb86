"""``ldpfed audit``: distinguishing audit of a randomizer against its claimed epsilon (ldpfed.audit)."""

from __future__ import annotations

import argparse
import json
import math

from ldpfed._audit import DEVICE_DIM, RUN_DIM, check, default_dim  # noqa: F401 (default_dim: the command's default, tests read it)

HELP = (
    "Audit a randomizer: worst neighbouring pair, likelihood-ratio test, epsilon lower bound vs its claim "
    "(exit status 1 when a claim is violated)."
)
VIOLATED = 1
"""The exit status when the audit proves more than a claim ('claim violated'); bad input exits 2."""


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
    parser.add_argument("--length", type=int, help="snd: token positions L per record (default: as runs use it)")
    parser.add_argument("--snd-sampler", choices=("dchi", "coordinate"), help="snd: the seed's d_chi or its authors' per-coordinate sampler")
    parser.add_argument("--l1-clip", type=float, help="snd: L1 radius of a row (the coordinate sampler's domain; default 1)")
    parser.add_argument(
        "--noise-factor",
        type=float,
        default=1.0,
        help="power check: multiply the noise scale of gaussian*, laplace or dpie-* by this and keep the claim "
        "(0.5: half the noise, which the audit must report as 'claim violated'; default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run(args: argparse.Namespace) -> int:
    """Audit each configuration (ldpfed.audit) and print claimed, accounted and audited epsilon."""
    import ldpfed
    from ldpfed.fed.randomizers.auditing import auditable, calibrates

    check(args.samples, args.confidence, args.dim, args.noise_factor)
    options = {
        key: value
        for key, value in {
            "lambda": args.lam,
            "integer_bits": args.integer_bits,
            "fraction_bits": args.fraction_bits,
            "k": args.k,
            "max_coefficient": args.max_coefficient,
            "masks": args.masks,
            "post_clip": args.post_clip,
            "labels": args.labels,
            "length": args.length,
            "sampler": args.snd_sampler,
            "l1_clip": args.l1_clip,
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
        result = ldpfed.audit(
            name, args.epsilon, delta=args.delta, dim=args.dim, clip=args.clip, samples=args.samples,
            confidence=args.confidence, seed=args.seed + offset, sampler=args.sampler, noise_factor=args.noise_factor,
            options=options,
        )
        rows.append(result.to_json())
    if args.json:
        print(json.dumps(rows, indent=2, default=_json_default))
    else:
        _print_table(rows, args)
    return VIOLATED if any(row["verdict"] == "claim violated" for row in rows) else 0


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
