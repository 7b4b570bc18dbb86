"""The randomizer interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from fed.privacy.events import PrivacyEvent


class Randomizer(ABC):
    """Turns clean inputs into reports; one call is one run per row.

    ``event`` states what one run costs a record; the ledger is fed only from it.
    """

    @property
    @abstractmethod
    def event(self) -> PrivacyEvent:
        """The privacy event of one run on one record."""

    @abstractmethod
    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Randomize each row of ``x`` with fresh noise from ``rng``."""


def check_finite_matrix(x: np.ndarray) -> np.ndarray:
    """``x`` as a finite 2-D float64 array, or a ValueError naming the problem."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array of representations, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("representations contain NaN or infinite values")
    return x
