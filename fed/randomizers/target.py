"""What a calibration must meet, as one small object every randomizer calibrates against."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma, calibrate_parameter
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.validators import check_int, check_target


@dataclass(frozen=True)
class CalibrationTarget:
    """(epsilon, delta) to meet after ``releases`` runs of one randomizer plus ``other_events``.

    Validated on construction (positive finite epsilon, delta in (0, 1), releases >= 1).
    """

    epsilon: float
    delta: float
    releases: int
    other_events: Mapping[PrivacyEvent, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        epsilon, delta = check_target(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "releases", check_int("releases", self.releases))
        object.__setattr__(self, "other_events", {e: n for e, n in (self.other_events or {}).items() if n > 0})

    def gaussian_sigma(self, sensitivity: float) -> float:
        """Smallest Gaussian sigma for an input domain of this L2 diameter."""
        return calibrate_gaussian_sigma(self.epsilon, self.delta, self.releases, sensitivity, self.other_events)

    def largest(self, make_event: Callable[[float], PrivacyEvent], start: float) -> float:
        """Largest privacy parameter x (1/scale, eta, a published epsilon) whose event meets the target."""
        return calibrate_parameter(make_event, self.epsilon, self.delta, self.releases, self.other_events, start)
