"""The in-process Grid lives in simulations/local_grid.py (sweeps use it too); re-exported for tests."""

from ldpfed.simulations.local_grid import LocalGrid, run_local

__all__ = ["LocalGrid", "run_local"]
