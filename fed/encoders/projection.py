"""A fixed linear projection to fewer dimensions, fitted by PCA on public encodings.

Fitted once by the server on public data and shipped to users, it lowers the dimension
of a representation before clipping and noise (seed 000, Table 5: lower dimensions lose
less to the DP layer).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class PCAProjection:
    """x -> (x - mean) @ components.T

    Attributes
    ----------
    mean:
        Mean of the fitting data, shape (input_dim,).
    components:
        Orthonormal principal directions, shape (dim, input_dim), largest variance first.
    """

    mean: np.ndarray
    components: np.ndarray

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float32)
        components = np.asarray(self.components, dtype=np.float32)
        if mean.ndim != 1 or components.ndim != 2 or components.shape[1] != mean.shape[0]:
            raise ValueError(f"mean {mean.shape} and components {components.shape} do not fit together")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "components", components)

    @property
    def input_dim(self) -> int:
        """Dimension of the vectors the projection accepts."""
        return int(self.mean.shape[0])

    @property
    def dim(self) -> int:
        """Dimension of the projected vectors."""
        return int(self.components.shape[0])

    @classmethod
    def fit(cls, x: np.ndarray, dim: int) -> PCAProjection:
        """Principal components of ``x`` (n, input_dim) via SVD, signs fixed so that each
        component's largest-magnitude coordinate is positive (deterministic output)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or len(x) < 2:
            raise ValueError(f"need a 2-d array with at least 2 rows, got shape {x.shape}")
        if not 1 <= dim <= min(x.shape):
            raise ValueError(f"dim must lie in [1, {min(x.shape)}] for data of shape {x.shape}, got {dim}")
        mean = x.mean(axis=0)
        _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
        components = vt[:dim]
        signs = np.sign(components[np.arange(dim), np.abs(components).argmax(axis=1)])
        return cls(mean, components * signs[:, None])

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Project rows of ``x``; float32 (n, dim)."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"expected shape (n, {self.input_dim}), got {x.shape}")
        return (x - self.mean) @ self.components.T

    def fingerprint(self) -> str:
        """Digest of the mean and components."""
        digest = hashlib.sha256(b"pca")
        digest.update(np.array(self.components.shape, dtype="<i8").tobytes())
        digest.update(self.mean.astype("<f4").tobytes())
        digest.update(self.components.astype("<f4").tobytes())
        return digest.hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write the projection to an .npz file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            np.savez(handle, mean=self.mean, components=self.components)
        return path

    @classmethod
    def load(cls, path: str | Path) -> PCAProjection:
        """Read a projection written by ``save``."""
        with np.load(Path(path)) as data:
            return cls(data["mean"], data["components"])
