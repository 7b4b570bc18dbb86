"""When simulated users are online, from a FedScale availability trace, on the run's virtual clock.

A FedScale behaviour trace maps a client id to {'active': [s], 'inactive': [s], 'finish_time': s}:
the client is online from each active[i] to inactive[i], and the pattern repeats every
finish_time seconds. Each user follows one trace client, drawn by the run seed; a user is online
in a round if its client is active when the round starts (virtual seconds, fed.heterogeneity.virtual_clock).
Simulation only, and combined with --availability and --dropout (online needs all three).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.heterogeneity.device_speed import VIRTUAL_CLOCK_NEEDED, DeviceSpeedAxis
from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.configuration.option import Option
from ldpfed.fed.heterogeneity.trace_files import read_trace
from ldpfed.fed.heterogeneity.virtual_clock import ClockPart

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock

BEHAVIOR_STREAM = 15
"""Seed tag of the users' trace clients."""


@dataclass(frozen=True)
class BehaviorTrace(ClockPart):
    """The online intervals of every user, by user id (the axis's part on the virtual clock)."""

    starts: list[np.ndarray]
    ends: list[np.ndarray]
    periods: np.ndarray

    @classmethod
    def load(cls, path: str, users: int, seed: int) -> "BehaviorTrace":
        """Read a FedScale behaviour trace and give each user one of its clients (ValueError names what is wrong)."""
        trace = read_trace(path)
        clients = []
        for client in sorted(trace, key=str):
            entry = trace[client]
            try:
                active = np.asarray(entry["active"], dtype=np.float64)
                inactive = np.asarray(entry["inactive"], dtype=np.float64)
                period = float(entry["finish_time"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"trace {path}: client {client!r} needs 'active', 'inactive' and 'finish_time'") from None
            if active.ndim != 1 or active.shape != inactive.shape or not (0 < period < math.inf):
                raise ValueError(
                    f"trace {path}: client {client!r} needs as many 'active' as 'inactive' times and a positive 'finish_time'"
                )
            clients.append((active, inactive, period))
        chosen = np.random.default_rng([seed, BEHAVIOR_STREAM]).integers(0, len(clients), size=users)
        return cls(
            [clients[i][0] for i in chosen], [clients[i][1] for i in chosen], np.array([clients[i][2] for i in chosen])
        )

    def active(self, seconds: float) -> np.ndarray:
        """Which users are online at virtual time ``seconds``, by user id."""
        times = seconds % self.periods
        return np.array([bool(np.any((s <= t) & (t <= e))) for s, e, t in zip(self.starts, self.ends, times)])


class BehaviorTraceAxis(HeterogeneityAxis):
    """The behaviour-trace axis (--behavior-trace): a user is online when its trace client is active at the
    round's virtual start (the trace is read by the server's virtual clock, never by a node)."""

    name = "behavior trace"
    options = (
        Option(
            "behavior_trace", str, "",
            "FedScale availability trace file (pickle or JSON; each user follows one of its clients): a user is online "
            "in a round only if its client is active at the round's virtual start. Needs --device-speed",
            file=True,
        ),
    )

    def parse(self, values: Mapping[str, Any]) -> str | None:
        """The trace file's path (None: no trace); read where it is used, by a simulation's server."""
        return values["behavior_trace"] or None

    def check(self, setting: str, spec: "RunSpec") -> None:
        """The trace runs on the virtual clock."""
        if spec.heterogeneity.setting(DeviceSpeedAxis.name) is None:
            raise ValueError(VIRTUAL_CLOCK_NEEDED)

    def on_clock(self, setting: str, spec: "RunSpec", dim: int) -> BehaviorTrace:
        """The trace, read here, with each user's client drawn from the seed."""
        return BehaviorTrace.load(setting, spec.data.users, spec.seed)

    def online(self, setting: str, spec: "RunSpec", server_round: int, clock: "VirtualClock | None") -> np.ndarray | None:
        """The users whose trace client is active now on the run's clock."""
        return None if clock is None else clock.parts[self.name].active(clock.now)
