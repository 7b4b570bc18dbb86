"""What the device-cost figures were measured on: CPU, memory, load, versions, tree and file system."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.benchmarks.device_costs.device import REPO


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import flwr
    import torch

    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    mem = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), 0)
    return {
        "cpus": os.cpu_count(),
        "load_average_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "cpu_pressure_at_start": cpu_pressure(),
        "cpu_model": model,
        "memory_gib": round(mem / 2**20, 1),
        "gpu": bool(torch.cuda.is_available()),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "flwr": flwr.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "git": _git_state(),
    }


def cpu_pressure() -> str:
    """The kernel's CPU pressure line ('some avg10=...'): how often tasks waited for a CPU (other load)."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def _git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (uncommitted changes)' if dirty else ''}"


def filesystem(path: Path) -> str:
    """The file system type holding ``path`` (the ledger's fsync depends on it)."""
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and str(path.resolve()).startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind
