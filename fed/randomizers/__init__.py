"""Local randomizers: each adds its noise and states its privacy event (design.md section 2).
split_denoise (Split-N-Denoise on the word-embedding rows) runs torch's samplers and the transformer
(encoders), its denoiser (learning) and one torch thread (runtime.threads), each imported where used. Importing this package registers
the built-in randomizers, then those of installed plugins (fed.randomizers.plugins), so every
list derived from :data:`RANDOMIZERS` sees them.

May import: fed.privacy, fed.encoders, fed.learning, fed.runtime, fed.plugins.
"""

from ldpfed.fed.randomizers import gaussian  # noqa: F401  (registers)
from ldpfed.fed.randomizers import bits, gaussian_variants, instance_encoding, laplace, metric, split_denoise  # noqa: F401  (register)
from ldpfed.fed.randomizers.base import RANDOMIZERS, Randomizer, make_randomizer
from ldpfed.fed.randomizers.plugins import BUILTIN, load_plugins, register_randomizer

load_plugins()

__all__ = ["BUILTIN", "RANDOMIZERS", "Randomizer", "make_randomizer", "register_randomizer"]
