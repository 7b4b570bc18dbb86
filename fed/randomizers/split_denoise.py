"""Split-N-Denoise (seed 003): the user releases its token matrix through d_chi noise; the server
runs the transformer's upper layers on it.

A record is its token matrix X (L token vectors of width d, flattened: fed.encoders.token_matrix).
The user clips each token vector to L2 radius C, adds d_chi noise with parameter eta to each, and
clips the noisy vectors to ``post_clip`` (C unless given; seed 003 eq. 3): X~. A replaced record
moves each clipped token by at most 2C, so one release is L pure (eta * 2C)-DP token releases:
MetricDPEvent(eta, 2C, tokens=L), as ``token-dchi`` (fed.randomizers.token_level).

The server's half (:meth:`decode`) is the transformer's layers above the embedding layer on X~,
with full attention over all L positions, mean-pooled: e_n, a sentence vector computed from the
release only (post-processing). Its noise is not additive, so the classifier treats e_n as data
(noise variance 0). The same pass on the clean clipped X (:meth:`features`) is local inference on
a user that runs the whole encoder. A user that runs only the embedding layer denoises e_n with
the shipped denoiser (fed.learning.denoiser: ``denoiser.safetensors`` in the bundle, trained by
:meth:`bundle_files`); the denoised vector depends on X, so it never leaves the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import numpy as np

from ldpfed.fed.privacy.events import MetricDPEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, pair_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.clip_and_noise import clip_l2
from ldpfed.fed.randomizers.metric import dchi_noise
from ldpfed.fed.randomizers.target import CalibrationTarget
from ldpfed.fed.runtime.threads import one_torch_thread

DENOISER_FILE = "denoiser.safetensors"


def _transformer(spec: str) -> Any:
    """The Hugging Face encoder ``spec`` names, by the one resolver of encoder names under the policy in scope
    (fed.encoders.resolver: on a device its owner's, so an encoder the options name loads as the bundle's would);
    loaded once per process and source (its weights are large)."""
    from ldpfed.fed.encoders import resolver

    return _loaded(resolver.resolve(spec))


@lru_cache(maxsize=2)
def _loaded(source: Any) -> Any:
    from ldpfed.fed.encoders import resolver
    from ldpfed.fed.encoders.hf import HFEncoder

    encoder = resolver.load(source)
    if not isinstance(encoder, HFEncoder):
        raise ValueError(f"snd needs a Hugging Face transformer encoder, not {source.name[:100]!r}")
    return encoder


@register
class SplitDenoiseRandomizer(Randomizer):
    """Per-token clip to ``clip``, d_chi noise ``eta``, clip to ``post_clip``; rows are L x d token matrices.

    Parameters
    ----------
    clip:
        L2 radius C of each token vector.
    eta:
        d_chi noise parameter.
    length:
        Token positions L per record.
    encoder:
        The sentence encoder's spec (its upper layers decode reports; pinned to the user's own).
    post_clip:
        L2 radius of the noisy token vectors (default: ``clip``).
    """

    name = "snd"
    noise_key = "eta"
    batch_release = True
    float_safe = False  # d_chi noise, as dchi: a device runs it only if its policy names it
    required_options = frozenset({"clip", "length", "encoder"})
    optional_options = frozenset({"post_clip"})
    default_options = MappingProxyType({"length": 32})
    pinned = frozenset({"encoder", "length"})
    shipped_files = (DENOISER_FILE,)

    def __init__(self, clip: float, eta: float, length: int, encoder: str, post_clip: float | None = None) -> None:
        self.clip = check_positive("clip", clip)
        self.eta = check_positive("eta", eta)
        self.length = check_int("length", length, minimum=2)
        if not isinstance(encoder, str) or not encoder:
            raise ValueError("snd needs the encoder's spec (a non-empty string)")
        self.encoder = encoder
        self.post_clip = self.clip if post_clip is None else check_positive("post_clip", post_clip)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "SplitDenoiseRandomizer":
        check_params(params, {"clip", "eta", "length", "encoder"}, {"post_clip", "epsilon_per_token"})
        return cls(params["clip"], params["eta"], params["length"], params["encoder"], params.get("post_clip"))

    @classmethod
    def default_dim(cls, epsilon: float, num_classes: int | None = None, num_records: int | None = None) -> int:
        """0: a projection cannot apply to token matrices."""
        return 0

    @classmethod
    def run_options(cls, clip: float, dim: int, options: Mapping[str, Any], encoder: str = "") -> dict[str, Any]:
        """The run's clip, L (default 32) and encoder; a projection (--dim) cannot apply to token matrices."""
        if dim:
            raise ValueError("snd releases the encoder's token matrices: give --dim 0 (no projection)")
        if encoder == "bilstm" or encoder.startswith("bilstm:"):
            raise ValueError("snd needs a transformer encoder (minilm or a Hugging Face model), not the BiLSTM")
        return {"clip": clip, **cls.default_options, "encoder": encoder, **options}

    @classmethod
    def encoder_spec(cls, encoder: str, options: Mapping[str, Any]) -> str:
        """Records are the encoder's token matrices at L positions."""
        return f"tokens:{int(options.get('length', cls.default_options['length']))}:{encoder}"

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "SplitDenoiseRandomizer":
        clip = check_positive("clip", options["clip"])
        length = check_int("length", options["length"], minimum=2)
        start = target.epsilon / (2 * clip * length * target.releases)
        eta = target.largest(lambda e: MetricDPEvent(e, 2 * clip, length), start)
        return cls(clip, eta, length, options["encoder"], options.get("post_clip"))

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name, "clip": self.clip, "eta": self.eta, "length": self.length,
            "encoder": self.encoder, "post_clip": self.post_clip, "epsilon_per_token": self.event.epsilon_per_token,
        }

    @property
    def event(self) -> MetricDPEvent:
        return MetricDPEvent(eta=self.eta, diameter=2 * self.clip, tokens=self.length)

    # -- user side -----------------------------------------------------------------------
    def tokens(self, x: np.ndarray) -> np.ndarray:
        """Rows of ``x`` as (n, L, d) token vectors; ValueError unless each row holds L of them."""
        x = check_finite_matrix(x)
        if x.shape[1] % self.length or not x.shape[1]:
            raise ValueError(f"snd rows hold {self.length} token vectors; a row of {x.shape[1]} values does not")
        return x.reshape(len(x), self.length, -1)

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        """Each token vector clipped to ``clip``; rows stay L * d wide."""
        tokens = self.tokens(x)
        return clip_l2(tokens.reshape(-1, tokens.shape[2]), self.clip).reshape(x.shape)

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        clean = self.preprocess(x)
        n, d = len(clean), clean.shape[1] // self.length
        noisy = clean.reshape(-1, d) + dchi_noise(n * self.length, d, self.eta, rng)
        return clip_l2(noisy, self.post_clip).reshape(n, -1)

    def audit_scores(self, dim: int) -> Scores:
        """Every one of the L token vectors (``dim``: a token's width) at +-C e_1; the score sums the d_chi
        log-likelihood ratio over tokens (optimal without the post-noise clip, valid with it)."""
        from ldpfed.fed.privacy.audit import dchi_llr  # SciPy on use: device messages audit nothing

        tokens = self.length
        x0 = np.zeros((1, dim * tokens))
        x0[0, ::dim] = self.clip
        x1 = -x0

        def token_llr(y: np.ndarray) -> np.ndarray:
            per_token = dchi_llr(y.reshape(-1, dim), x0[0, :dim], x1[0, :dim], self.eta)
            return per_token.reshape(len(y), tokens).sum(axis=1)

        return pair_scores(self, x0, x1, token_llr, tokens * dim)

    # -- server side ---------------------------------------------------------------------
    @property
    def _server(self) -> Any:
        """The token-level pipeline of fed.randomizers.token_level around the pinned encoder (its server_pass),
        built once per transformer the encoder resolves to where it is used."""
        from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer

        transformer = _transformer(self.encoder)
        servers = self.__dict__.setdefault("_servers", {})
        if transformer not in servers:
            servers[transformer] = TokenLevelRandomizer(
                transformer, "token-dchi", self.length, self.eta, self.clip, post_clip=self.post_clip
            )
        return servers[transformer]

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        """e_n of each report, float64 (n, d): the upper layers on X~, mean-pooled; noise variance 0."""
        if not len(reports):
            return np.zeros((0, _transformer(self.encoder).dim)), 0.0
        tokens = self.tokens(reports)
        with one_torch_thread():
            return self._server.server_pass(tokens).astype(np.float64), 0.0

    def features(self, x: np.ndarray) -> np.ndarray:
        """The whole encoder on the clean clipped token vectors, mean-pooled: what e_n estimates, float64 (n, d)."""
        if not len(x):
            return np.zeros((0, _transformer(self.encoder).dim))
        clipped = self.tokens(self.preprocess(x))
        with one_torch_thread():
            return self._server.server_pass(clipped).astype(np.float64)

    def denoised(self, x: np.ndarray, denoiser: Any, rng: np.random.Generator) -> np.ndarray:
        """What a user that runs only the embedding layer gets for each row: its release X~, the
        server's e_n of it (the same pass the server runs), then its own denoiser on e_n, X~ and
        its noise; float64 (n, d). X~ would be charged like any release; here nothing leaves."""
        clean = self.preprocess(x)
        released = self.release(clean, rng)
        shape = (len(clean), self.length, -1)
        e_n = self.decode(released)[0]
        with one_torch_thread():
            return denoiser.denoise(e_n, clean.reshape(shape), released.reshape(shape)).astype(np.float64)

    def bundle_files(self, public: np.ndarray, seed: int, progress: bool = False) -> dict[str, bytes]:
        """The denoiser, trained on the public records released with this randomizer's noise."""
        from ldpfed.fed.learning.denoiser import DenoiserShape, train_denoiser

        rng = np.random.default_rng([seed, 3])
        clean = self.preprocess(public)
        released = self.release(clean, rng)
        shape = (len(clean), self.length, -1)
        d = clean.shape[1] // self.length
        e_n, target = self.decode(released)[0], self.features(clean)
        with one_torch_thread():
            denoiser, _ = train_denoiser(
                DenoiserShape(dim=d, length=self.length), e_n, clean.reshape(shape), released.reshape(shape), target,
                batch=min(64, len(clean)), seed=seed, progress=progress,
            )
        return {DENOISER_FILE: denoiser.to_bytes()}
