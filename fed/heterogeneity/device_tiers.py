"""Device tiers: groups of simulated users whose devices run the encoder with a cheaper setting.

``--device-tiers "0.7:256,0.3:32"`` (share:tokens): 70% of the users encode their sentences with the
encoder reading at most 256 tokens, 30% at most 32 (a slower phone truncating harder). Every user
still releases through the run's randomizer and projection; only its clean encodings differ, and
results are reported per device tier (users.csv column ``device_tier``, groups.md). Which user is
in which tier is drawn from the run seed (fed.heterogeneity.shares), so server and nodes agree.

Simulation only: a real device runs the encoder its owner approved, with its own setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfed.fed.heterogeneity.axis import HeterogeneityAxis
from ldpfed.fed.heterogeneity.shares import assign_shares, parse_shares
from ldpfed.fed.configuration.option import Option

DEVICE_STREAM = 16
"""Seed tag of the device-tier assignment."""


@dataclass(frozen=True)
class DeviceTiers:
    """Each tier's share of the users and the most tokens its devices' encoder reads."""

    shares: tuple[float, ...]
    max_tokens: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str) -> "DeviceTiers":
        """``"0.7:256,0.3:32"`` (share:tokens, shares summing to 1); ValueError naming the problem."""
        pairs = parse_shares(spec, "--device-tiers", "tokens", _tokens)
        return cls(tuple(share for share, _ in pairs), tuple(int(tokens) for _, tokens in pairs))

    def assign(self, users: int, seed: int) -> np.ndarray:
        """Each user's device tier index, by user id."""
        return assign_shares(list(self.shares), users, seed, DEVICE_STREAM)

    @property
    def names(self) -> tuple[str, ...]:
        """Each tier's name in reports."""
        return tuple(f"{tokens} tokens" for tokens in self.max_tokens)


def _tokens(text: str) -> int:
    """A tier's token limit: an integer of at least 2."""
    try:
        tokens = int(text)
    except ValueError:
        tokens = 0
    if tokens < 2:
        raise ValueError(f"a device tier's encoder reads an integer number of tokens, at least 2; got {text!r}")
    return tokens


class DeviceTierAxis(HeterogeneityAxis):
    """The device-tier axis (--device-tiers): each tier's devices encode reading at most its tokens."""

    name = "device tier"
    options = (
        Option(
            "device_tiers", str, "",
            "device tiers as share:tokens pairs, e.g. '0.7:256,0.3:32': each share of the users (drawn by --seed) "
            "encodes with the encoder reading at most that many tokens (a cheaper device), reported per tier "
            "(simulation only). Empty: every user runs the encoder as shipped",
        ),
    )

    def parse(self, values: Mapping[str, Any]) -> DeviceTiers | None:
        """The parsed --device-tiers (None: none)."""
        return DeviceTiers.parse(values["device_tiers"]) if values["device_tiers"] else None

    def assign(self, setting: DeviceTiers, users: int, seed: int) -> np.ndarray:
        """Each user's device tier (:meth:`DeviceTiers.assign`)."""
        return setting.assign(users, seed)

    def group_names(self, setting: DeviceTiers) -> tuple[str, ...]:
        """Each tier's token limit."""
        return setting.names

    def encoding(self, setting: DeviceTiers, group: int) -> dict[str, Any]:
        """Tier ``group``'s devices read at most its tokens."""
        return {"max_tokens": setting.max_tokens[group]}
