"""Run the real ServerApp and ClientApp in this process (no Ray, no SuperLink), for sweeps.

The same app code as `ldpfed simulate`, on the in-process grid of simulations/local_grid.py:
every message goes through the ClientApp handlers, so a sweep of many small runs costs no
process start-up (and the encoding cache is keyed by content, so a ``--train-limit`` sample
of a split encoded before is never encoded again).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
"""The shared data folder beside the checkout (../shared/data)."""


def sweep_parser(description: str, datasets: list[str], report: Path, choices: list[str] | None = None
                 ) -> argparse.ArgumentParser:
    """The options every dataset-by-epsilon sweep takes: data root, datasets (default ``datasets``; any of
    ``choices``, or of ``datasets`` without it), epsilons, users, sample, report."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, default=SHARED)
    parser.add_argument("--datasets", nargs="+", default=datasets, choices=choices or datasets)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[8.0, 3.0, 1.0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--train-limit", type=int, default=8000, help="seeded sample of each training split (0: all)")
    parser.add_argument("--out", type=Path, default=report)
    parser.add_argument("--report-only", action="store_true")
    return parser


def single_threaded_blas() -> None:
    """One BLAS thread in this process (see fed/runtime/threads.py); the apps do the same when they start."""
    from ldpfed.fed.runtime.threads import limit_blas_threads

    limit_blas_threads()


def run_in_process(values: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """One whole run with these options on the in-process grid; returns (run directory, summary)."""
    from ldpfed.clients.app import app as client_app
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.simulations.local_grid import run_local
    from ldpfed.strategies.app import app as server_app

    config = RunSpec.from_mapping(values)
    if not config.output.out:
        raise ValueError("give 'out': the run directory")
    run_local(server_app, client_app, config.schedule.nodes, config.to_mapping())
    out = Path(config.output.out)
    return out, json.loads((out / "summary.json").read_text())
