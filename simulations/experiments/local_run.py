"""Run the real ServerApp and ClientApp in this process (no Ray, no SuperLink), for sweeps.

The same app code as `ldpfed simulate`, on the in-process grid of simulations/local_grid.py:
every message goes through the ClientApp handlers, so a sweep of many small runs costs no
process start-up (and the encoding cache is keyed by content, so a ``--train-limit`` sample
of a split encoded before is never encoded again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def single_threaded_blas() -> None:
    """One BLAS thread in this process (see fed/runtime/threads.py); the apps do the same when they start."""
    from fed.runtime.threads import limit_blas_threads

    limit_blas_threads()


def run_in_process(values: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """One whole run with these options on the in-process grid; returns (run directory, summary)."""
    from clients.app import app as client_app
    from fed.spec.run_spec import RunSpec
    from simulations.local_grid import run_local
    from strategies.app import app as server_app

    config = RunSpec.from_mapping(values)
    if not config.output.out:
        raise ValueError("give 'out': the run directory")
    run_local(server_app, client_app, config.schedule.nodes, config.to_mapping())
    out = Path(config.output.out)
    return out, json.loads((out / "summary.json").read_text())
