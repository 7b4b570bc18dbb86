"""Mironov's floating-point attack (2012) on textbook Laplace noise, as an audit.

``x + rng.laplace(0, b)`` in floating point leaks ``x`` through the low-order bits: numpy
draws U on the grid k / 2^53 and returns ``b * log(2U)`` (or ``-b * log(2 - 2U)``), a sparse
set of doubles. For input 0 every report lies in that set; for another input the rounding
of ``x + noise`` usually leaves it. The test "is the report a possible raw draw?" then tells
the inputs apart far beyond any epsilon. :func:`float_attack_epsilon` runs it against any
sampler (fed.privacy.noise) and turns its error rates into an epsilon lower bound; the device
sampler (OpenDP) must not beat its event, the textbook one does.
"""

from __future__ import annotations

import math
import numpy as np

from ldpfed.fed.privacy.noise import add_laplace
from ldpfed.fed.privacy.audit import epsilon_lower_bound

GRID = 2.0**53
"""numpy draws doubles in [0, 1) as k / 2^53 (``next_double``)."""


def is_numpy_laplace_draw(y: float, scale: float) -> bool:
    """Whether ``y`` is exactly a value numpy's ``laplace(0, scale)`` can return.

    Inverts numpy's ``random_laplace`` (U >= 1/2: ``-scale * log(2 - U - U)``, else
    ``scale * log(U + U)``) and tries the grid points around the inverse.
    """
    if y >= 0:
        u = 1 - math.exp(-y / scale) / 2

        def draw(v: float) -> float:
            return -scale * math.log(2.0 - v - v)
    else:
        u = math.exp(y / scale) / 2

        def draw(v: float) -> float:
            return scale * math.log(v + v)

    k = round(u * GRID)
    return any(0 < (k + j) < GRID and draw((k + j) / GRID) == y for j in range(-3, 4))


def float_attack_epsilon(
    rng: np.random.Generator, scale: float, shift: float, samples: int, delta: float, confidence: float = 0.95
) -> float:
    """Epsilon lower bound of the attack on Laplace(``scale``) reports of the inputs 0 and ``shift``.

    ``rng`` picks the sampler (fed.privacy.noise): numpy's textbook one, or a device's OpenDP. The
    attack's score is 1 where a report is not a raw numpy draw.
    """
    null = add_laplace(np.zeros((samples, 1)), scale, abs(shift), rng).ravel()
    alt = add_laplace(np.full((samples, 1), float(shift)), scale, abs(shift), rng).ravel()
    score = np.vectorize(lambda y: 0.0 if is_numpy_laplace_draw(float(y), scale) else 1.0)
    return epsilon_lower_bound(score(null), score(alt), delta, confidence)
