"""The ``ldpfed`` command line and what runs around it.

``cli`` and ``commands`` (one module per subcommand), with the Flower runner, studies and
``reproductions`` they use; ``benchmarks`` (speed, memory and cost), ``checks`` (fuzzing, crash and
mutation checks) and ``experiments`` (one-off studies, outside the installed package, never
imported by the command line). Reports live in ``reports/``, study files in ``configs/``.
"""
