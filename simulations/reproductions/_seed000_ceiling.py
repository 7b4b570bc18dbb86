"""Seed 000's encoder ceiling (issue 40 item 1): the BiLSTM's non-private dev accuracy by pre-training data and epochs.

The reproduction's encoder is pre-trained on the server's 10% slice of the training split; the paper's null-privacy
figure is a BiLSTM trained on the dataset itself. Each entry pre-trains the same BiLSTM (dimension 128, embedding 64,
seed 0) on the 10% slice or on the whole training split for some epochs and measures, on the dev set:

- ``lda``: NoiseAwareLDA on the clean clipped latent rows of the users' 90% (what the latent null-privacy row of
  Table 4 measures, so the 10% / default-epochs entry repeats that row);
- ``logistic``: scikit-learn's logistic regression on the unclipped latent rows of the users' 90%;
- ``oov``: the share of dev tokens outside the encoder's vocabulary (built from its pre-training data).

No pretrained word vectors are available offline (none in ../shared/data or the venv), so every encoder learns its
embeddings from its pre-training data.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

CONFIGS = (("own", 4), ("own", 8), ("own", 16), ("all", 2), ("all", 4))
"""(pre-training data, epochs) of each entry: the server's 10% slice or the whole training split."""


def measure(context: Any, path: Path) -> dict[str, Any]:
    """Measure every entry of :data:`CONFIGS` not yet in ``path`` (JSON, saved after each) and return them all."""
    stored = json.loads(path.read_text()) if path.exists() else {}
    for data, epochs in CONFIGS:
        key = f"{data}-{epochs}"
        if key not in stored:
            stored[key] = _entry(context, data, epochs)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    return stored


def _entry(context: Any, data: str, epochs: int) -> dict[str, Any]:
    """Pre-train one encoder and measure its dev accuracy (see the module docstring)."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from ldpfed.fed.encoders.bilstm import train_bilstm
    from ldpfed.fed.encoders.vocab import UNK
    from ldpfed.fed.randomizers.gaussian import clip_l2
    from ldpfed.simulations.reproductions.seed000_tables import CLIP, Learners

    torch.set_num_threads(1)
    own, users, dev = context.splits()
    train = own if data == "own" else _whole(context)
    started = time.time()
    encoder = train_bilstm(train, dim=128, epochs=epochs, seed=0)
    seconds = time.time() - started
    x_users, x_dev, x_own = (encoder.encode(d.texts, d.texts2).astype(np.float64) for d in (users, dev, own))
    learners = Learners(128, x_own, own.labels, CLIP, 0)
    learners.lda.update(clip_l2(x_users, CLIP), users.labels, 0.0)
    logistic = LogisticRegression(max_iter=1000).fit(x_users, users.labels)
    unknown = encoder.vocab.tokens.index(UNK)
    tokens = np.concatenate([encoder.vocab.ids(text) for text in dev.texts])
    return {
        "records": len(train), "epochs": epochs, "pretrain_seconds": round(seconds, 1),
        "lda": float((learners.lda.fit().predict(clip_l2(x_dev, CLIP)) == dev.labels).mean()),
        "logistic": float((logistic.predict(x_dev) == dev.labels).mean()),
        "oov": float(np.mean(tokens == unknown)),
        "vocab": len(encoder.vocab),
    }


def _whole(context: Any) -> Any:
    """The whole training split."""
    from ldpfed.fed.data.loaders import load_dataset

    return load_dataset(str(context.data / context.dataset), "train")
