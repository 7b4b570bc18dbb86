"""The ``ldpfed`` command line: one subcommand per module in simulations.commands."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from ldpfed.simulations import commands
from ldpfed.fed.runtime.threads import limit_blas_threads


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand found in simulations.commands."""
    parser = argparse.ArgumentParser(prog="ldpfed", description="Federated local-DP NLP users on Flower.")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        command = sub.add_parser(info.name.replace("_", "-"), help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; bad input exits 2 with a message."""
    limit_blas_threads()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ValueError as error:
        parser.exit(2, f"ldpfed {args.command}: error: {error}\n")


if __name__ == "__main__":
    sys.exit(main())
