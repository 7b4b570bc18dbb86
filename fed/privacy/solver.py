"""The one root solver behind every calibration: where a monotone cost meets its budget, on the private side.

Every calibration asks for one number (a noise scale, a privacy parameter, a GDP mu, a number
of steps) at which a monotone cost meets a target. :func:`within` finds it the same way for all:
a geometric bracket grown from a starting guess (or from a known end, ``floor``), SciPy's Brent
method inside it, then a check of the answer itself: a float root may land a hair on the wrong
side, so the answer steps toward the bracket's verified end until its cost is within the target.
The answer is never one whose cost exceeds the target; it is within the solve's tolerance of the
exact boundary. :func:`least_integer` does the same over the integers, by bisection.

SciPy is imported on use: a device message that calibrates nothing never loads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

MAX_STEPS = 60
"""Most steps toward the verified end of the bracket after the root (each doubles the last)."""


def within(
    cost: Callable[[float], float],
    budget: float,
    start: float,
    *,
    increasing: bool,
    floor: float | None = None,
    growth: float = 2.0,
    rel_tol: float = 1e-6,
    xtol: float | None = None,
    low: float = 1e-15,
    high: float = 1e15,
    name: str = "the parameter",
) -> float:
    """The x nearest the boundary of {x > 0: cost(x) <= budget} for a monotone ``cost``, inside that set.

    Parameters
    ----------
    cost:
        Non-decreasing in x (``increasing``; the answer is then the largest x within budget)
        or non-increasing (the answer is then the smallest x within budget).
    budget:
        The target the cost must not exceed.
    start:
        A positive first guess; the bracket grows from it by the factor ``growth``.
    floor:
        A known lower end of the bracket (e.g. 0), checked once; then only the upper end grows.
    rel_tol, xtol:
        Brent's relative and absolute tolerance (``xtol`` default: ``rel_tol`` times the bracket's lower end).
    low, high:
        Where the search gives up: a target no x above ``low`` (``increasing``) or below ``high``
        (non-increasing) meets is a ValueError naming ``name``; one that every x up to ``high``
        (``increasing``) meets returns the largest x probed.
    """
    inside = lambda x: cost(x) <= budget  # noqa: E731
    lo, hi = _bracket(inside, float(start), increasing, floor, growth, low, high, name)
    if lo == hi:  # the answer is an end of the search: every x probed is within the budget
        return lo
    from scipy.optimize import brentq  # SciPy on use: device messages calibrate nothing

    tol = rel_tol * (lo if lo > 0 else hi) if xtol is None else xtol
    x = float(brentq(lambda v: cost(v) - budget, lo, hi, xtol=tol, rtol=rel_tol, maxiter=200))
    step = max(rel_tol, tol / abs(x)) if x else rel_tol
    return _step_inside(inside, x, lo if increasing else hi, step)


def nudge(cost: Callable[[float], float], budget: float, x: float, *, increasing: bool, step: float = 1e-9) -> float:
    """``x`` moved away from the boundary (down where ``cost`` increases, up where it decreases) by
    relative steps ``step``, ``2 step``, ... until ``cost(x) <= budget``: a second check of a solved
    value against a finer figure (e.g. a PLD at its reported discretization)."""
    for attempt in range(MAX_STEPS):
        if cost(x) <= budget:
            return x
        x *= 1 - step * 2**attempt if increasing else 1 + step * 2**attempt
    raise RuntimeError("calibration did not converge")


def least_integer(ok: Callable[[int], bool], lo: int, hi: int, *, grow: bool = False) -> int:
    """Smallest n in (lo, hi] with ``ok(n)``, for ``ok`` False below some n and True from it on.

    ``ok(lo)`` is taken to be False. With ``grow``, ``hi`` is doubled until ``ok(hi)``;
    without, ``ok(hi)`` is taken to be True. Bisection: O(log(hi - lo)) calls of ``ok``.
    """
    if grow:
        while not ok(hi):
            lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _bracket(
    inside: Callable[[float], bool],
    start: float,
    increasing: bool,
    floor: float | None,
    growth: float,
    low: float,
    high: float,
    name: str,
) -> tuple[float, float]:
    """(lo, hi) with ``inside`` differing at the two ends, or (x, x) where every x probed is inside."""
    if floor is not None:
        at_floor = inside(floor)
        if at_floor and not increasing:  # the cost falls as x grows and is within budget already at the floor
            return floor, floor
        hi = start
        while inside(hi) == at_floor:
            hi *= growth
            if hi > high:
                if at_floor:  # every x up to ``high`` is within the budget: effectively free
                    return hi / growth, hi / growth
                raise ValueError(f"the target cannot be met: no {name} in ({floor:g}, {high:g}] meets it")
        return floor, hi
    # The ``good`` end lies below the boundary where the cost increases, above it where it decreases.
    x = start
    if increasing:
        while not inside(x):
            x /= growth
            if x < low:
                raise ValueError(f"the target cannot be met: the cost stays above it for every {name} down to {low:g}")
        hi = x * growth
        while inside(hi):
            x, hi = hi, hi * growth
            if hi > high:
                return x, x
        return x, hi
    while not inside(x):
        x *= growth
        if x > high:
            raise ValueError(f"the target cannot be met: no {name} up to {high:g} meets it")
    lo = x / growth
    while inside(lo):
        x, lo = lo, lo / growth
        if lo < low:
            return x, x
    return lo, x


def _step_inside(inside: Callable[[float], bool], x: float, good: float, step: float) -> float:
    """``x`` moved toward the verified end ``good`` by relative steps ``step``, ``2 step``, ... until
    inside, never past ``good`` (at worst ``good`` itself)."""
    toward = math.copysign(1.0, good - x)
    for attempt in range(MAX_STEPS):
        if inside(x):
            return x
        x = x * (1 + toward * step * 2**attempt) if x else good
        if (good - x) * toward <= 0:
            return good
    return good
