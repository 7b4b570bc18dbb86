"""mkdocs hook: the package griffe reads for the API reference.

simulations/ldpfed is the package ldpfed, and its links fed, clients, strategies and simulations reach the
checkout's folders. griffe loads a package with every subpackage, and ldpfed.simulations (the benchmarks,
reproductions and, through its own link, ldpfed again) takes it 50 s. This hook lays out ldpfed without that
link in a temporary folder and points mkdocstrings at it: the reference covers the API and the library.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

PACKAGE = Path(__file__).resolve().parents[2] / "simulations" / "ldpfed"
LEFT_OUT = ("simulations", "__pycache__")


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: Any) -> Any:
    tree = Path(tempfile.mkdtemp(prefix="ldpfed-docs-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    (tree / "ldpfed").mkdir()
    for item in PACKAGE.iterdir():
        if item.name not in LEFT_OUT:
            (tree / "ldpfed" / item.name).symlink_to(item.resolve())
    config["plugins"]["mkdocstrings"].config["handlers"]["python"]["paths"] = [str(tree)]
    return config
