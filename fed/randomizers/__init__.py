"""Local randomizers: each adds its noise and states its privacy event (design.md section 2).
split_denoise runs the transformer's embedding layer (encoders), its denoiser (learning) and
one torch thread (runtime.threads), each imported where used.

May import: fed.privacy, fed.encoders, fed.learning, fed.runtime.
"""

from fed.randomizers import gaussian  # noqa: F401  (registers)
from fed.randomizers import bits, gaussian_variants, instance_encoding, laplace, metric, split_denoise  # noqa: F401  (register)
from fed.randomizers.base import RANDOMIZERS, Randomizer, make_randomizer

__all__ = ["RANDOMIZERS", "Randomizer", "make_randomizer"]