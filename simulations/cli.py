"""The ``ldpfed`` command line: one subcommand per module in simulations.commands."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


class Stopped(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM: raised in the command, whose ``finally`` blocks and context managers stop its
    children on the way out (simulations.processes)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Stopped` in the block (once: a second signal would cut the cleanup short);
    the handlers before are restored after it. Only the main thread can set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stopped(signum: int, frame: Any) -> None:
        for each in (signal.SIGINT, signal.SIGTERM):
            signal.signal(each, signal.SIG_IGN)
        raise Stopped(signum)

    before = {signum: signal.signal(signum, stopped) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the chosen subcommand; bad input exits 2 with a message. Stopped by Ctrl-C or SIGTERM,
    it stops its children and exits 128 + the signal's number (130, 143) with one line."""
    limit_blas_threads()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _stopped_by_signals():
            return int(args.handler(args) or 0)
    except ValueError as error:
        parser.exit(2, f"ldpfed {args.command}: error: {error}\n")
    except KeyboardInterrupt as error:
        signum = error.signum if isinstance(error, Stopped) else signal.SIGINT
        print(f"ldpfed {args.command}: stopped ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
