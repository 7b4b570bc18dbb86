"""Subcommands of the ``ldpfed`` command line; one module each.

A module here defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
"""
