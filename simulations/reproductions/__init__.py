"""Reproductions of the seeds' tables, one module each, run by ``ldpfed reproduce NAME``.

A reproduction is a module of this package whose name does not start with ``_``. It exposes
``DESCRIPTION`` (one line) and ``main(argv=None) -> int``, and writes its report to
``simulations/reports/reproductions/<NAME>/`` (``README.md`` and ``results.json``): the
paper's figure, ldpfed's figure in the paper's own setting, the same row under ldpfed's
strict accounting (worst case, sensitivity 2C, no amplification), and every difference
that remains. Shared machinery (resumable cells, progress, tables) is in ``_cells.py``.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

REPORTS = Path(__file__).resolve().parents[1] / "reports" / "reproductions"
"""Where each reproduction writes its folder."""


def names() -> list[str]:
    """The reproductions found in this package, sorted."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_"))


def load(name: str) -> ModuleType:
    """The reproduction module ``name`` (hyphens read as underscores); ValueError if there is none."""
    module_name = name.replace("-", "_")
    if module_name not in names():
        raise ValueError(f"no reproduction named {name!r}; available: {', '.join(names()) or 'none'}")
    module = importlib.import_module(f"{__name__}.{module_name}")
    if not callable(getattr(module, "main", None)):
        raise ValueError(f"reproduction {name!r} has no main(argv)")
    return module


def description(module: ModuleType) -> str:
    """The module's one-line ``DESCRIPTION``, else the first line of its docstring."""
    text = getattr(module, "DESCRIPTION", None) or (module.__doc__ or "").strip()
    return text.splitlines()[0] if text else ""
