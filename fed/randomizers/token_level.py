"""DP at the token level inside a local transformer encoder (seed 000 Table 4; seed 003 baselines).

The whole encoder runs on the user's side. A record's text is tokenized and padded or cut to
a fixed length L (so its length does not leak), its token representations after ``layer``
transformer layers (0: the embedding layer's output) are clipped to L2 radius C each and
noised, and the remaining layers then run with full attention over all L positions and are
mean-pooled over all L positions. Nothing after the noise reads the private attention mask
or segment ids, so the pooled vector that is released is post-processing of the L noisy
token vectors, and one release costs what those L token releases cost:

- ``token-gaussian``: N(0, sigma^2 I) per token; a replaced record moves each of the L
  clipped tokens by at most 2C, so the L tokens together form one Gaussian mechanism with
  L2 sensitivity 2C * sqrt(L): GaussianEvent(2C sqrt(L), sigma).
- ``token-dchi`` (TokEmbPriv, seed 003): d_chi Laplace noise with parameter eta per token,
  optional post-noise clip (seed 003 eq. 3): MetricDPEvent(eta, 2C, tokens=L), pure
  eta * 2C per token, composed over the L tokens.
- ``text2text`` (seed 003 baseline): each of the L token ids is mapped to its word
  embedding (optionally clipped to C), noised with d_chi noise, and replaced by the
  vocabulary token whose embedding is nearest; the new ids are then encoded with all-zero
  segment ids and full attention. The domain is the embedding table, of L2 diameter at most
  2 * max ||E_v||: MetricDPEvent(eta, 2 max ||E_v||, tokens=L).

The released vectors carry non-additive noise (it went through the upper layers), so
:meth:`TokenLevelRandomizer.decode` reports a noise variance of 0: the server's classifier
treats them as data.

Each kind is one class registered by name (``@register``, as every randomizer is): its noise
parameter, its event and its calibration live on it. ``TokenLevelRandomizer(encoder, kind, ...)``
builds the registered class ``kind`` names. They take text and a local encoder rather than
representation rows, so they have their own registry, :data:`TOKEN_RANDOMIZERS`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ldpfed.fed.encoders.base import check_pairs
from ldpfed.fed.encoders.hf import HFEncoder
from ldpfed.fed.privacy.noise import add_gaussian
from ldpfed.fed.privacy.events import GaussianEvent, MetricDPEvent, PrivacyEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.base import check_params, register
from ldpfed.fed.randomizers.metric import dchi_noise
from ldpfed.fed.randomizers.target import CalibrationTarget

TOKEN_RANDOMIZERS: dict[str, type[TokenLevelRandomizer]] = {}
"""The token-level randomizers by name, filled by ``@register``."""


class TokenLevelRandomizer(ABC):
    """Token-level DP layer around an :class:`HFEncoder`; text in, one noisy sentence vector out.

    Parameters
    ----------
    encoder:
        The local Hugging Face encoder (its tokenizer and model are used, not its pooling).
    kind:
        ``token-gaussian``, ``token-dchi`` or ``text2text``.
    length:
        Fixed number of token positions L (pad or cut).
    noise:
        sigma for ``token-gaussian``, eta for ``token-dchi`` and ``text2text``.
    clip:
        L2 radius C of each token vector (required except for ``text2text``, where it
        optionally clips the embedding table).
    layer:
        Number of transformer layers run before the noise (0: embedding-layer output);
        not used by ``text2text``.
    post_clip:
        ``token-dchi`` only: L2 radius the noisy token vectors are clipped to (seed 003 eq. 3).
    batch_size:
        Records per forward pass.
    """

    registry: ClassVar[dict[str, type[TokenLevelRandomizer]]] = TOKEN_RANDOMIZERS
    name: ClassVar[str]
    noise_key: ClassVar[str]
    """The parameter that sets the noise: sigma or eta."""
    needs_clip: ClassVar[bool] = True
    """Token vectors are clipped to ``clip``, which must be given (text2text: optional, on the table)."""
    token_vectors: ClassVar[bool] = True
    """The noise acts on token vectors after ``layer`` layers (text2text: on token ids, before any layer)."""
    takes_post_clip: ClassVar[bool] = False
    """The noisy token vectors may be clipped again (token-dchi, seed 003 eq. 3)."""

    def __new__(cls, encoder: HFEncoder, kind: str, *args: Any, **kwargs: Any) -> TokenLevelRandomizer:
        """The registered class that ``kind`` names."""
        if kind not in TOKEN_RANDOMIZERS or not issubclass(TOKEN_RANDOMIZERS[kind], cls):
            raise ValueError(f"kind must be one of {tuple(TOKEN_RANDOMIZERS)}, got {kind!r}")
        return super().__new__(TOKEN_RANDOMIZERS[kind])

    def __init__(
        self,
        encoder: HFEncoder,
        kind: str,
        length: int,
        noise: float,
        clip: float | None = None,
        layer: int = 0,
        post_clip: float | None = None,
        batch_size: int = 32,
    ) -> None:
        self.encoder = encoder
        self.length = check_int("length", length, minimum=2)
        self.noise = check_positive(self.noise_key, noise)
        if clip is None and self.needs_clip:
            raise ValueError(f"{kind} needs a clip radius for its token vectors")
        self.clip = None if clip is None else check_positive("clip", clip)
        self.layer = check_int("layer", layer, minimum=0)
        if not self.token_vectors and self.layer:
            raise ValueError(f"{kind} replaces tokens before the encoder; layer must be 0")
        if post_clip is not None and not self.takes_post_clip:
            raise ValueError("post_clip applies to token-dchi only")
        self.post_clip = None if post_clip is None else check_positive("post_clip", post_clip)
        self.batch_size = check_int("batch_size", batch_size)

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_params(cls, params: Mapping[str, Any], encoder: HFEncoder) -> "TokenLevelRandomizer":
        """Rebuild from :meth:`params` output and the same local encoder."""
        kind = params.get("mechanism")
        if kind not in TOKEN_RANDOMIZERS:
            raise ValueError(f"unknown token-level mechanism {kind!r}; available: {tuple(TOKEN_RANDOMIZERS)}")
        key = TOKEN_RANDOMIZERS[kind].noise_key
        check_params(params, {"length", key}, {"clip", "layer", "post_clip", "encoder", "epsilon_per_token", "diameter"})
        return cls(
            encoder,
            kind,
            params["length"],
            params[key],
            params.get("clip"),
            params.get("layer", 0),
            params.get("post_clip"),
        )

    @classmethod
    def calibrated(
        cls,
        encoder: HFEncoder,
        kind: str,
        epsilon: float,
        delta: float,
        releases: int,
        options: Mapping[str, Any],
        other_events: Mapping[PrivacyEvent, int] | None = None,
    ) -> "TokenLevelRandomizer":
        """The least noise whose ``releases`` runs (plus ``other_events``) meet (epsilon, delta).

        ``options``: length, clip (text2text: optional), layer, post_clip, batch_size.
        """
        check_params({"mechanism": kind, **options}, {"length"}, {"clip", "layer", "post_clip", "batch_size"})
        target = CalibrationTarget(epsilon, delta, releases, other_events or {})
        probe = cls(encoder, kind, noise=1.0, **options)
        return cls(encoder, kind, noise=probe._calibrated_noise(target), **options)

    @abstractmethod
    def _calibrated_noise(self, target: CalibrationTarget) -> float:
        """The least noise meeting ``target``, for this instance's other parameters (its own noise not read)."""

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.name, "length": self.length, "encoder": self.encoder.name}
        out[self.noise_key] = self.noise
        if self.clip is not None:
            out["clip"] = self.clip
        if self.token_vectors:
            out["layer"] = self.layer
        if self.post_clip is not None:
            out["post_clip"] = self.post_clip
        if isinstance(self.event, MetricDPEvent):
            out["diameter"] = self.diameter
            out["epsilon_per_token"] = self.noise * self.diameter
        return out

    # -- privacy -------------------------------------------------------------------------
    @property
    def diameter(self) -> float:
        """L2 diameter of one token's input domain."""
        return 2.0 * float(self.clip)  # type: ignore[arg-type]

    @property
    @abstractmethod
    def event(self) -> PrivacyEvent:
        """What one release of one record costs: all L token releases together."""

    # -- data path -----------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.encoder.dim

    def encode_clean(self, texts: Sequence[str], texts2: Sequence[str] | None = None) -> np.ndarray:
        """The same pipeline without noise (local inference on clean inputs): float32 (n, dim)."""
        return self._run(texts, texts2, rng=None)

    def release_texts(
        self, texts: Sequence[str], texts2: Sequence[str] | None, rng: np.random.Generator
    ) -> np.ndarray:
        """One noisy sentence vector per record, with fresh noise from ``rng``: float32 (n, dim)."""
        return self._run(texts, texts2, rng=rng)

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        """Reports as they are; noise variance 0 (the noise is not additive after the upper layers)."""
        return np.asarray(reports, dtype=np.float64), 0.0

    # -- internals -----------------------------------------------------------------------
    @cached_property
    def _table(self) -> np.ndarray:
        """The word-embedding table (clipped to ``clip`` if set), as used by text2text."""
        _, model = self.encoder._model
        table = model.embeddings.word_embeddings.weight.detach().float().cpu().numpy().astype(np.float64)
        if self.clip is not None:
            norms = np.linalg.norm(table, axis=1, keepdims=True)
            table = table * np.minimum(1.0, self.clip / np.maximum(norms, 1e-300))
        return table

    def _run(self, texts: Sequence[str], texts2: Sequence[str] | None, rng: np.random.Generator | None) -> np.ndarray:
        import torch

        check_pairs(texts, texts2)
        _, model = self.encoder._model
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            stop = start + self.batch_size
            batch = self.encoder.fixed_length(texts[start:stop], None if texts2 is None else texts2[start:stop], self.length)
            with torch.inference_mode():
                out[start:stop] = self._states(batch, model, rng).mean(dim=1).float().cpu().numpy()
        return out

    def _lower(self, batch: Any, model: Any) -> Any:
        """Token representations after ``layer`` layers, computed on the clean record."""
        if self.layer == 0:
            return model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
        if self.layer > len(model.encoder.layer):
            raise ValueError(f"layer {self.layer} exceeds the model's {len(model.encoder.layer)} layers")
        hidden = model(**batch, output_hidden_states=True).hidden_states
        return hidden[self.layer]

    def _upper(self, states: Any, model: Any, start: int) -> Any:
        """Layers ``start``.. with full attention over all L positions (no private mask)."""
        for block in model.encoder.layer[start:]:
            result = block(states, attention_mask=None)
            states = result[0] if isinstance(result, tuple) else result
        return states

    def token_states(
        self, texts: Sequence[str], texts2: Sequence[str] | None, rng: np.random.Generator | None
    ) -> np.ndarray:
        """The (n, L, d) token representations that the noise step outputs (clipped, noised if ``rng``).

        ``token-gaussian`` and ``token-dchi`` only; exposed for tests and audits of the DP step.
        """
        import torch

        batch, model = self._tokens(texts, texts2)
        with torch.inference_mode():
            return self._noisy_states(batch, model, rng)[1].double().cpu().numpy()

    def split_release(
        self, texts: Sequence[str], texts2: Sequence[str] | None, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Split-N-Denoise's user half: the clipped clean token vectors and their release, float32 (n, L, d) each.

        Only the second leaves the user; the first (and the noise, their difference) feed its denoiser.
        """
        import torch

        check_pairs(texts, texts2)
        clean, noisy = [], []
        for start in range(0, len(texts), self.batch_size):
            stop = start + self.batch_size
            batch, model = self._tokens(texts[start:stop], None if texts2 is None else texts2[start:stop])
            with torch.inference_mode():
                pair = self._noisy_states(batch, model, rng)
            clean.append(pair[0].float().cpu().numpy())
            noisy.append(pair[1].float().cpu().numpy())
        return np.concatenate(clean), np.concatenate(noisy)

    def server_pass(self, noisy: np.ndarray) -> np.ndarray:
        """Split-N-Denoise's server half: the layers above ``layer`` on released token vectors, mean-pooled: float32 (n, dim)."""
        import torch

        noisy = np.asarray(noisy, dtype=np.float32)
        if noisy.ndim != 3 or noisy.shape[1:] != (self.length, self.dim) or not np.isfinite(noisy).all():
            raise ValueError(f"released token vectors must be finite, of shape (n, {self.length}, {self.dim}); got {noisy.shape}")
        _, model = self.encoder._model
        out = np.empty((len(noisy), self.dim), dtype=np.float32)
        for start in range(0, len(noisy), self.batch_size):
            states = torch.from_numpy(noisy[start : start + self.batch_size]).to(self.encoder.device, model.dtype)
            with torch.inference_mode():
                pooled = self._upper(states, model, self.layer).mean(dim=1)
            out[start : start + len(states)] = pooled.float().cpu().numpy()
        return out

    def _tokens(self, texts: Sequence[str], texts2: Sequence[str] | None) -> tuple[Any, Any]:
        """The tokenized batch (padded or cut to L) and the model; token-vector kinds only."""
        if not self.token_vectors:
            raise ValueError(f"{self.name} releases token ids, not token vectors")
        check_pairs(texts, texts2)
        return self.encoder.fixed_length(texts, texts2, self.length), self.encoder._model[1]

    def _noisy_states(self, batch: Any, model: Any, rng: np.random.Generator | None) -> tuple[Any, Any]:
        """The clipped clean token vectors (n, L, d) and the noise step's output (the same when ``rng`` is None)."""
        import torch

        states = self._lower(batch, model)
        n, length, d = states.shape
        flat = states.reshape(-1, d).double()
        norms = flat.norm(dim=1, keepdim=True).clamp(min=1e-300)
        clean = flat * torch.clamp(self.clip / norms, max=1.0)
        flat = clean
        if rng is not None:
            flat = torch.from_numpy(self._noisy(clean.cpu().numpy(), rng)).to(clean.device)
            if self.post_clip is not None:
                norms = flat.norm(dim=1, keepdim=True).clamp(min=1e-300)
                flat = flat * torch.clamp(self.post_clip / norms, max=1.0)
        return clean.reshape(n, length, d), flat.reshape(n, length, d)

    @abstractmethod
    def _noisy(self, clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Clipped token vectors (rows of width d, float64) plus this kind's fresh noise."""

    def _states(self, batch: Any, model: Any, rng: np.random.Generator | None) -> Any:
        """The upper layers' token states of a tokenized batch, after the noise step (none without ``rng``)."""
        states = self._noisy_states(batch, model, rng)[1]
        return self._upper(states.to(model.dtype), model, self.layer)


@register
class TokenGaussian(TokenLevelRandomizer):
    """N(0, sigma^2 I) per token: the L tokens form one Gaussian of L2 sensitivity 2C sqrt(L)."""

    name = "token-gaussian"
    noise_key = "sigma"

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=self.diameter * math.sqrt(self.length), sigma=self.noise)

    def _calibrated_noise(self, target: CalibrationTarget) -> float:
        return target.gaussian_sigma(self.event.sensitivity)

    def _noisy(self, clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return add_gaussian(clean, self.noise, self.diameter, rng)  # each token moves by at most the diameter (fed.privacy.noise)


class _MetricTokens(TokenLevelRandomizer):
    """d_chi noise with parameter eta per token: MetricDPEvent(eta, diameter, tokens=L)."""

    noise_key = "eta"

    @property
    def event(self) -> MetricDPEvent:
        return MetricDPEvent(eta=self.noise, diameter=self.diameter, tokens=self.length)

    def _calibrated_noise(self, target: CalibrationTarget) -> float:
        diameter, tokens = self.diameter, self.length
        start = target.epsilon / (diameter * tokens * target.releases)
        return target.largest(lambda e: MetricDPEvent(e, diameter, tokens), start)

    def _noisy(self, clean: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return clean + dchi_noise(clean.shape[0], clean.shape[1], self.noise, rng)


@register
class TokenDChi(_MetricTokens):
    """TokEmbPriv (seed 003): d_chi noise per token vector, optionally clipped again (``post_clip``)."""

    name = "token-dchi"
    takes_post_clip = True


@register
class Text2Text(_MetricTokens):
    """Seed 003's baseline: each token id's word embedding noised with d_chi noise and replaced by the
    nearest vocabulary token; the domain is the embedding table (clipped to ``clip`` if given)."""

    name = "text2text"
    needs_clip = False
    token_vectors = False

    @property
    def diameter(self) -> float:
        """2 max ||E_v|| over the (clipped) embedding table."""
        return 2.0 * float(np.linalg.norm(self._table, axis=1).max())

    def _states(self, batch: Any, model: Any, rng: np.random.Generator | None) -> Any:
        import torch

        ids = batch["input_ids"]
        if rng is not None:
            table = self._table
            flat = ids.reshape(-1).cpu().numpy()
            noisy = self._noisy(table[flat], rng)
            sq = (table**2).sum(axis=1)
            new = np.empty(flat.size, dtype=np.int64)
            step = 256
            for s in range(0, flat.size, step):
                chunk = noisy[s : s + step]
                new[s : s + step] = np.argmin(sq[None, :] - 2.0 * chunk @ table.T, axis=1)
            ids = torch.from_numpy(new.reshape(ids.shape)).to(ids.device)
        zeros = torch.zeros_like(ids)
        states = model.embeddings(input_ids=ids, token_type_ids=zeros)
        return self._upper(states, model, 0)
