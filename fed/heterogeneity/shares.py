"""Shares of the simulated users, each with a value of its own (privacy tiers, device tiers).

A spec such as ``"0.5:1,0.3:3,0.2:8"`` lists share:value pairs; the shares sum to one and each
share's users are drawn by a seeded permutation, so the server and every simulated node derive
the same assignment from the run seed alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def parse_shares(spec: str, option: str, what: str, value: Callable[[str], float]) -> list[tuple[float, float]]:
    """``spec``'s (share, value) pairs, in the order given; ValueError naming ``option`` and the problem.

    ``value`` converts one value's text (ValueError if it is not one); the values must differ.
    """
    pairs = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        share, sep, text = item.partition(":")
        try:
            fraction = float(share)
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"{option}: expected share:{what} pairs separated by commas, got {item!r}")
        if not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise ValueError(f"{option}: a share must lie in (0, 1], got {share!r} in {item!r}")
        try:
            pairs.append((fraction, value(text)))
        except ValueError as error:
            raise ValueError(f"{option}: {error} in {item!r}") from None
    if not pairs:
        raise ValueError(f"{option}: give at least one share:{what} pair")
    total = sum(share for share, _ in pairs)
    if abs(total - 1) > 1e-6:
        raise ValueError(f"{option}: the shares must sum to 1, got {total:g}")
    values = [v for _, v in pairs]
    if len(set(values)) != len(values):
        raise ValueError(f"{option}: each share needs its own {what}, got {values} (merge shares with equal {what})")
    return pairs


def share_counts(shares: list[float], users: int) -> np.ndarray:
    """Users per share: the shares of ``users`` rounded by largest remainder (they sum to ``users``)."""
    exact = np.array(shares) * users
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: users - int(counts.sum())]] += 1
    return counts


def assign_shares(shares: list[float], users: int, seed: int, stream: int) -> np.ndarray:
    """Each user's share index, by user id: :func:`share_counts` users per share, placed by a seeded
    permutation (``stream`` keeps it apart from the run's other draws)."""
    order = np.random.default_rng([seed, stream]).permutation(users)
    assigned = np.empty(users, dtype=np.int64)
    assigned[order] = np.repeat(np.arange(len(shares)), share_counts(shares, users))
    return assigned
