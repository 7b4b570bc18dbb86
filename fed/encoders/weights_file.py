"""Weights shipped in a bundle: safetensors bytes read with a size cap, never a pickle."""

from __future__ import annotations

import json
from typing import Any


def read_weights(data: bytes, name: str, max_bytes: int, what: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and header metadata of a safetensors file; ValueError naming what is wrong.

    Parameters
    ----------
    data:
        The file's bytes.
    name:
        The file's name, for errors.
    max_bytes:
        Largest size accepted.
    what:
        What the file should be ("a denoiser"), for errors.
    """
    from safetensors.torch import load

    if len(data) > max_bytes:
        raise ValueError(f"{name} has {len(data)} bytes, more than {what} may have ({max_bytes})")
    try:
        tensors = load(data)
        # safetensors.torch.load returns no metadata; the format puts it in the JSON header
        # that follows the header's 8-byte length (already validated by load above).
        meta = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")]).get("__metadata__") or {}
    except Exception as error:  # safetensors raises its own error types for malformed files
        raise ValueError(f"{name} is not a safetensors file: {error}") from None
    return tensors, meta
