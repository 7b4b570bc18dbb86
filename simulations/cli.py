"""The ``ldpfed`` command line: one subcommand per module in simulations.commands."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any

from ldpfed.simulations import commands
from ldpfed.fed.configuration.option import did_you_mean
from ldpfed.fed.runtime.threads import limit_blas_threads


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser (its subcommands' too) that names the closest of its options to one it does not know."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> tuple[Any, list[str]]:
        """As ArgumentParser's; an unknown option is an error naming the closest known one, by the parser that
        had the options (a subcommand's, for a subcommand's option)."""
        parsed, extras = super().parse_known_args(args, namespace)
        unknown = [word.partition("=")[0] for word in extras if word.startswith("--")]
        if unknown:
            names = [name for action in self._actions for name in action.option_strings]
            self.error(f"unrecognized arguments: {' '.join(extras)}" + "".join(did_you_mean(w, names) for w in unknown))
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand found in simulations.commands."""
    parser = SuggestingParser(prog="ldpfed", description="Federated local-DP NLP users on Flower.")
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
