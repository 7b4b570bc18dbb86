"""Clean encodings kept on disk, one row per record, keyed by the encoder and the record's content.

A frozen encoder's clean representation of a record never changes, so it is computed once
and shared by every run and process (design.md section 3); each release draws fresh noise
on top. A row's key is the SHA-256 of the record's text (or text pair) alone, in a store per
encoder fingerprint: a sweep over users, epsilons, partitions, splits or ``--train-limit``
samples, and any subset, superset or reordering of sentences already seen, encodes only the
sentences never encoded before (each distinct one once).

The store is a folder per encoder (``<cache_dir>/encodings/<fingerprint>/``) of shards: each
an ``.npz`` of ``keys`` (n, 32) uint8 and ``rows`` (n, dim) float32, named by the digest of
its keys, written under a temporary name and renamed into place with ``os.replace``. So
readers never see a partial shard, concurrent writers (Ray actors, nodes) at worst write the
same rows twice, and nothing locks (the folder may live on a shared file system). New rows
are written every ``CHUNK_RECORDS`` records, so an interrupted encoding resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
import zipfile
from collections.abc import Collection
from pathlib import Path

import numpy as np

from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.encoders.base import Encoder

CHUNK_RECORDS = 1024
"""Records encoded and written together (length-sorted, so batches pad little)."""
KEY_BYTES = 32


def store_dir(encoder: Encoder, cache_dir: str | Path) -> Path:
    """The folder of ``encoder``'s cached encodings."""
    return Path(cache_dir) / "encodings" / encoder.fingerprint()[:32]


def record_key(text: str, text2: str | None = None) -> bytes:
    """SHA-256 of a record's content: its sentence, or its sentence pair (never equal to a single)."""
    first = text.encode("utf-8")
    if text2 is None:
        return hashlib.sha256(b"1" + first).digest()
    return hashlib.sha256(b"2" + len(first).to_bytes(8, "little") + first + text2.encode("utf-8")).digest()


def encode_cached(
    encoder: Encoder,
    dataset: TextDataset,
    cache_dir: str | Path,
    batch_size: int = 64,
    progress: bool = False,
    label: str | None = None,
) -> np.ndarray:
    """Clean float32 encodings (len(dataset), encoder.dim) in dataset order; only records
    missing from the cache are encoded.

    With ``progress``, a bar on standard error names ``label`` (e.g. the split: train, dev, public;
    default the dataset's name); where standard error is no terminal (a log) it writes its start and
    its end, once each. Shards of another row size (written for an encoder of another dimension) are ignored.
    Raises ValueError naming a shard that cannot be read (damaged outside this code: delete it).
    """
    texts2 = dataset.texts2
    keys = [record_key(t, None if texts2 is None else texts2[i]) for i, t in enumerate(dataset.texts)]
    index = dict(zip(keys, range(len(keys))))  # one position of each distinct record
    dim = encoder.dim
    folder = store_dir(encoder, cache_dir)
    if folder.is_dir():
        os.utime(folder)  # used now: a device keeps the encodings used last (fed.device.retention)
    rows = _read(folder, index.keys(), dim)
    missing = sorted((index[k] for k in index if k not in rows), key=lambda i: _length(dataset, i))
    from tqdm.auto import tqdm  # here: a device's message process imports this module, rarely encodes

    bar = tqdm(
        total=len(missing), desc=f"encode {label or dataset.name} ({encoder.name})", unit="record",
        disable=not (progress and missing), mininterval=0.1 if sys.stderr.isatty() else math.inf,
    )
    with bar:
        for start in range(0, len(missing), CHUNK_RECORDS):
            chunk = missing[start : start + CHUNK_RECORDS]
            encoded = np.asarray(
                encoder.encode(
                    [dataset.texts[i] for i in chunk],
                    None if texts2 is None else [texts2[i] for i in chunk],
                    batch_size=batch_size,
                ),
                dtype=np.float32,
            )
            if encoded.shape != (len(chunk), dim):
                raise ValueError(f"{encoder.name} returned shape {encoded.shape}, expected {(len(chunk), dim)}")
            chunk_keys = [keys[i] for i in chunk]
            _write(folder, chunk_keys, encoded)
            rows.update(zip(chunk_keys, encoded))
            bar.update(len(chunk))
    return np.stack([rows[k] for k in keys]) if keys else np.empty((0, dim), dtype=np.float32)


def _read(folder: Path, wanted: Collection[bytes], dim: int) -> dict[bytes, np.ndarray]:
    """The cached rows of the ``wanted`` keys."""
    found: dict[bytes, np.ndarray] = {}
    if not wanted or not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.npz")):
        try:
            with np.load(path) as shard:
                keys = shard["keys"]
                if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != KEY_BYTES:
                    raise ValueError(f"keys of dtype {keys.dtype} and shape {keys.shape}")
                blob = keys.tobytes()
                hits = {
                    key: i
                    for i in range(len(keys))
                    if (key := blob[i * KEY_BYTES : (i + 1) * KEY_BYTES]) in wanted and key not in found
                }
                if not hits:
                    continue
                rows = shard["rows"]
                if rows.dtype != np.float32 or rows.ndim != 2 or len(rows) != len(keys):
                    raise ValueError(f"{len(keys)} keys but rows of dtype {rows.dtype} and shape {rows.shape}")
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise ValueError(f"encoding cache shard {path} is damaged ({err}); delete it") from err
        if rows.shape[1] == dim:
            found.update((key, rows[i]) for key, i in hits.items())
    return found


def _write(folder: Path, keys: list[bytes], rows: np.ndarray) -> None:
    """Add one shard (atomically: a temporary file renamed into place)."""
    folder.mkdir(parents=True, exist_ok=True)
    blob = b"".join(keys)
    path = folder / f"{hashlib.sha256(blob).hexdigest()[:32]}.npz"
    handle, temp = tempfile.mkstemp(dir=folder, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, keys=np.frombuffer(blob, dtype=np.uint8).reshape(len(keys), KEY_BYTES), rows=rows)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _length(dataset: TextDataset, i: int) -> int:
    """Characters in record ``i`` (both sentences of a pair)."""
    return len(dataset.texts[i]) + (0 if dataset.texts2 is None else len(dataset.texts2[i]))
