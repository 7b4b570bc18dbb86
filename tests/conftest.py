"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets beside the checkout (../shared/data); skip if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (real datasets live beside the checkout)")
    return SHARED_DATA
