"""A no-op Flower app: Flower's own floor on a real SuperNode, beside ldpfed's ClientApp.

``simulations.benchmarks.device_costs --supernode --noop`` serves this app with the same
``flower-supernode`` command, device folder and Flower settings as ldpfed's app, back to back, and
prints what ldpfed adds (issue 39 item 13). The ServerApp (noop_flower_apps.py) sends the message
sequence of ldpfed's run in that benchmark: one ``query.setup``, then per round one ``train`` and one
``evaluate``, then one ``query.ledger``; the ClientApp answers each at once with a tiny reply.
"""

from __future__ import annotations

from pathlib import Path

APP_DIR = Path(__file__).resolve().parent
"""The Flower app folder (its pyproject.toml has the [tool.flwr.app] section)."""
