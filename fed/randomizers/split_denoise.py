"""Split-N-Denoise (seed 003) as the seed describes it: noise on the raw word-embedding rows.

This class is the one implementation of the mechanism: ``ldpfed simulate --mechanism snd``, the
Python API, the device (clients/app.py through fed.runtime) and the seed-003 reproduction
(simulations/reproductions/seed003_snd.py, through :meth:`SplitDenoiseRandomizer.for_model` and
:meth:`SplitDenoiseRandomizer.release_rows`) all run it.

A record is its word-embedding rows at up to L positions with their mask (fed.encoders.token_matrix:
position t holds [m_t, E_{v_t}], padding [0, 0...0]). The user clips each real row to the domain the
event assumes (L2 radius ``clip`` = C, the table's largest row norm; for the ``coordinate`` sampler
also L1 radius ``l1_clip``, the table's largest row L1 norm: on the table's own rows both clips
change nothing), adds noise of one of two samplers (fed.encoders.word_split) to every real row,
clips each noisy row to C (seed 003 eq. 3; ``post_clip``) and sends the rows with the mask; padding
is neither noised nor sent (zeros the mask hides) when ``hide_length`` is false, the seed's release:
the mask, i.e. the record's token count, then leaves the user, and the guarantee holds only between
records of the same token count. By default (``hide_length`` true; design.md section 2: neighbours
replace one record, whatever its length) every one of the L positions is noised and sent as real,
padding as the zero row, so the count stays on the user and the guarantee holds between any two
records; the event is the same (L rows of the same domain). The reproduction sets it false, as the seed.

The event, stated in one place (:meth:`SplitDenoiseRandomizer.sampler_event`): ``dchi`` (the seed's
text) is pure eta ||x - x'||_2 per row, MetricDPEvent(eta, 2C, tokens); ``coordinate`` (the
authors' code) is pure eta ||x - x'||_1 per row, CoordinateMetricDPEvent(eta, 2 l1_clip, tokens).
A release is charged for L tokens, the most a record has (each record is cut to L).

The server's half (:meth:`decode`) runs the whole model on the released rows as ``inputs_embeds``
with the attention mask and mean-pools over the mask: e_n, computed from the release only
(post-processing; noise variance 0 for the classifier). The same pass on the clean rows
(:meth:`features`) is the whole encoder run locally. A user that runs only the embedding layer
denoises e_n with the shipped denoiser of the seed's shape (fed.learning.denoiser, layout
``paper``: [e_n; X~; Z] with the mask), ``denoiser.safetensors`` in the bundle, trained by
:meth:`bundle_files`; the denoised vector depends on X, so it never leaves the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import numpy as np

from ldpfed.fed.encoders.token_matrix import join_rows, split_rows
from ldpfed.fed.privacy.events import CoordinateMetricDPEvent, MetricDPEvent
from ldpfed.fed.privacy.validators import check_int, check_positive
from ldpfed.fed.randomizers.audit_pairs import Scores, pair_scores
from ldpfed.fed.randomizers.base import Randomizer, check_finite_matrix, check_params, register
from ldpfed.fed.randomizers.target import CalibrationTarget
from ldpfed.fed.runtime.threads import one_torch_thread

DENOISER_FILE = "denoiser.safetensors"
SAMPLERS = ("dchi", "coordinate")
"""The seed's text (d_chi: Gamma radius times a uniform direction) and its authors' code (per coordinate)."""


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


def table_bounds(spec: str) -> Any:
    """The word-embedding table's bounds (fed.encoders.word_split.TableBounds) of the encoder ``spec`` names."""
    from ldpfed.fed.encoders.word_split import TableBounds

    return TableBounds.of(_transformer(spec)._model[1].embeddings.word_embeddings.weight)


