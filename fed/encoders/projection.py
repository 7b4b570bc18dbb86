"""A fixed linear projection to fewer dimensions, fitted by PCA on public encodings.

Fitted once by the server on public data and shipped to users, it lowers the dimension
of a representation before clipping and noise (seed 000, Table 5: lower dimensions lose
less to the DP layer).
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

ORTHONORMAL_TOLERANCE = 1e-3
"""Largest |C C^T - I| entry accepted for the components C."""
MAX_ARRAY_BYTES = 64 * 2**20
"""Largest array a projection file may declare (a shipped bundle is no bigger)."""


@dataclass(frozen=True)
class PCAProjection:
    """x -> (x - mean) @ components.T

    Attributes
    ----------
    mean:
        Mean of the fitting data, shape (input_dim,).
    components:
        Orthonormal principal directions, shape (dim, input_dim), largest variance first.

    Construction checks the shapes (1 <= dim <= input_dim), that both are finite and that
    the rows of ``components`` are orthonormal, and raises ValueError otherwise.
    """

    mean: np.ndarray
    components: np.ndarray

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float32)
        components = np.asarray(self.components, dtype=np.float32)
        if mean.ndim != 1 or components.ndim != 2 or components.shape[1] != mean.shape[0]:
            raise ValueError(f"mean {mean.shape} and components {components.shape} do not fit together")
        if not 1 <= components.shape[0] <= components.shape[1]:
            raise ValueError(f"components of shape {components.shape}: need 1 <= dim <= input_dim")
        if not (np.isfinite(mean).all() and np.isfinite(components).all()):
            raise ValueError("mean and components must be finite (no NaN or inf)")
        c = components.astype(np.float64)
        error = float(np.abs(c @ c.T - np.eye(len(c))).max())
        if error > ORTHONORMAL_TOLERANCE:
            raise ValueError(f"components are not orthonormal rows (max |C C^T - I| = {error:.3g})")
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
    def load(cls, source: str | Path | BinaryIO) -> PCAProjection:
        """Read a projection written by ``save`` (a path or a binary file object).

        The file is untrusted: it must hold exactly the float arrays ``mean`` and
        ``components``, uncompressed, each declaring at most ``MAX_ARRAY_BYTES``, and they
        must form a valid projection (see ``__post_init__``); otherwise ValueError.
        """
        try:
            with zipfile.ZipFile(source) as archive:
                names = sorted(archive.namelist())
                if names != ["components.npy", "mean.npy"]:
                    raise ValueError(f"expected exactly mean.npy and components.npy, found {names}")
                mean, components = (_read_npy(archive, name) for name in ("mean.npy", "components.npy"))
        except (zipfile.BadZipFile, EOFError) as err:
            raise ValueError(f"not a projection .npz file: {err}") from err
        return cls(mean, components)


def _read_npy(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    """One float array of an .npz, its header checked before any data is read."""
    info = archive.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"{name} is compressed; projection files are stored uncompressed")
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with archive.open(info) as handle:
        version = np.lib.format.read_magic(handle)
        if version not in readers:
            raise ValueError(f"{name} has unsupported .npy format version {version}")
        shape, _, dtype = readers[version](handle)
        if dtype.kind != "f":
            raise ValueError(f"{name} has dtype {dtype}; expected floating point")
        if math.prod(shape) * dtype.itemsize > MAX_ARRAY_BYTES:
            raise ValueError(f"{name} declares shape {shape}, more than {MAX_ARRAY_BYTES} bytes")
    with archive.open(info) as handle:
        return np.lib.format.read_array(handle, allow_pickle=False)
