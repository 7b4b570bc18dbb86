"""Clean encodings of a dataset, computed once per (encoder, dataset) and kept on disk.

A frozen encoder's clean representation of a record never changes, so it is computed once
and shared by every run and process (design.md section 3); each release draws fresh
noise on top. Files are written to a temporary name in the cache folder and renamed into
place with ``os.replace``, so parallel processes never read a partial file: at worst two
compute the same array and the last rename wins.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from fed.dataset import TextDataset
from fed.encoders.base import Encoder


def cache_path(encoder: Encoder, dataset: TextDataset, cache_dir: str | Path) -> Path:
    """Where ``encode_cached`` keeps the encodings of ``dataset`` by ``encoder``."""
    return Path(cache_dir) / f"{encoder.fingerprint()[:32]}-{dataset.fingerprint()[:32]}.npy"


def encode_cached(
    encoder: Encoder,
    dataset: TextDataset,
    cache_dir: str | Path,
    batch_size: int = 64,
    progress: bool = False,
) -> np.ndarray:
    """Clean float32 encodings (len(dataset), encoder.dim), from the cache when present.

    A cached file of the wrong shape (e.g. written by an incompatible version) is
    recomputed and replaced.
    """
    path = cache_path(encoder, dataset, cache_dir)
    expected = (len(dataset), encoder.dim)
    if path.is_file():
        cached = np.load(path)
        if cached.shape == expected and cached.dtype == np.float32:
            return cached
    encodings = np.asarray(
        encoder.encode(dataset.texts, dataset.texts2, batch_size=batch_size, progress=progress),
        dtype=np.float32,
    )
    if encodings.shape != expected:
        raise ValueError(f"{encoder.name} returned shape {encodings.shape}, expected {expected}")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.save(out, encodings)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return encodings
