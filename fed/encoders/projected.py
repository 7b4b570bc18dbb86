"""An encoder followed by a fixed projection, itself an encoder (so it can be cached)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ldpfed.fed.encoders.base import Encoder
from ldpfed.fed.encoders.projection import PCAProjection


class ProjectedEncoder:
    """``projection.apply(base.encode(...))``.

    Parameters
    ----------
    base:
        The encoder whose output is projected.
    projection:
        A projection fitted on ``base``'s encodings of public data.
    """

    def __init__(self, base: Encoder, projection: PCAProjection) -> None:
        if projection.input_dim != base.dim:
            raise ValueError(f"projection expects {projection.input_dim} dims, {base.name} gives {base.dim}")
        self.base = base
        self.projection = projection
        self.name = f"{base.name}+pca{projection.dim}"

    @property
    def dim(self) -> int:
        """Projected dimension."""
        return self.projection.dim

    def fingerprint(self) -> str:
        """Digest of the base encoder's and the projection's fingerprints."""
        return hashlib.sha256(f"{self.base.fingerprint()}|{self.projection.fingerprint()}".encode()).hexdigest()

    def truncated(self, max_length: int) -> "ProjectedEncoder":
        """The base encoder reading at most ``max_length`` tokens, with the same projection."""
        return ProjectedEncoder(self.base.truncated(max_length), self.projection)

    def encode(
        self,
        texts: Sequence[str],
        texts2: Sequence[str] | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> np.ndarray:
        """Projected encodings; float32 (n, dim)."""
        return self.projection.apply(self.base.encode(texts, texts2, batch_size=batch_size, progress=progress))
