"""What the server fits on its public data and ships to every user.

The server may pre-train a BiLSTM encoder (seed 000, Stage 1) and fit a projection to
fewer dimensions on public data; both travel to users as one content-addressed bundle
(a tar archive in a byte array), so a real device needs nothing but the setup message.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fed.config import RunConfig
from fed.corpus import generate_public_corpus
from fed.dataset import TextDataset
from fed.encoders.base import Encoder
from fed.encoders.cache import encode_cached
from fed.encoders.factory import make_encoder
from fed.encoders.projection import PCAProjection
from fed.loaders import load_dataset

PUBLIC_GENERATED_SIZE = 1000
MAX_BUNDLE_BYTES = 64 * 2**20


def default_cache_dir(config: RunConfig) -> Path:
    """The run's cache folder: --cache-dir, else $LDPFED_CACHE, else ~/.cache/ldpfed."""
    return Path(config.cache_dir or os.environ.get("LDPFED_CACHE") or Path.home() / ".cache" / "ldpfed")


def load_public(config: RunConfig) -> TextDataset | None:
    """The server's public labelled data ('generated[:N]', a folder or id), or None for --public none.

    It must not be the evaluation task's own training or dev split.
    """
    if config.public == "none":
        return None
    if config.public == "generated" or config.public.startswith("generated:"):
        size = config.public.removeprefix("generated").removeprefix(":")
        if size and not size.isdigit():
            raise ValueError(f"bad public spec {config.public!r}; expected generated[:num_records]")
        return generate_public_corpus(int(size or PUBLIC_GENERATED_SIZE), seed=config.seed)
    if Path(config.public).resolve() == Path(config.data).resolve() or config.public == config.data:
        raise ValueError("--public must not be the task's own data (its train or dev split)")
    return load_dataset(config.public, "train")


@dataclass(frozen=True)
class Assets:
    """A user's view of the shipped bundle: the encoder to run and an optional projection."""

    encoder: Encoder
    projection: PCAProjection | None

    def features(self, dataset: TextDataset, cache_dir: Path, progress: bool = False) -> np.ndarray:
        """Clean (cached) encodings of ``dataset``, projected when a projection was shipped."""
        x = encode_cached(self.encoder, dataset, cache_dir, progress=progress)
        return self.projection.apply(x).astype(np.float32) if self.projection else x


def build_bundle(config: RunConfig, public: TextDataset | None, cache_dir: Path, progress: bool = False) -> Path:
    """Server side: fit what the run needs on public data and write it to a folder."""
    folder = Path(tempfile.mkdtemp(prefix="ldpfed-assets-"))
    encoder_spec = config.encoder
    if config.encoder == "bilstm":
        if public is None:
            raise ValueError("--encoder bilstm needs public data to pre-train on (--public)")
        from fed.encoders.bilstm import train_bilstm

        train_bilstm(public, seed=config.seed, progress=progress).save(folder / "bilstm")
        encoder_spec = "bilstm"
    (folder / "encoder.txt").write_text(encoder_spec)
    if config.dim:
        if public is None:
            raise ValueError("--dim needs public data to fit the projection on (--public)")
        encoder = _encoder(folder, encoder_spec)
        PCAProjection.fit(encode_cached(encoder, public, cache_dir, progress=progress), config.dim).save(
            folder / "projection.npz"
        )
    return folder


def pack(folder: Path) -> np.ndarray:
    """A folder as a deterministic tar archive in a uint8 array."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def unpack(bundle: np.ndarray, cache_dir: Path) -> Path:
    """User side: extract a bundle once into the cache (by content hash) and return its folder."""
    data = np.asarray(bundle, dtype=np.uint8).tobytes()
    if len(data) > MAX_BUNDLE_BYTES:
        raise ValueError(f"asset bundle of {len(data)} bytes exceeds {MAX_BUNDLE_BYTES}")
    folder = Path(cache_dir) / "assets" / hashlib.sha256(data).hexdigest()[:32]
    if not (folder / "encoder.txt").is_file():
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=Path(cache_dir), prefix="assets-"))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(staging, filter="data")
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staging, folder)
        except OSError:  # another process placed it first
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def load_assets(folder: Path) -> Assets:
    """The encoder and projection a bundle folder describes."""
    spec = (folder / "encoder.txt").read_text()
    projection = folder / "projection.npz"
    return Assets(_encoder(folder, spec), PCAProjection.load(projection) if projection.is_file() else None)


def _encoder(folder: Path, spec: str) -> Encoder:
    return make_encoder(f"bilstm:{folder / 'bilstm'}" if spec == "bilstm" else spec)
