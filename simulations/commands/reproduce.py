"""``ldpfed reproduce``: run one seed's reproduction and write its report."""

from __future__ import annotations

import argparse

HELP = "Reproduce a seed paper's table side by side with ldpfed (--list shows them; NAME --help their options)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """A reproduction's name and its own options, or --list."""
    parser.add_argument("name", nargs="?", help="the reproduction to run (see --list)")
    parser.add_argument("--list", action="store_true", help="list the reproductions and exit")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="options passed to the reproduction (NAME --help)")


def run(args: argparse.Namespace) -> int:
    """List the reproductions, or run one with its options."""
    from ldpfed.simulations import reproductions

    if args.list or not args.name:
        if not args.list:
            raise ValueError("give a reproduction NAME, or --list")
        for name in reproductions.names():
            print(f"{name:<24} {reproductions.description(reproductions.load(name))}")
        return 0
    return int(reproductions.load(args.name).main(args.options) or 0)
