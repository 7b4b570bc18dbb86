"""The virtual time of a simulated run: who is online when a round starts, who is late, how long rounds last.

Built from --device-speed (each user's answer time, fed.device_speed), --behavior-trace (when each
user is online, fed.behavior_trace) and --deadline. Rounds follow each other without a gap, so
the clock after round r is the sum of the rounds' lengths: accuracy against it is time to accuracy.
"""

from __future__ import annotations

import numpy as np

from fed.behavior_trace import BehaviorTrace
from fed.config import RunConfig
from fed.device_speed import DeviceSpeed, round_duration


class VirtualClock:
    """Virtual seconds since the run started, and the simulated users' speed and availability.

    Parameters
    ----------
    config:
        The run's options (needs --device-speed).
    dim:
        Values per report (what each released record uploads).
    """

    def __init__(self, config: RunConfig, dim: int) -> None:
        if not config.virtual_clock:
            raise ValueError("a virtual clock needs --device-speed")
        self.speed = DeviceSpeed(config.device_speed)
        self.ms_per_record, self.kbps = self.speed.per_user(config.users, config.seed)
        self.trace = BehaviorTrace.load(config.behavior_trace, config.users, config.seed) if config.behavior_trace else None
        self.deadline = float(config.deadline)
        self.dim = dim
        self.now = 0.0

    def online(self) -> np.ndarray | None:
        """Which users are online now, by user id (None: the trace does not restrict anyone)."""
        return None if self.trace is None else self.trace.active(self.now)

    def run_round(self, users: np.ndarray, records: np.ndarray) -> np.ndarray:
        """Play one round in which ``users`` are each asked for ``records`` records: advance the clock
        and return which of them are late (past the deadline)."""
        seconds = self.speed.seconds(self.ms_per_record[users], self.kbps[users], records, self.dim)
        duration, late = round_duration(seconds, self.deadline)
        self.now += duration
        return late
