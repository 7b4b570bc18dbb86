"""Stable record ids: a keyed hash of a record's content, so spending follows the sentence.

The key is a secret of the device (a file in its state folder, made once from the operating
system's entropy), so the ids say nothing to anyone without it; they never leave the node.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import numpy as np

from fed.dataset import TextDataset

SECRET_BYTES = 32


def device_secret(state_dir: Path) -> bytes:
    """The device's record-id key: read from ``state_dir/record-id.key``, created on first use."""
    path = Path(state_dir) / "record-id.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        secret = path.read_bytes()
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"{path} is damaged ({len(secret)} bytes, expected {SECRET_BYTES})") from None
        return secret
    secret = os.urandom(SECRET_BYTES)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secret)
        handle.flush()
        os.fsync(handle.fileno())
    return secret


def record_ids(dataset: TextDataset, secret: bytes) -> np.ndarray:
    """One id per record: HMAC-SHA256 over (sentence, second sentence, label), hex, 32 characters."""
    second = dataset.texts2 or (None,) * len(dataset)
    return np.array(
        [
            hmac.new(secret, json.dumps([a, b, int(y)]).encode(), hashlib.sha256).hexdigest()[:32]
            for a, b, y in zip(dataset.texts, second, dataset.labels.tolist())
        ],
        dtype=object,
    )
