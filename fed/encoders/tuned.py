"""Stage 1 for a transformer encoder (seed 000): MiniLM's top layers fine-tuned by the server on public data.

The server fine-tunes the top ``layers`` transformer layers of all-MiniLM-L6-v2 (with a linear
head on the mean-pooled output, which is not shipped) on its public labelled sentences and ships
only those layers' weights: one safetensors file (``TUNED_FILE``), no pickle, no code. The device
keeps its own copy of the base model and of the word embeddings; it replaces the named layers by
the shipped ones and nothing else. All six layers in float32 are 42.6 MB, under the 64 MiB bundle cap.

The file comes from an untrusted server (design.md section 2b). :func:`read_tuned` refuses
anything but a safetensors file of at most ``MAX_FILE_BYTES`` whose metadata names this format,
whose tensors are exactly the named layers' parameters of the base model's config with their
shapes, float32, and finite. The device owner allows shipped weights by their fingerprint
(:func:`weights_fingerprint`, the SHA-256 of the file's bytes) in the policy's
``tuned_encoders``; any other is refused before it is read (fed.device.policy).

Imports only torch, transformers, safetensors and numpy (the GPU reproduction script uses it).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.encoders.hf import HFEncoder, masked_mean
from ldpfed.fed.encoders.weights_file import read_weights

TUNED_SPEC = "minilm-tuned"
"""encoder.txt of a bundle that ships stage-1 weights (the base: the device's own MiniLM)."""
TUNED_FILE = "minilm-tuned.safetensors"
"""The bundle file of the shipped layers."""
FORMAT = "ldpfed-tuned-encoder"
TUNED_LAYERS = 6
"""Layers stage 1 fine-tunes and ships by default: all of MiniLM's (the word embeddings stay the device's)."""
MAX_FILE_BYTES = 48 * 2**20
"""Largest shipped-weights file a node reads (all six MiniLM layers in float32: 42.6 MB)."""


def weights_fingerprint(data: bytes) -> str:
    """SHA-256 (hex) of the exact shipped file: what a device policy lists to allow it."""
    return hashlib.sha256(data).hexdigest()


def layer_names(config: Any, layers: int) -> dict[str, tuple[int, ...]]:
    """Name and shape of every parameter of the top ``layers`` transformer layers of a BERT-style
    model with ``config`` (read from the config on the meta device: nothing is allocated)."""
    import torch
    from transformers import AutoModel

    total = int(config.num_hidden_layers)
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= total:
        raise ValueError(f"layers must be an integer from 1 to {total}, got {layers!r}")
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    prefixes = tuple(f"encoder.layer.{i}." for i in range(total - layers, total))
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if k.startswith(prefixes)}


def read_tuned(data: bytes, config: Any, name: str = TUNED_FILE) -> dict[str, Any]:
    """The shipped tensors (name -> float32 torch tensor); ValueError naming what is wrong otherwise.

    ``config`` is the base model's config (the device's own), which fixes every name and shape.
    """
    import torch

    tensors, meta = read_weights(data, name, MAX_FILE_BYTES, "shipped weights")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{name} is not an ldpfed tuned encoder (metadata format {meta.get('format')!r})")
    try:
        layers = int(meta["layers"])
    except (KeyError, ValueError) as error:
        raise ValueError(f"{name} names no layer count: {error}") from None
    expected = layer_names(config, layers)
    found = {k: tuple(v.shape) for k, v in tensors.items()}
    if found != expected:
        odd = sorted(set(found) ^ set(expected))[:4] or sorted(k for k in found if found[k] != expected[k])[:4]
        raise ValueError(f"{name}: tensors do not fit the top {layers} layers of the base model (e.g. {odd})")
    wrong = sorted(k for k, v in tensors.items() if v.dtype != torch.float32)
    if wrong:
        raise ValueError(f"{name}: tensors must be float32, {wrong[0]} is {tensors[wrong[0]].dtype}")
    if not all(torch.isfinite(v).all() for v in tensors.values()):
        raise ValueError(f"{name} holds NaN or infinite weights")
    return tensors


def tuned_bytes(model: Any, layers: int) -> bytes:
    """The file to ship: the top ``layers`` layers of ``model`` (a BERT-style torch model), float32."""
    from safetensors.torch import save

    names = layer_names(model.config, layers)
    state = model.state_dict()
    tensors = {k: state[k].detach().to("cpu", dtype=state[k].dtype).float().contiguous() for k in names}
    return save(tensors, metadata={"format": FORMAT, "layers": str(layers)})


class TunedEncoder(HFEncoder):
    """The base model with its top layers replaced by shipped weights; mean-pooled like the base.

    Parameters
    ----------
    base:
        Folder of the base model (the device's own MiniLM).
    weights:
        The shipped file (checked by :func:`read_tuned` when the model is first loaded).
    """

    def __init__(self, base: str | Path, weights: str | Path, device: str = "cpu", max_length: int | None = None) -> None:
        from ldpfed.fed.encoders.hf import MINILM_MAX_LENGTH

        super().__init__(base, MINILM_MAX_LENGTH if max_length is None else max_length, device, name=TUNED_SPEC)
        self.weights = Path(weights)

    @cached_property
    def _data(self) -> bytes:
        if self.weights.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{self.weights.name} is larger than shipped weights may be ({MAX_FILE_BYTES} bytes)")
        return self.weights.read_bytes()

    @cached_property
    def _model(self) -> tuple[Any, Any]:
        tensors = read_tuned(self._data, self._config, self.weights.name)
        tokenizer, model = super()._model
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        if unexpected:
            raise ValueError(f"{self.weights.name}: the base model has no {unexpected[:3]}")
        return tokenizer, model.eval()

    @cached_property
    def _fingerprint(self) -> str:
        digest = hashlib.sha256(super()._fingerprint.encode())
        digest.update(weights_fingerprint(self._data).encode())
        return digest.hexdigest()


def finetune(
    base: str | Path,
    texts: Sequence[str],
    labels: np.ndarray,
    num_labels: int,
    layers: int = TUNED_LAYERS,
    epochs: int = 2,
    batch_size: int = 32,
    learning_rate: float = 5e-5,
    max_length: int = 128,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = False,
) -> Any:
    """Stage 1: fine-tune the top ``layers`` layers of ``base`` with a linear head on mean-pooled states,
    by cross-entropy on the server's public records ``texts``/``labels``; returns the model (in eval
    mode; ship it with :func:`tuned_bytes`).

    The word embeddings and lower layers stay frozen (the device keeps its own).
    """
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModel, AutoTokenizer

    labels = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(labels) or len(texts) < batch_size:
        raise ValueError(f"need as many labels as texts, and at least {batch_size} of them")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModel.from_pretrained(str(base), local_files_only=True, dtype=torch.float32).to(device)
    names = set(layer_names(model.config, layers))
    for key, parameter in model.named_parameters():
        parameter.requires_grad_(key in names)
    head = torch.nn.Linear(model.config.hidden_size, num_labels).to(device)
    trainable = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.01)
    steps = epochs * math.ceil(len(texts) / batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
    generator = torch.Generator().manual_seed(seed)
    y = torch.from_numpy(labels)
    model.train()
    for _ in tqdm(range(epochs), desc="stage 1", disable=not progress):
        order = torch.randperm(len(texts), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            inputs = tokenizer(
                [texts[i] for i in idx], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            ).to(device)
            pooled = masked_mean(model(**inputs).last_hidden_state, inputs["attention_mask"])
            loss = torch.nn.functional.cross_entropy(head(pooled), y[idx].to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return model.eval()
