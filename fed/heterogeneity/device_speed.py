"""Simulated device speed: how long each user takes to answer a round, for stragglers and a virtual clock.

``--device-speed lognormal:<ms>:<skew>:<kbps>``: each user's encoding latency per record is
``ms`` times a draw from LogNormal(0, skew), drawn once per user (FedScale's lognormal device
model), and every user uploads at ``kbps``. ``--device-speed PATH``: a FedScale device-capacity
trace (client id -> {'computation': ms per sample, 'communication': kbps}); each user takes the
capacity of one trace client, drawn by the run seed. A user's answer takes the encoding of the
records it is asked for plus the upload of their reports (32-bit floats); the model download
is left out, as it is the same for every user.

With ``--deadline D`` a user whose answer takes longer than D virtual seconds is a straggler:
it is asked, releases and spends as any user (its report leaves the device), but arrives too
late and the server leaves it out. A round lasts until its last on-time answer, or until the
deadline when someone is late. Simulation only: a device's own time is real time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.configuration.option import Option
from ldpfed.fed.heterogeneity.trace_files import read_trace
from ldpfed.fed.heterogeneity.virtual_clock import ClockPart

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec

SPEED_STREAM = 14
"""Seed tag of the per-user speed draws."""
BITS_PER_VALUE = 32


@dataclass(frozen=True)
class DeviceSpeed:
    """Each user's encoding latency (ms per record) and upload bandwidth (kbit/s), from ``spec``."""

    spec: str

    def __post_init__(self) -> None:
        self.lognormal  # validates a lognormal spec; a trace file is read only when used

    @property
    def lognormal(self) -> tuple[float, float, float] | None:
        """(ms, skew, kbps) of a lognormal spec; None for a trace file.

        Checks the text alone: run options also reach nodes, which must not open files a
        server names (a trace is read where it is used, by the server of a simulation).
        """
        kind, _, rest = self.spec.partition(":")
        if kind != "lognormal":
            return None
        try:
            ms, skew, kbps = (float(v) for v in rest.split(":"))
        except ValueError:
            ms = skew = kbps = math.nan
        if not (ms > 0 and skew >= 0 and kbps > 0 and all(map(math.isfinite, (ms, skew, kbps)))):
            raise ValueError(
                f"--device-speed lognormal:<ms>:<skew>:<kbps> needs ms > 0, skew >= 0 and kbps > 0, got {self.spec!r}"
            )
        return ms, skew, kbps

    @cached_property
    def source(self) -> tuple[float, float, float] | dict:
        """(ms, skew, kbps) of a lognormal spec, or the capacity trace's entries (read here)."""
        lognormal = self.lognormal
        if lognormal is not None:
            return lognormal
        if not Path(self.spec).is_file():
            raise ValueError(f"--device-speed must be lognormal:<ms>:<skew>:<kbps> or a FedScale capacity trace file, got {self.spec!r}")
        trace = read_trace(self.spec)
        for client, entry in trace.items():
            values = [entry.get("computation"), entry.get("communication")]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf for v in values):
                raise ValueError(
                    f"trace {self.spec}: client {client!r} needs positive 'computation' (ms per sample) and "
                    f"'communication' (kbps), got {entry!r}"
                )
        return trace

    def per_user(self, users: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(ms per record, kbps) of every user, by user id."""
        rng = np.random.default_rng([seed, SPEED_STREAM])
        source = self.source
        if isinstance(source, tuple):
            ms, skew, kbps = source
            return ms * rng.lognormal(0.0, skew, size=users), np.full(users, kbps)
        entries = [source[key] for key in sorted(source, key=str)]
        chosen = rng.integers(0, len(entries), size=users)
        return (
            np.array([float(entries[i]["computation"]) for i in chosen]),
            np.array([float(entries[i]["communication"]) for i in chosen]),
        )

    def seconds(self, ms_per_record: np.ndarray, kbps: np.ndarray, records: np.ndarray, dim: int) -> np.ndarray:
        """Seconds each user takes to encode ``records`` records and upload their ``dim``-value reports."""
        records = np.asarray(records, dtype=np.float64)
        return records * ms_per_record / 1000 + records * dim * BITS_PER_VALUE / 1000 / kbps


def round_duration(seconds: np.ndarray, deadline: float) -> tuple[float, np.ndarray]:
    """A round's virtual length and which users are late, given each asked user's answer time.

    Without a deadline (0) nobody is late and the round waits for the slowest; with one, the round
    ends at the last on-time answer, or at the deadline when someone is late.
    """
    late = seconds > deadline if deadline > 0 else np.zeros(len(seconds), dtype=bool)
    if late.any():
        return float(deadline), late
    return float(seconds.max(initial=0.0)), late


@dataclass(frozen=True)
class ClockSetting:
    """The run's device speed and the deadline of a round (virtual seconds; 0: none)."""

    speed: DeviceSpeed
    deadline: float


class RoundTimes(ClockPart):
    """Device speed on the virtual clock: each user's answer time, the rounds' lengths and the stragglers.

    Parameters
    ----------
    setting:
        The run's device speed and deadline.
    users, seed:
        The run's users (speeds are drawn once per user id) and seed.
    dim:
        Values per report (what each released record uploads).
    """

    def __init__(self, setting: ClockSetting, users: int, seed: int, dim: int) -> None:
        self.speed = setting.speed
        self.ms_per_record, self.kbps = self.speed.per_user(users, seed)
        self.deadline = setting.deadline
        self.dim = dim

    def round(self, users: np.ndarray, records: np.ndarray) -> tuple[float, np.ndarray]:
        """The round's length and which of ``users`` answer past the deadline (:func:`round_duration`)."""
        return round_duration(self.speed.seconds(self.ms_per_record[users], self.kbps[users], records, self.dim), self.deadline)


class DeviceSpeedAxis(HeterogeneityAxis):
    """The device-speed axis (--device-speed, --deadline): users' answer times on a virtual clock, stragglers
    left out by the server (fed.heterogeneity.virtual_clock)."""

    name = "device speed"
    options = (
        Option(
            "device_speed", str, "",
            "simulated device speed, which starts a virtual clock: lognormal:<ms>:<skew>:<kbps> (each user's encoding "
            "ms per record drawn once, FedScale's lognormal model; upload kbit/s) or a FedScale device-capacity trace "
            "file (pickle or JSON). Empty: no clock",
            file=True,
        ),
        Option(
            "deadline", float, 0.0,
            "virtual seconds a round waits for answers (needs --device-speed): slower users are stragglers, who "
            "release and spend but whose late reports the server leaves out. 0: wait for everyone",
        ),
    )

    def parse(self, values: Mapping[str, Any]) -> ClockSetting | None:
        """The parsed --device-speed and --deadline (None: no virtual clock)."""
        speed = DeviceSpeed(values["device_speed"]) if values["device_speed"] else None
        deadline = values["deadline"]
        if not (math.isfinite(deadline) and deadline >= 0):
            raise ValueError(f"--deadline must be a number of virtual seconds >= 0 (0: none), got {deadline!r}")
        if deadline and speed is None:
            raise ValueError(VIRTUAL_CLOCK_NEEDED)
        return None if speed is None else ClockSetting(speed, float(deadline))

    def on_clock(self, setting: ClockSetting, spec: "RunSpec", dim: int) -> RoundTimes:
        """Times the rounds: each user's speed drawn from the seed (a capacity trace is read here)."""
        return RoundTimes(setting, spec.data.users, spec.seed, dim)


VIRTUAL_CLOCK_NEEDED = "--deadline and --behavior-trace run on the virtual clock: give --device-speed too"