@register
class SplitDenoiseRandomizer(Randomizer):
    """Domain clip, noise of ``sampler`` on every real word-embedding row, post-clip to C; rows are L x [m, d].

    Parameters
    ----------
    eta:
        The noise parameter.
    length:
        Token positions L per record.
    encoder:
        The sentence encoder's spec (its model decodes reports; pinned to the user's own).
    clip:
        C: the L2 radius of every row (the table's largest row norm), and of the post-clip.
    l1_clip:
        The L1 radius of every row (the table's largest row L1 norm); the ``coordinate`` event's diameter is twice it.
    sampler:
        ``dchi`` or ``coordinate``.
    post_clip:
        Clip each noisy row to C (seed 003 eq. 3); False is TokEmbPriv's release.
    hide_length:
        Noise and send all L positions as real tokens, so that the token count does not leave the user (default;
        false is the seed's release, whose guarantee holds only between records of the same token count).
    """

    name = "snd"
    noise_key = "eta"
    batch_release = True
    float_safe = False  # its samplers are torch's: a device runs it only if its policy names it
    required_options = frozenset({"length", "encoder", "sampler"})
    optional_options = frozenset({"clip", "l1_clip", "post_clip", "hide_length"})
    default_options = MappingProxyType({"length": 32, "sampler": "dchi", "post_clip": True, "hide_length": True})
    pinned = frozenset({"encoder", "length", "hide_length"})
    """``hide_length`` too: a request may not make a user whose plan hides its token counts send them."""
    shipped_files = (DENOISER_FILE,)
    audit_options = MappingProxyType({"clip": 1.0, "l1_clip": 1.0})
    """The audit's domain (so that it loads no model): the unit L2 and L1 balls."""

    def __init__(
        self, eta: float, length: int, encoder: str, clip: float, l1_clip: float, sampler: str = "dchi",
        post_clip: bool = True, hide_length: bool = True,
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"snd's sampler must be one of {SAMPLERS}, got {sampler!r}")
        for name, flag in (("post_clip", post_clip), ("hide_length", hide_length)):
            if not isinstance(flag, bool):
                raise ValueError(f"snd's {name} must be true or false, got {flag!r}")
        if not isinstance(encoder, str) or not encoder:
            raise ValueError("snd needs the encoder's spec (a non-empty string)")
        self.eta = check_positive("eta", eta)
        self.length = check_int("length", length, minimum=1)
        self.clip = check_positive("clip", clip)
        self.l1_clip = check_positive("l1_clip", l1_clip)
        self.encoder, self.sampler, self.post_clip, self.hide_length = encoder, sampler, post_clip, hide_length

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "SplitDenoiseRandomizer":
        check_params(
            params, {"eta", "length", "encoder", "clip", "l1_clip", "sampler"}, {"post_clip", "hide_length", "epsilon_per_token"}
        )
        return cls(params["eta"], params["length"], params["encoder"], params["clip"], params["l1_clip"],
                   params["sampler"], params.get("post_clip", True), params.get("hide_length", True))

    @classmethod
    def for_model(
        cls, model: Any, sampler: str, eta: float, length: int, encoder: str = "", post_clip: bool = True,
        hide_length: bool = False,
    ) -> "SplitDenoiseRandomizer":
        """The randomizer for a BERT-family ``model`` at its word-embedding table's own bounds (``encoder``: its
        spec; default the model's own name or path), by default with the seed's release (``hide_length`` false)."""
        from ldpfed.fed.encoders.word_split import TableBounds

        bounds = TableBounds.of(model.embeddings.word_embeddings.weight)
        encoder = encoder or str(getattr(model.config, "_name_or_path", "") or "model")
        return cls(eta, length, encoder, bounds.clip, bounds.l1_diameter / 2, sampler, post_clip, hide_length)

    @classmethod
    def default_dim(cls, epsilon: float, num_classes: int | None = None, num_records: int | None = None) -> int:
        """0: a projection cannot apply to word-embedding rows."""
        return 0

    @classmethod
    def run_options(cls, clip: float, dim: int, options: Mapping[str, Any], encoder: str = "") -> dict[str, Any]:
        """L (default 32), the sampler (default ``dchi``), the encoder and the run's own options; C and the L1 radius
        come from the encoder's word-embedding table when the plan is made (:meth:`with_domain`), unless ``clip`` and
        ``l1_clip`` are given. The run's --clip does not apply (C is the table's, seed eq. 3), nor does a projection."""
        if dim:
            raise ValueError("snd releases the encoder's word-embedding rows: give --dim 0 (no projection)")
        if encoder == "bilstm" or encoder.startswith("bilstm:"):
            raise ValueError("snd needs a transformer encoder (minilm or a Hugging Face model), not the BiLSTM")
        return {**cls.default_options, "encoder": encoder, **options}

    @classmethod
    def with_domain(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with ``clip`` (C, the table's largest row L2 norm) and ``l1_clip`` (its largest row L1 norm)
        read from the encoder's word-embedding table where not given (loads the encoder, under the policy in scope)."""
        out = dict(options)
        if "clip" not in out or "l1_clip" not in out:
            bounds = table_bounds(out["encoder"])
            out.setdefault("clip", bounds.clip)
            out.setdefault("l1_clip", bounds.l1_diameter / 2)
        return out

    @classmethod
    def fixed_params(cls, epsilon: float, options: Mapping[str, Any]) -> dict[str, Any] | None:
        """As given (with the table's domain) when the options give ``eta``; else None (calibrated)."""
        return {"mechanism": cls.name, **cls.with_domain(options)} if cls.noise_key in options else None

    @classmethod
    def encoder_spec(cls, encoder: str, options: Mapping[str, Any]) -> str:
        """Records are the encoder's word-embedding rows at L positions with their mask."""
        return f"tokens:{int(options.get('length', cls.default_options['length']))}:{encoder}"

    # -- the event: one place ----------------------------------------------------------------
    @staticmethod
    def sampler_event(sampler: str, eta: float, diameter: float, tokens: int) -> MetricDPEvent:
        """What one release of ``tokens`` rows costs with ``sampler`` over a domain of ``diameter`` (L2 for ``dchi``,
        L1 for ``coordinate``): each row is pure eta x diameter-DP, composed over the rows."""
        if sampler == "dchi":
            return MetricDPEvent(eta=eta, diameter=diameter, tokens=tokens)
        if sampler == "coordinate":
            return CoordinateMetricDPEvent(eta=eta, diameter=diameter, tokens=tokens)
        raise ValueError(f"snd's sampler must be one of {SAMPLERS}, got {sampler!r}")

    @staticmethod
    def sampler_diameter(sampler: str, clip: float, l1_clip: float) -> float:
        """The diameter ``sampler``'s event is stated in: 2C (L2) for ``dchi``, 2 l1_clip (L1) for ``coordinate``."""
        return 2.0 * (clip if sampler == "dchi" else l1_clip)

    @property
    def diameter(self) -> float:
        return self.sampler_diameter(self.sampler, self.clip, self.l1_clip)

    def event_for(self, tokens: int) -> MetricDPEvent:
        """What one release of a record of ``tokens`` real tokens costs."""
        return self.sampler_event(self.sampler, self.eta, self.diameter, tokens)

    @property
    def event(self) -> MetricDPEvent:
        """One release: L rows (the most a record has)."""
        return self.event_for(self.length)

    def claimed_epsilon_per_token(self) -> float:
        """The seed's per-token figure for either sampler (Theorem 3.3): eta times the L2 diameter 2C."""
        return self.eta * 2.0 * self.clip

    @classmethod
    def _calibrate(cls, target: CalibrationTarget, options: Mapping[str, Any]) -> "SplitDenoiseRandomizer":
        options = cls.with_domain(options)
        sampler, length = options["sampler"], check_int("length", options["length"], minimum=1)
        diameter = cls.sampler_diameter(sampler, check_positive("clip", options["clip"]), check_positive("l1_clip", options["l1_clip"]))
        start = target.epsilon / (diameter * length * target.releases)
        eta = target.largest(lambda e: cls.sampler_event(sampler, e, diameter, length), start)
        return cls(eta, length, options["encoder"], options["clip"], options["l1_clip"], sampler, options.get("post_clip", True),
                   options.get("hide_length", True))

    def params(self) -> dict[str, Any]:
        return {
            "mechanism": self.name, "eta": self.eta, "length": self.length, "encoder": self.encoder,
            "sampler": self.sampler, "clip": self.clip, "l1_clip": self.l1_clip, "post_clip": self.post_clip,
            "hide_length": self.hide_length, "epsilon_per_token": self.event.epsilon_per_token,
        }

    # -- user side -----------------------------------------------------------------------
    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask (n, L), rows (n, L, d)) of records ``x``; ValueError unless each holds L positions of [m, d values]."""
        return split_rows(check_finite_matrix(x), self.length)

    def _domain(self, rows: Any) -> Any:
        """Rows (k, d) (torch, float64) clipped to the event's domain: L2 radius C; ``coordinate`` also L1 radius l1_clip."""
        import torch

        rows = rows * torch.clamp(self.clip / rows.norm(dim=1, keepdim=True).clamp(min=1e-300), max=1.0)
        if self.sampler == "coordinate":
            rows = rows * torch.clamp(self.l1_clip / rows.abs().sum(dim=1, keepdim=True).clamp(min=1e-300), max=1.0)
        return rows

    def preprocess(self, x: np.ndarray) -> np.ndarray:
        """Each real row clipped to the event's domain, padding rows zero; the layout kept."""
        import torch

        mask, rows = self.split(x)
        real = mask.astype(bool)
        out = np.zeros_like(rows)
        out[real] = self._domain(torch.from_numpy(np.ascontiguousarray(rows[real]))).numpy()
        return join_rows(mask, out)

    def sent_mask(self, mask: Any) -> Any:
        """The mask that leaves with a release of records of ``mask`` (numpy or torch): itself, or all ones
        with ``hide_length``."""
        return mask * 0 + 1 if self.hide_length else mask

    def release_rows(self, rows: Any, mask: Any, generator: Any) -> tuple[Any, Any]:
        """X~ and Z = X~ - X (n, t, d), torch, of ``rows``' dtype and device: every real row (``mask``; every row
        with ``hide_length``) clipped to the domain, noised from ``generator``, clipped to C (``post_clip``).
        Rows of X~ and Z that are not sent are zero."""
        import torch

        from ldpfed.fed.encoders.word_split import NOISE

        real = self.sent_mask(mask).bool()
        x = self._domain(rows[real].double())
        noisy = x + NOISE[self.sampler](len(x), x.shape[1], self.eta, generator, x.device)
        if self.post_clip:
            noisy = noisy * torch.clamp(self.clip / noisy.norm(dim=1, keepdim=True).clamp(min=1e-300), max=1.0)
        released, noise = torch.zeros_like(rows), torch.zeros_like(rows)
        released[real] = noisy.to(rows.dtype)
        noise[real] = (noisy - x).to(rows.dtype)
        return released, noise

    def release(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Records of X~ with their mask, float64; the noise from a torch generator seeded from ``rng``."""
        import torch

        mask, rows = self.split(x)
        generator = torch.Generator().manual_seed(int(rng.integers(2**63 - 1)))
        released, _ = self.release_rows(torch.from_numpy(np.ascontiguousarray(rows)), torch.from_numpy(mask), generator)
        return join_rows(self.sent_mask(mask), released.numpy())

    def audit_scores(self, dim: int) -> Scores:
        """Every one of the L rows (``dim``: a row's width) at +-r e_1, r the largest both clips allow; the score sums
        each row's log-likelihood ratio (d_chi's, or the per-coordinate density's for ``coordinate``) over the rows:
        optimal without the post-clip, valid with it."""
        if dim < 2:
            raise ValueError("snd's audit needs rows of at least 2 values")
        radius = min(self.clip, self.l1_clip) if self.sampler == "coordinate" else self.clip
        row0 = np.zeros(dim)
        row0[0] = radius
        row1 = -row0
        ones = np.ones((1, self.length))
        x0, x1 = (join_rows(ones, np.tile(r, (1, self.length, 1))) for r in (row0, row1))
        llr = self._row_llr(row0, row1, dim)

        def score(y: np.ndarray) -> np.ndarray:
            rows = y.reshape(len(y), self.length, dim + 1)[:, :, 1:].reshape(-1, dim)
            return llr(rows).reshape(len(y), self.length).sum(axis=1)

        return pair_scores(self, x0, x1, score, self.length * (dim + 1))

    def _row_llr(self, row0: np.ndarray, row1: np.ndarray, dim: int) -> Any:
        """log p(y | row1) / p(y | row0) of one row's noise."""
        if self.sampler == "dchi":
            from ldpfed.fed.privacy.audit import dchi_llr  # SciPy on use: device messages audit nothing

            return lambda y: dchi_llr(y, row0, row1, self.eta)
        from scipy import stats

        def coordinate(y: np.ndarray) -> np.ndarray:  # per coordinate log f(z) = log Q(d - 1, eta |z|) + const
            log_f = lambda z: stats.gamma.logsf(self.eta * np.abs(z), dim - 1)  # noqa: E731
            return (log_f(y - row1) - log_f(y - row0)).sum(axis=1)

        return coordinate

    # -- server side ---------------------------------------------------------------------
    def _pass(self, mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The pinned model on ``rows`` as inputs_embeds with the mask, mean-pooled over it; float64 (n, d)."""
        import torch

        from ldpfed.fed.encoders.word_split import server_pass

        model = _transformer(self.encoder)._model[1]
        with one_torch_thread():
            pooled = server_pass(model, torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)), torch.from_numpy(mask).long())
        return pooled.double().numpy()

    def decode(self, reports: np.ndarray) -> tuple[np.ndarray, float]:
        """e_n of each report, float64 (n, d): the model on X~ with the mask, mean-pooled; noise variance 0."""
        if not len(reports):
            return np.zeros((0, _transformer(self.encoder).dim)), 0.0
        return self._pass(*self.split(reports)), 0.0

    def features(self, x: np.ndarray) -> np.ndarray:
        """The whole encoder on the clean (domain-clipped) rows, mean-pooled: what e_n estimates, float64 (n, d)."""
        if not len(x):
            return np.zeros((0, _transformer(self.encoder).dim))
        return self._pass(*self.split(self.preprocess(x)))

    def denoised(self, x: np.ndarray, denoiser: Any, rng: np.random.Generator) -> np.ndarray:
        """What a user that runs only the embedding layer gets for each row: its release X~, the
        server's e_n of it (the same pass the server runs), then its own denoiser on e_n, X~ and
        its noise, with its mask; float64 (n, d). X~ would be charged like any release; here nothing leaves."""
        clean = self.preprocess(x)
        released = self.release(clean, rng)
        mask, rows = self.split(clean)
        e_n = self.decode(released)[0]
        with one_torch_thread():
            return denoiser.denoise(e_n, rows, self.split(released)[1], mask=self.sent_mask(mask)).astype(np.float64)

    def bundle_files(self, public: np.ndarray, seed: int, progress: bool = False) -> dict[str, bytes]:
        """The denoiser of the seed's shape (layout ``paper``), trained on the public records released with this
        randomizer's noise."""
        from ldpfed.fed.learning.denoiser import DenoiserShape, train_denoiser

        rng = np.random.default_rng([seed, 3])
        clean = self.preprocess(public)
        released = self.release(clean, rng)
        mask, rows = self.split(clean)
        e_n, target = self.decode(released)[0], self.features(clean)
        with one_torch_thread():
            denoiser, _ = train_denoiser(
                DenoiserShape(dim=rows.shape[2], length=self.length, layout="paper"), e_n, rows, self.split(released)[1],
                target, batch=min(64, len(clean)), seed=seed, progress=progress, mask=self.sent_mask(mask),
            )
        return {DENOISER_FILE: denoiser.to_bytes()}
