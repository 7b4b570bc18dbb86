"""The randomizer interface and its registry.

A randomizer is built from plain parameters (what a server's request carries), adds its
noise, states its privacy event, and tells the server how to read its reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fed.privacy.events import PrivacyEvent
from fed.randomizers.target import CalibrationTarget


class Randomizer(ABC):
    """Turns clean inputs into reports; one call is one run per row.

    ``event`` states what one run costs a record; the ledger is fed only from it.
    """

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> "Randomizer":
        """Build from :meth:`params` output; ValueError naming any bad field."""

    required_options: ClassVar[frozenset[str]] = frozenset()
    """Options a calibration needs (fixed parameters such as the clip)."""
    optional_options: ClassVar[frozenset[str]] = frozenset()
    """Options a calibration accepts besides the required ones."""

    @classmethod
    def calibrated(
        cls,
        epsilon: float,
        delta: float,
        releases: int,
        options: Mapping[str, Any],
        other_events: Mapping[PrivacyEvent, int] | None = None,
    ) -> "Randomizer":
        """The least noisy instance whose ``releases`` runs (plus ``other_events``) meet (epsilon, delta).

        ``options`` holds the parameters that are fixed rather than solved for (e.g. the clip);
        a missing or unknown one, or a bad target, is a ValueError naming it.
        """
        check_params({"mechanism": cls.name, **options}, cls.required_options, cls.optional_options)
        return cls._calibrate(CalibrationTarget(epsilon, delta, releases, other_events or {}), options)

    @classmethod
    @abstractmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "Randomizer":
        """The instance for a validated ``target`` and checked ``options``."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Plain-JSON parameters, including ``mechanism``."""

    @property
    @abstractmethod
    def event(self) -> PrivacyEvent:
        """The privacy event of one run on one record."""

    @abstractmethod
    def preprocess(self, x: np.ndarray) -> np.ndarray:
        """The deterministic part of a release (e.g. clipping), also applied at local inference."""

    @abstractmethod
    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Randomize each row of ``x`` with fresh noise from ``rng``."""

    @abstractmethod
    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float | np.ndarray]:
        """Server side: unbiased estimates of the (clipped) inputs, and the noise variance per
        coordinate (one number, or one per coordinate when it differs between coordinates)."""


RANDOMIZERS: dict[str, type[Randomizer]] = {}


def register(cls: type[Randomizer]) -> type[Randomizer]:
    """Class decorator making a randomizer selectable by its ``name``."""
    RANDOMIZERS[cls.name] = cls
    return cls


def make_randomizer(params: Mapping[str, Any]) -> Randomizer:
    """The randomizer that ``params['mechanism']`` names, built from ``params``."""
    mechanism = params.get("mechanism")
    if mechanism not in RANDOMIZERS:
        raise ValueError(f"unknown mechanism {mechanism!r}; available: {sorted(RANDOMIZERS)}")
    return RANDOMIZERS[mechanism].from_params(params)


def check_finite_matrix(x: np.ndarray) -> np.ndarray:
    """``x`` as a finite 2-D float64 array, or a ValueError naming the problem."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D array of representations, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("representations contain NaN or infinite values")
    return x


def check_params(params: Mapping[str, Any], required: set[str], optional: set[str] = frozenset()) -> None:
    """ValueError naming a missing required key or an unknown one (``mechanism`` is always allowed)."""
    keys = set(params) - {"mechanism"}
    if missing := required - keys:
        raise ValueError(f"{params.get('mechanism')}: missing parameter(s) {sorted(missing)}")
    if unknown := keys - required - set(optional):
        raise ValueError(f"{params.get('mechanism')}: unknown parameter(s) {sorted(unknown)}")
