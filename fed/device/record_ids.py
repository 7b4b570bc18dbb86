"""Stable record ids: a keyed hash of a record's content, so spending follows the sentence.

The key is a secret of the device (a file in its state folder, made once from the operating
system's entropy), so the ids say nothing to anyone without it; they never leave the node.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ldpfed.fed.data.dataset import TextDataset

SECRET_BYTES = 32
KEY_FILE = "record-id.key"
BINDING_LABEL = b"ldpfed: the ledger bound to this record-id key"


def device_secret(state_dir: Path) -> bytes:
    """The device's record-id key, read from ``state_dir/record-id.key`` (made by :func:`create_secret`)."""
    path = Path(state_dir) / KEY_FILE
    secret = path.read_bytes()
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"{path} is damaged ({len(secret)} bytes, expected {SECRET_BYTES})")
    return secret


def create_secret(state_dir: Path) -> bytes:
    """Make the device's record-id key (mode 600) from the operating system's entropy; FileExistsError if there is one."""
    path = Path(state_dir) / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.fchmod(fd, 0o600)  # whatever the umask
    secret = os.urandom(SECRET_BYTES)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secret)
        handle.flush()
        os.fsync(handle.fileno())
    return secret


def key_fingerprint(secret: bytes) -> str:
    """What a ledger stores to name the key it belongs to: HMAC-SHA256 of a fixed label (says nothing of the key)."""
    return hmac.new(secret, BINDING_LABEL, hashlib.sha256).hexdigest()


def record_ids(datasets: Sequence[TextDataset], secret: bytes) -> list[np.ndarray]:
    """One id per record of each dataset: HMAC-SHA256 over (sentence, second sentence, label), hex, 32 characters.

    Ids are per copy: the j-th copy (j >= 1, counted over ``datasets`` in order) of the same content
    hashes (sentence, second sentence, label, j), so no two records share an id. A shared id would
    share a ledger column, and then a reply's report count, a refusal or a ledger figure would tell
    the server which records are equal: an uncharged function of record content (replace one copy
    of a pair by another sentence and it changes). The first copy keeps the id of a ledger written
    before ids were per copy (when copies shared it and were released once), so its spending stays.
    """
    seen: Counter[str] = Counter()
    out = []
    for dataset in datasets:
        second = dataset.texts2 or (None,) * len(dataset)
        ids = []
        for a, b, y in zip(dataset.texts, second, dataset.labels.tolist()):
            content = json.dumps([a, b, int(y)])
            copy = seen[content]
            seen[content] += 1
            key = content if copy == 0 else json.dumps([a, b, int(y), copy])
            ids.append(hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()[:32])
        out.append(np.array(ids, dtype=object))
    return out
