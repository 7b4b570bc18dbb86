"""Local randomizers: each adds its noise and states its privacy event.

Importing this package registers every randomizer with :func:`make_randomizer`.
"""

from fed.randomizers import gaussian  # noqa: F401  (registers)
from fed.randomizers import bits, gaussian_variants, instance_encoding, laplace, metric, split_denoise  # noqa: F401  (register)
from fed.randomizers.base import RANDOMIZERS, Randomizer, make_randomizer

__all__ = ["RANDOMIZERS", "Randomizer", "make_randomizer"]
