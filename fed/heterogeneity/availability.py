"""Which simulated users are online in a round: a per-user probability of answering, and dropout for good.

``--availability 0.8`` puts every user online in a round with probability 0.8;
``--availability beta:2:1`` gives each user its own probability, drawn once from Beta(2, 1) (a few
users rarely online, most often). ``--dropout 0.1``: after each round, every user still present
leaves for good with probability 0.1 (in round r a user is present with probability 0.9^(r-1)).

The server of a simulation plays the network: a user offline in a round is not reachable, so it is
never asked, releases nothing and spends nothing. Every draw comes from the run seed, so a run is
reproducible. Simulation only: real devices are online or not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.configuration.option import Option

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock

PROBABILITY_STREAM, ONLINE_STREAM, DROPOUT_STREAM = 11, 12, 13
"""Seed tags of the per-user probabilities, the per-round coins and the dropout rounds."""


@dataclass(frozen=True)
class Availability:
    """Per-user probability of being online in a round (``spec``), and the per-round dropout rate."""

    spec: str = "1"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        self.beta  # validates spec
        if not (math.isfinite(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"--dropout must lie in [0, 1), got {self.dropout!r}")

    @property
    def beta(self) -> tuple[float, float] | None:
        """(a, b) of ``beta:a:b``, or None for one probability shared by every user."""
        kind, _, rest = self.spec.partition(":")
        if kind != "beta":
            try:
                p = float(self.spec)
            except ValueError:
                p = math.nan
            if not 0 < p <= 1:
                raise ValueError(f"--availability must be a probability in (0, 1] or beta:<a>:<b>, got {self.spec!r}")
            return None
        try:
            a, b = (float(v) for v in rest.split(":"))
        except ValueError:
            a = b = math.nan
        if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
            raise ValueError(f"--availability beta:<a>:<b> needs two positive numbers, got {self.spec!r}")
        return a, b

    @property
    def always(self) -> bool:
        """Whether every user is online in every round."""
        return self.spec in ("1", "1.0") and self.dropout == 0

    def probabilities(self, users: int, seed: int) -> np.ndarray:
        """Each user's probability of being online in a round, by user id."""
        beta = self.beta
        if beta is None:
            return np.full(users, float(self.spec))
        return np.random.default_rng([seed, PROBABILITY_STREAM]).beta(*beta, size=users)

    def last_rounds(self, users: int, seed: int) -> np.ndarray:
        """The last round each user is present in, by user id (rounds count from 1; no dropout: never leaves)."""
        if self.dropout == 0:
            return np.full(users, np.iinfo(np.int64).max, dtype=np.int64)
        return np.random.default_rng([seed, DROPOUT_STREAM]).geometric(self.dropout, size=users).astype(np.int64)

    def online(self, users: int, server_round: int, seed: int) -> np.ndarray:
        """Which users are online in ``server_round``, by user id (the same for a given seed and round)."""
        coins = np.random.default_rng([seed, ONLINE_STREAM, server_round]).random(users)
        return (coins < self.probabilities(users, seed)) & (server_round <= self.last_rounds(users, seed))


class AvailabilityAxis(HeterogeneityAxis):
    """The availability axis (--availability, --dropout): the simulated network reaches only online users."""

    name = "availability"
    options = (
        Option(
            "availability", str, "1",
            "simulated users' availability: each is online in a round with this probability (e.g. 0.8), or with its "
            "own probability drawn from Beta(a, b) (beta:<a>:<b>); an offline user is not asked, releases nothing and "
            "spends nothing (simulation only)",
        ),
        Option("dropout", float, 0.0, "after each round, each simulated user still present leaves for good with this probability (0: nobody leaves)"),
    )

    def parse(self, values: Mapping[str, Any]) -> Availability:
        """The parsed --availability and --dropout (always a setting: by default everyone is online)."""
        return Availability(values["availability"], float(values["dropout"]))

    participation_groups = ("took part", "never took part")
    """The report groups of users that answered at least one training request, and of those that never did."""

    def participation(self, took_part: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
        """Each user's group among the :attr:`participation_groups` that have users, and those groups' names."""
        code = np.where(took_part, 0, 1)
        present = [c for c in (0, 1) if (code == c).any()]
        lookup = np.full(2, -1, dtype=np.int64)
        lookup[present] = np.arange(len(present))
        return lookup[code], tuple(self.participation_groups[c] for c in present)

    def online(self, setting: Availability, spec: "RunSpec", server_round: int, clock: "VirtualClock | None") -> np.ndarray | None:
        """The users online in ``server_round`` (None when everyone always is)."""
        if setting.always:
            return None
        return setting.online(spec.data.users, server_round, spec.seed)
