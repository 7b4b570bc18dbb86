"""Embedding inversion (seed 003 section 4.3.2): the server reads tokens back from nearly clean
token vectors and words from nearly clean sentence reports, and does no better than chance
once the noise is large."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer
from ldpfed.fed.attacks.inversion import (
    STOPWORDS,
    attack_tokens,
    learned_inversion,
    token_inversion,
    token_inversion_sweep,
    tokenize_for_attack,
    words_of,
)
from ldpfed.fed.data.loaders import read_tsv
from ldpfed.fed.randomizers import make_randomizer


@pytest.fixture(scope="module")
def encoder():
    return make_encoder("minilm")


@pytest.fixture(scope="module")
def phrases(shared_data: Path) -> list[str]:
    """SST-2 training phrases of 4 to 12 words, shuffled."""
    texts, _, _ = read_tsv(shared_data / "sst2" / "train.tsv")
    order = np.random.default_rng(0).permutation(len(texts))
    return [texts[i] for i in order if 4 <= len(texts[i].split()) <= 12][:500]


def test_clean_token_vectors_are_inverted_exactly(encoder, phrases: list[str]) -> None:
    """The attacker's candidate vectors are exactly what the client noises: no noise, no error."""
    randomizer = TokenLevelRandomizer(encoder, "token-dchi", 8, 1.0, clip=1.0)
    texts = phrases[:8]
    ids, scored = tokenize_for_attack(randomizer, texts)
    assert scored.sum() >= len(texts) * 4 and not scored[:, 0].any()  # [CLS] and padding are not scored
    outcome = token_inversion(randomizer.token_states(texts, None, None), ids, scored, randomizer)
    assert outcome.success == 1.0 and outcome.tokens == scored.sum() and outcome.uniform_chance == pytest.approx(1 / 30522)


def test_token_inversion_recovers_tokens_at_large_eta_and_not_at_small_eta(encoder, phrases: list[str]) -> None:
    points = token_inversion_sweep(encoder, phrases[:24], [1e5, 10.0], clip=1.0, length=16, rng=np.random.default_rng(1))
    loose, tight = points
    assert loose.outcome.chance == tight.outcome.chance < 0.2 and loose.outcome.tokens > 100
    assert loose.outcome.success > 0.95  # noise radius ~ 384 / eta = 0.004 against a clip of 1
    assert tight.outcome.success <= tight.outcome.chance and tight.outcome.success < 0.02  # radius ~ 38: guesses
    assert loose.epsilon_per_token == pytest.approx(1e5 * 2.0) and loose.epsilon == pytest.approx(16 * 1e5 * 2.0)
    assert tight.epsilon == pytest.approx(16 * 10.0 * 2.0)


def test_token_inversion_reads_token_gaussian_too_and_refuses_what_it_cannot_attack(encoder, phrases: list[str]) -> None:
    gaussian = TokenLevelRandomizer(encoder, "token-gaussian", 8, 1e-3, clip=1.0)
    assert attack_tokens(gaussian, phrases[:8], np.random.default_rng(2)).success > 0.95
    with pytest.raises(ValueError, match="layer 1, not layer 0"):
        attack_tokens(TokenLevelRandomizer(encoder, "token-dchi", 16, 1.0, clip=1.0, layer=1), phrases[:2], np.random.default_rng(0))
    with pytest.raises(ValueError, match="token-dchi or token-gaussian"):
        attack_tokens(TokenLevelRandomizer(encoder, "text2text", 16, 1.0), phrases[:2], np.random.default_rng(0))
    randomizer = TokenLevelRandomizer(encoder, "token-dchi", 16, 1.0, clip=1.0)
    ids, scored = tokenize_for_attack(randomizer, phrases[:2])
    with pytest.raises(ValueError, match="must match"):
        token_inversion(np.zeros((3, 16, 384)), ids, scored, randomizer)
    with pytest.raises(ValueError, match="no token position"):
        token_inversion(np.zeros((2, 16, 384)), ids, np.zeros_like(scored), randomizer)


@pytest.fixture(scope="module")
def encoded(encoder, phrases: list[str]) -> tuple[np.ndarray, list[str], np.ndarray, list[str]]:
    """Public (400) and attacked (100) phrases with their clean encodings."""
    public, attacked = phrases[:400], phrases[400:]
    return encoder.encode(public), public, encoder.encode(attacked), attacked


@pytest.mark.parametrize("sigma", [0.01, 100.0])
def test_learned_inversion_names_words_of_nearly_clean_reports_and_guesses_under_heavy_noise(encoded, sigma: float) -> None:
    public_x, public, attacked_x, attacked = encoded
    randomizer = make_randomizer({"mechanism": "gaussian", "clip": 1.0, "sigma": sigma})
    rng = np.random.default_rng(3)
    outcome = learned_inversion(
        randomizer.release(attacked_x, rng), attacked, public_x, public, randomizer, rng,
        vocab_size=200, k=3, stopwords=STOPWORDS,
    )
    assert outcome.reports == 100 and outcome.vocab_size == 200 and 0 < outcome.chance < 0.15
    if sigma < 1:  # noise norm ~0.2 against a clip of 1 (MiniLM vectors have norm ~1)
        assert outcome.success > outcome.chance + 0.1
        assert outcome.hit_rate > outcome.chance_hit_rate + 0.2 and outcome.precision > 2 * outcome.chance_precision
    else:  # noise norm ~2000: the best the server can do is name the frequent public words
        assert outcome.success <= outcome.chance + 0.02


def test_learned_inversion_refuses_bad_input_by_name(encoded) -> None:
    public_x, public, attacked_x, attacked = encoded
    randomizer = make_randomizer({"mechanism": "gaussian", "clip": 1.0, "sigma": 0.1})
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="no reports"):
        learned_inversion(np.zeros((0, 384)), [], public_x, public, randomizer, rng)
    with pytest.raises(ValueError, match="5 reports but 4 true texts"):
        learned_inversion(attacked_x[:5], attacked[:4], public_x, public, randomizer, rng)
    with pytest.raises(ValueError, match="too few"):
        learned_inversion(attacked_x[:5], attacked[:5], public_x[:50], public[:50], randomizer, rng)
    with pytest.raises(ValueError, match="do not match"):
        learned_inversion(attacked_x[:5], attacked[:5], public_x, public[:-1], randomizer, rng)
    assert words_of("It's a RE-MAKE, 2 times.") == ["it", "s", "a", "re", "make", "2", "times"]
