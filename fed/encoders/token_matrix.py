"""The token rows of a record: its raw word-embedding rows at up to L positions, each with its mask flag.

Split-N-Denoise (seed 003, fed.randomizers.split_denoise) releases a record's word-embedding rows,
not a sentence vector: the rows E_v of the word-embedding table for the record's tokens (before
the position and token-type embeddings and the LayerNorm). The record is tokenized and cut to L
tokens; position t holds [m_t, E_{v_t}] with m_t = 1 at a real token and [0, 0...0] at padding,
so a record is L * (d + 1) floats that cache and travel like any encoding. The spec
``tokens:<L>:<encoder>`` names it (fed.encoders.factory). The mask (the record's token count) is
public, like the size of a user's dataset (docs/split_denoise.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ldpfed.fed.encoders.base import check_pairs
from ldpfed.fed.encoders.hf import HFEncoder

PREFIX = "tokens:"
MAX_LENGTH = 512
"""Most token positions a token matrix may have (BERT-family position tables)."""


def split_spec(spec: str) -> tuple[int, str] | None:
    """(L, sentence-encoder spec) of a ``tokens:<L>:<spec>`` spec; None for any other spec."""
    if not spec.startswith(PREFIX):
        return None
    length, _, base = spec.removeprefix(PREFIX).partition(":")
    if not length.isdigit() or not 2 <= int(length) <= MAX_LENGTH or not base:
        raise ValueError(f"token-matrix spec must be 'tokens:<L>:<encoder>' with 2 <= L <= {MAX_LENGTH}, got {spec[:100]!r}")
    return int(length), base


def split_rows(x: "np.ndarray", length: int) -> tuple["np.ndarray", "np.ndarray"]:
    """(mask (n, L), rows (n, L, d)) of records of :class:`TokenMatrixEncoder`'s layout; ValueError unless each
    row holds L positions of [m, d values] with m in {0, 1}."""
    x = np.asarray(x)
    if x.ndim != 2 or not x.shape[1] or x.shape[1] % length or x.shape[1] // length < 2:
        raise ValueError(f"snd rows hold {length} token positions of [mask, d values]; rows of shape {x.shape} do not")
    tokens = x.reshape(len(x), length, -1)
    mask = tokens[:, :, 0]
    if not np.isin(mask, (0.0, 1.0)).all():
        raise ValueError("snd rows: each position's mask flag must be 0 or 1")
    return mask, tokens[:, :, 1:]


def join_rows(mask: "np.ndarray", rows: "np.ndarray") -> "np.ndarray":
    """The flat records of ``mask`` (n, L) and ``rows`` (n, L, d): the inverse of :func:`split_rows`."""
    return np.concatenate([np.asarray(mask, dtype=rows.dtype)[:, :, None], rows], axis=2).reshape(len(rows), -1)


class TokenMatrixEncoder:
    """The raw word-embedding rows of ``sentence``'s transformer at ``length`` positions with their mask, flattened.

    Parameters
    ----------
    sentence:
        The Hugging Face encoder whose embedding layer (and, server side, upper layers) is used.
    length:
        Number of token positions L (records are padded or cut to it).
    """

    def __init__(self, sentence: HFEncoder, length: int) -> None:
        if not isinstance(sentence, HFEncoder):
            raise ValueError(f"token matrices need a Hugging Face transformer encoder, got {type(sentence).__name__}")
        if not 2 <= length <= MAX_LENGTH:
            raise ValueError(f"token positions must lie in [2, {MAX_LENGTH}], got {length}")
        self.sentence = sentence
        self.length = int(length)
        self.name = f"{PREFIX}{self.length}:{sentence.name}"

    @property
    def token_dim(self) -> int:
        """Width d of one word-embedding row."""
        return self.sentence.dim

    @property
    def dim(self) -> int:
        """L * (d + 1): each position's mask flag and row."""
        return self.length * (self.token_dim + 1)

    def fingerprint(self) -> str:
        """Digest of the transformer's fingerprint and L."""
        return hashlib.sha256(f"word-rows|{self.length}|{self.sentence.fingerprint()}".encode()).hexdigest()

    def truncated(self, max_length: int) -> "TokenMatrixEncoder":
        """Device tiers read fewer tokens of a sentence; a token matrix has a fixed L: ValueError."""
        raise ValueError("device tiers (a shorter token budget) do not apply to token matrices, whose L is fixed")

    def encode(
        self,
        texts: Sequence[str],
        texts2: Sequence[str] | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> np.ndarray:
        """[mask, word-embedding row] at L positions per record (padding: zeros); float32 (n, L * (d + 1))."""
        import torch
        from tqdm.auto import tqdm

        check_pairs(texts, texts2)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        _, model = self.sentence._model
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, desc=f"encode {self.name}", disable=not progress):
            stop = start + batch_size
            batch = self.sentence.fixed_length(texts[start:stop], None if texts2 is None else texts2[start:stop], self.length)
            mask = batch["attention_mask"]
            with torch.inference_mode():
                rows = model.embeddings.word_embeddings(batch["input_ids"]).float() * mask[:, :, None]
            out[start:stop] = join_rows(mask.cpu().numpy(), rows.cpu().numpy())
        return out
