"""What every sentence encoder offers: a name, an output dimension, a fingerprint, encode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Encoder(Protocol):
    """A frozen map from sentences (or sentence pairs) to fixed-size vectors."""

    @property
    def name(self) -> str:
        """Human-readable identity (model id, path or kind)."""
        ...

    @property
    def dim(self) -> int:
        """Length of each output vector."""
        ...

    def fingerprint(self) -> str:
        """Hex digest that changes whenever the encoder's output could change."""
        ...

    def truncated(self, max_length: int) -> "Encoder":
        """The same encoder reading at most ``max_length`` tokens (device tiers); ValueError if it cannot."""
        ...

    def encode(
        self,
        texts: Sequence[str],
        texts2: Sequence[str] | None = None,
        batch_size: int = 64,
        progress: bool = False,
    ) -> np.ndarray:
        """Encode records; returns float32 of shape (len(texts), dim).

        Parameters
        ----------
        texts:
            First sentence of each record.
        texts2:
            Second sentence of each record for pair tasks, else None.
        batch_size:
            Records per forward pass.
        progress:
            Show a progress bar.
        """
        ...


def check_pairs(texts: Sequence[str], texts2: Sequence[str] | None) -> None:
    """Raise ValueError unless ``texts2`` is None or as long as ``texts``."""
    if texts2 is not None and len(texts2) != len(texts):
        raise ValueError(f"texts2 has {len(texts2)} entries for {len(texts)} texts")


class EncoderRefused(ValueError):
    """An encoder name this process will not load, or cannot (fed.encoders.resolver).

    ``reason`` is what a server may be told; ``unavailable`` is True when the name is allowed but what it
    names does not load (a folder without weights, a Hub id not in the local cache), and ``detail`` then
    says why, for the device owner's log only (it may name files). ``str()`` gives both.
    """

    def __init__(self, reason: str, unavailable: bool = False, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.unavailable = unavailable
        self.detail = detail
