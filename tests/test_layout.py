"""design.md section 3: the core library must not import flwr."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import ldpfed.fed as fed

ROOT = Path(__file__).resolve().parents[1]


def test_fed_does_not_import_flwr() -> None:
    modules = [m.name for m in pkgutil.walk_packages(fed.__path__, "ldpfed.fed.")]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'flwr' or m.startswith('flwr.'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(modules) > 20
    assert done.stdout.strip() == "", f"fed imports flwr: {done.stdout}"
