"""Running another checkout's code: the mutation check's mutated copies, the peer benchmark's before and after."""

from __future__ import annotations

import os
from pathlib import Path


def checkout_env(root: Path, shims: Path) -> dict[str, str]:
    """Environment whose processes import ldpfed from the checkout ``root`` instead of the installed one.

    ``root`` goes first on PYTHONPATH (its ``tests`` package), then ``shims``, a folder where ``ldpfed`` links to
    ``root``/simulations/ldpfed: that package reaches ``root``'s fed/, clients/, strategies/ and simulations/ as
    ldpfed.fed and so on, ahead of what the editable install maps.
    """
    shims.mkdir(parents=True, exist_ok=True)
    link = shims / "ldpfed"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(root / "simulations" / "ldpfed", target_is_directory=True)
    path = os.pathsep.join(filter(None, [str(root), str(shims), os.environ.get("PYTHONPATH", "")]))
    return dict(os.environ, PYTHONPATH=path)
