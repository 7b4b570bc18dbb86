"""The token matrix of a record: a transformer's embedding-layer output at L fixed positions.

Split-N-Denoise (seed 003) releases a record's token vectors, not a sentence vector, so its
clean representation is the (L, d) output of the encoder's embedding layer (word, position
and segment embeddings, layer-normalised), the record padded or cut to L tokens so that its
length does not leak. Rows are flattened to L * d floats so that they cache and travel like
any encoding; the spec ``tokens:<L>:<encoder>`` names it (fed.encoders.factory).
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


class TokenMatrixEncoder:
    """The embedding-layer output of ``sentence``'s transformer at ``length`` positions, flattened.

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
        """Width d of one token vector."""
        return self.sentence.dim

    @property
    def dim(self) -> int:
        """L * d."""
        return self.length * self.token_dim

    def fingerprint(self) -> str:
        """Digest of the transformer's fingerprint and L."""
        return hashlib.sha256(f"token-matrix|{self.length}|{self.sentence.fingerprint()}".encode()).hexdigest()

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
        """Embedding-layer output at L positions per record; float32 (n, L * d)."""
        import torch
        from tqdm.auto import tqdm

        check_pairs(texts, texts2)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        _, model = self.sentence._model
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, desc=f"encode {self.name}", disable=not progress):
            stop = start + batch_size
            batch = self.sentence.fixed_length(texts[start:stop], None if texts2 is None else texts2[start:stop], self.length)
            with torch.inference_mode():
                states = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
            out[start:stop] = states.reshape(len(states), -1).float().cpu().numpy()
        return out
