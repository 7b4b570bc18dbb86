"""The virtual time of a simulated run: who is online when a round starts, who is late, how long rounds last.

Built from --device-speed (each user's answer time, fed.heterogeneity.device_speed), --behavior-trace (when each
user is online, fed.heterogeneity.behavior_trace) and --deadline. Rounds follow each other without a gap, so
the clock after round r is the sum of the rounds' lengths: accuracy against it is time to accuracy.
"""

from __future__ import annotations

import numpy as np

from fed.heterogeneity.behavior_trace import BehaviorTrace, BehaviorTraceAxis
from fed.heterogeneity.device_speed import DeviceSpeedAxis, round_duration
from fed.spec.run_spec import RunSpec


class VirtualClock:
    """Virtual seconds since the run started, and the simulated users' speed and availability.

    Parameters
    ----------
    spec:
        The run (needs --device-speed).
    dim:
        Values per report (what each released record uploads).
    """

    def __init__(self, spec: RunSpec, dim: int) -> None:
        setting = spec.heterogeneity.setting(DeviceSpeedAxis.name)
        if setting is None:
            raise ValueError("a virtual clock needs --device-speed")
        users, seed = spec.data.users, spec.seed
        self.speed = setting.speed
        self.ms_per_record, self.kbps = self.speed.per_user(users, seed)
        trace = spec.heterogeneity.setting(BehaviorTraceAxis.name)
        self.trace = BehaviorTrace.load(trace, users, seed) if trace else None
        self.deadline = setting.deadline
        self.dim = dim
        self.now = 0.0

    @staticmethod
    def runs(spec: RunSpec) -> bool:
        """Whether ``spec``'s rounds run on a virtual clock (--device-speed given: simulation only)."""
        return spec.heterogeneity.setting(DeviceSpeedAxis.name) is not None

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
