"""The virtual time of a simulated run, and what the heterogeneity axes play on it.

The clock only counts virtual seconds. Each axis that acts on it owns its part (a :class:`ClockPart`,
from :meth:`~fed.heterogeneity.axis.HeterogeneityAxis.on_clock`): --device-speed and --deadline time
each round and tell who is late (fed.heterogeneity.device_speed), --behavior-trace tells who is online
when a round starts (fed.heterogeneity.behavior_trace). Rounds follow each other without a gap, so the
clock after round r is the sum of the rounds' lengths: accuracy against it is time to accuracy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec


class ClockPart:
    """What one axis plays on the virtual clock; each hook's default does nothing."""

    def round(self, users: np.ndarray, records: np.ndarray) -> tuple[float, np.ndarray] | None:
        """One round in which ``users`` are each asked for ``records`` records: its virtual length and which of
        them are late (None: this part does not time rounds)."""
        return None


class VirtualClock:
    """Virtual seconds since the run started, and each axis's part on the clock, by axis name.

    Parameters
    ----------
    parts:
        Each axis's :class:`ClockPart`, by axis name.
    """

    def __init__(self, parts: dict[str, ClockPart]) -> None:
        self.parts = parts
        self.now = 0.0

    @classmethod
    def start(cls, spec: RunSpec, dim: int) -> VirtualClock | None:
        """The clock of ``spec``'s rounds, with ``dim`` values per report (what each released record uploads); None
        when no axis plays on a clock (e.g. without --device-speed). Reads the files the axes name (ValueError):
        simulation only, on the server."""
        parts = {}
        for axis, setting in spec.heterogeneity.active():
            part = axis.on_clock(setting, spec, dim)
            if part is not None:
                parts[axis.name] = part
        return cls(parts) if parts else None

    def run_round(self, users: np.ndarray, records: np.ndarray) -> np.ndarray:
        """Play one round in which ``users`` are each asked for ``records`` records: advance the clock
        and return which of them are late."""
        late = np.zeros(len(users), dtype=bool)
        for part in self.parts.values():
            played = part.round(users, records)
            if played is not None:
                duration, part_late = played
                self.now += duration
                late |= part_late
        return late
