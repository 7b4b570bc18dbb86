"""``ldpfed attack RUN_DIR [--kind K]``: what a server learns from a run's reports, next to chance and epsilon.

The attacker is the server: it knows the run's randomizer (it asked for it) and holds the run's
public data. ``attribute`` attacks the reports the run saved (--save-reports). The other kinds
need to know which record each report came from to score the attack, which the saved reports
do not say (a server cannot link a report to its record), so they release the run's own
training records once more through the run's randomizer, with fresh noise: reports distributed
exactly as the run's, with the record known to the scorer (never to the attack).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ldpfed._attack import DEFAULT_KIND, KIND_HELP, KINDS

HELP = "Attack a finished run as its server would, with public data only: success next to chance and epsilon."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_DIR, the kind of attack and its seed."""
    parser.add_argument("run_dir", type=Path, help="run directory of an ldpfed simulate run")
    parser.add_argument(
        "--kind", choices=KINDS, default=None,
        help="; ".join(f"{k}: {v}" for k, v in KIND_HELP.items()) + f". Default: {DEFAULT_KIND}",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the attacker's own noise and of the replayed releases")
    parser.add_argument("--report", action="store_true", help="also add the outcome to the run's privacy_report.md")


def run(args: argparse.Namespace) -> int:
    """Run the attack (ldpfed.attack), print its success next to chance and the run's epsilon."""
    import ldpfed

    result = ldpfed.attack(Path(args.run_dir), args.kind, seed=args.seed, report=args.report)
    print(
        f"{result.kind} attack ({result.mechanism}, worst-case sentence epsilon {result.epsilon_sentence_max}): "
        f"{result.measure} {result.success:.3f}; chance {result.chance:.3f}"
    )
    return 0
