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
