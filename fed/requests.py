"""Validation of what the server asks a user to release.

The server is untrusted: every field of a request is checked before anything is computed,
so a malformed or hostile request releases nothing and spends no budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class RequestRefused(ValueError):
    """A request the user will not serve; the message names the problem."""


@dataclass(frozen=True)
class ClientLimits:
    """What a user accepts, set on the user's side.

    Parameters
    ----------
    min_noise_multiplier:
        The user's noise floor: sigma / sensitivity below this is refused.
    max_clip:
        Largest clipping radius accepted.
    max_records:
        Largest number of records one request may ask of one user.
    max_users:
        Largest number of users one request may address.
    """

    min_noise_multiplier: float
    max_clip: float = 100.0
    max_records: int = 100_000
    max_users: int = 1_000_000


@dataclass(frozen=True)
class ReleaseRequest:
    """A validated request: which users release how many records at which noise."""

    users: tuple[int, ...]
    clip: float
    sigma: float
    records: int


def parse_release_request(config: Mapping[str, Any], limits: ClientLimits) -> ReleaseRequest:
    """Check a raw request against the user's limits; RequestRefused on any problem."""
    users = config.get("users")
    if not isinstance(users, (list, tuple)) or not users:
        raise RequestRefused("'users' must be a non-empty list of user ids")
    if len(users) > limits.max_users:
        raise RequestRefused(f"'users' lists {len(users)} users, more than {limits.max_users}")
    if not all(isinstance(u, int) and not isinstance(u, bool) and u >= 0 for u in users):
        raise RequestRefused("'users' must hold non-negative integers")
    clip = _finite(config, "clip")
    sigma = _finite(config, "sigma")
    if not 0 < clip <= limits.max_clip:
        raise RequestRefused(f"'clip' must lie in (0, {limits.max_clip}], got {clip}")
    if sigma <= 0:
        raise RequestRefused(f"'sigma' must be positive, got {sigma}")
    floor = limits.min_noise_multiplier * 2 * clip
    if sigma < floor * (1 - 1e-9):
        raise RequestRefused(
            f"'sigma' {sigma:.6g} is below this user's noise floor {floor:.6g} for clip {clip}"
        )
    records = config.get("records")
    if not isinstance(records, int) or isinstance(records, bool):
        raise RequestRefused("'records' must be an integer (0 means all with budget left)")
    if not 0 <= records <= limits.max_records:
        raise RequestRefused(f"'records' must lie in [0, {limits.max_records}], got {records}")
    return ReleaseRequest(users=tuple(users), clip=clip, sigma=sigma, records=records)


def _finite(config: Mapping[str, Any], key: str) -> float:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestRefused(f"'{key}' must be a number, got {value!r}")
    if not math.isfinite(value):
        raise RequestRefused(f"'{key}' must be finite, got {value!r}")
    return float(value)
