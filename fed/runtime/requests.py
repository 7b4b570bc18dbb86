"""Validation of what the server asks a user to release.

The server is untrusted: every field of a request is checked before anything is computed,
so a malformed or hostile request releases nothing and spends no budget.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.randomizers.base import RANDOMIZERS, Randomizer, make_randomizer
from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.refusals import Refusal, RequestRefused

__all__ = ["ClientLimits", "Refusal", "ReleaseRequest", "RequestRefused", "parse_release_request"]

MAX_PARAMS_CHARS = 10_000


@dataclass(frozen=True)
class ClientLimits:
    """What a user accepts, set on the user's side.

    Parameters
    ----------
    max_release_epsilon:
        The user's floor on noise, as the most one release of one record may cost
        (epsilon at ``delta``).
    min_release_epsilon:
        The least one release of one record may cost (a device's policy, fed.device.policy: a noisier
        request would take one of the ledger's distinct-event slots for next to nothing).
    delta:
        The delta at which release costs are measured.
    max_records:
        Largest number of records one request may ask of one user.
    max_users:
        Largest number of users one request may address.
    sampling:
        The run's sampling spec for this kind of release; a request must name the same one
        (an absent ``sampling`` field means ``all``).
    pinned:
        (name, value) of randomizer parameters a request must give exactly so (the user's own
        plan's :attr:`~fed.randomizers.base.Randomizer.pinned` parameters).
    max_dim:
        Largest value a request may give a randomizer's
        :attr:`~fed.randomizers.base.Randomizer.size_params` (checked before it is built).
    """

    max_release_epsilon: float
    delta: float
    max_records: int = 100_000
    max_users: int = 100_000
    sampling: str = "all"
    pinned: tuple[tuple[str, Any], ...] = ()
    max_dim: int = 1 << 20
    min_release_epsilon: float = 0.0


@dataclass(frozen=True)
class ReleaseRequest:
    """A validated request: which users release how many records through which randomizer."""

    users: tuple[int, ...]
    randomizer: Randomizer
    records: int
    sampling: str = "all"
    summarise: bool = False
    """Send the sums of the decoded reports (fed.learning.report_sums) instead of the reports: post-processing."""


def parse_release_request(config: Mapping[str, Any], limits: ClientLimits) -> ReleaseRequest:
    """Check a raw request against the user's limits; RequestRefused on any problem."""
    users = config.get("users")
    if not isinstance(users, (list, tuple)) or not users:
        raise RequestRefused("'users' must be a non-empty list of user ids")
    if len(users) > limits.max_users:
        raise RequestRefused(f"'users' lists {len(users)} users, more than {limits.max_users}")
    if not all(isinstance(u, int) and not isinstance(u, bool) and u >= 0 for u in users):
        raise RequestRefused("'users' must hold non-negative integers")
    seen: set[int] = set()
    for user in users:  # each repetition would be served again (memoized reports: 10,000 times for free)
        if user in seen:
            raise RequestRefused(f"'users' names user {user} twice; a request names each user once")
        seen.add(user)
    records = config.get("records")
    if not isinstance(records, int) or isinstance(records, bool):
        raise RequestRefused("'records' must be an integer (0 means all with budget left)")
    if not 0 <= records <= limits.max_records:
        raise RequestRefused(f"'records' must lie in [0, {limits.max_records}], got {records}")
    sampling = config.get("sampling", "all")
    if not isinstance(sampling, str) or len(sampling) > 200:
        raise RequestRefused("'sampling' must be a short string")
    if sampling != limits.sampling:
        raise RequestRefused(f"'sampling' {sampling!r} is not this run's sampling {limits.sampling!r}")
    if records and not sampling.startswith("all"):
        raise RequestRefused(f"'records' must be 0 with sampling {sampling!r} (the sampling sets the count)")
    summarise = config.get("summarise", False)
    if not isinstance(summarise, bool):
        raise RequestRefused("'summarise' must be true or false")
    randomizer = _randomizer(config.get("randomizer"), limits.max_dim)
    params = randomizer.params()
    for key, value in limits.pinned:  # before anything could load what a pinned parameter names
        if params.get(key) != value:
            raise RequestRefused(f"{params['mechanism']}: '{key}' must be this user's own {value!r}, got {params.get(key)!r}"[:300], Refusal.POLICY)
    cost = compose_epsilon({randomizer.event: 1}, limits.delta)
    if cost > limits.max_release_epsilon * (1 + 1e-9):
        raise RequestRefused(
            f"one release through {randomizer.params()} costs epsilon {cost:.4g}, above this "
            f"user's floor of {limits.max_release_epsilon:.4g} per release (noise too low)",
            Refusal.POLICY,
        )
    if cost < limits.min_release_epsilon * (1 - 1e-9):
        raise RequestRefused(texts.below_least_cost(randomizer.params(), cost, limits.min_release_epsilon), Refusal.POLICY)
    return ReleaseRequest(users=tuple(users), randomizer=randomizer, records=records, sampling=sampling, summarise=summarise)


def _randomizer(raw: Any, max_dim: int) -> Randomizer:
    if not isinstance(raw, str) or len(raw) > MAX_PARAMS_CHARS:
        raise RequestRefused(f"'randomizer' must be a JSON string of at most {MAX_PARAMS_CHARS} characters")
    try:
        params = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as error:
        raise RequestRefused(f"'randomizer' is not valid JSON: {error}") from None
    except RecursionError:
        raise RequestRefused("'randomizer' is nested too deeply to be a randomizer's parameters") from None
    if not isinstance(params, dict):
        raise RequestRefused("'randomizer' must be a JSON object")
    mechanism = params.get("mechanism")
    for name in RANDOMIZERS[mechanism].size_params if isinstance(mechanism, str) and mechanism in RANDOMIZERS else ():
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > max_dim:
            raise RequestRefused(
                f"{mechanism}: '{name}' {str(value)[:30]} is above this device's limit of {max_dim} (policy: max_dim)",
                Refusal.POLICY,
            )
    for key, value in params.items():  # a JSON integer has any number of digits
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
            raise RequestRefused(f"'randomizer' refused: '{str(key)[:50]}' is an integer of {value.bit_length()} bits, beyond the float range")
    try:
        randomizer = make_randomizer(params)
    except (ValueError, TypeError) as error:
        raise RequestRefused(f"'randomizer' refused: {error}") from None
    try:  # finite parameters whose event leaves the floats (clip 1e308: sensitivity 2e308 = inf)
        randomizer.event, randomizer.user_event
    except (ValueError, OverflowError) as error:
        shown = {k: v for k, v in params.items() if k != "mechanism"}
        raise RequestRefused(
            f"'randomizer' refused: {mechanism} with {str(shown)[:200]} states no finite privacy event ({error})"
        ) from None
    return randomizer


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not an accepted number")
