"""The checks every privacy parameter passes: one rule, one error text naming the option, one home.

Light on purpose (no NumPy, no SciPy): events, ledgers and a device's messages use them.
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def check_positive(name: str, value: Any) -> float:
    """``value`` as a positive finite float, or a ValueError naming ``name``."""
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return value


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """A positive finite epsilon, or a ValueError naming ``name``."""
    return check_positive(name, epsilon)


def check_delta(delta: Any, name: str = "delta") -> float:
    """A delta in the open interval (0, 1), or a ValueError naming ``name``."""
    try:
        value = float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be in (0, 1), got {delta!r}") from None
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {delta!r}")
    return value


def check_target(epsilon: Any, delta: Any) -> tuple[float, float]:
    """A privacy target: a positive finite epsilon and a delta in (0, 1), or a ValueError."""
    return check_epsilon(epsilon), check_delta(delta)


def check_int(name: str, value: Any, minimum: int = 1, meaning: str = "") -> int:
    """``value`` as an int >= ``minimum`` (an integral float counts; a boolean does not), or a ValueError
    naming ``name`` (and what it counts: ``meaning``)."""
    integral = (
        not isinstance(value, bool)
        and isinstance(value, numbers.Real)
        and math.isfinite(value)
        and int(value) == value
    )
    if not integral or int(value) < minimum:
        said = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{said}, got {value!r}")
    return int(value)


def check_in_range(
    name: str, value: Any, low: float, high: float, low_open: bool = False, high_open: bool = False
) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (ends open or closed), or a ValueError."""
    value = float(value)
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if math.isnan(value) or below or above or math.isinf(value):
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be a finite number in {left}{low:g}, {high:g}{right}, got {value!r}")
    return value
