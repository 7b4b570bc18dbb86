"""Plain Flower, for reference: a trivial app run the way ``ldpfed simulate`` runs its own.

``python -m ldpfed.simulations.benchmarks.plain_flower --nodes N --rounds R --out DIR`` starts a private
SuperLink with Flower's Ray simulation runtime (simulations.flower_runner) and runs the app
in this folder (plain_flower_apps.py) on N simulated nodes; each round's seconds go to
``DIR/metrics.jsonl``. simulations.benchmarks.bench_scale sets it beside ldpfed.
"""

from __future__ import annotations

from pathlib import Path

APP_DIR = Path(__file__).resolve().parent
"""The Flower app folder (its pyproject.toml has the [tool.flwr.app] section)."""
