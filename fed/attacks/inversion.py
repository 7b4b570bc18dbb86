"""Embedding inversion (seed 003 section 4.3.2): the server tries to read the words back.

The attacker is the server. It knows the model, the randomizer and its parameters (it asked
for them), and it holds public text; it never sees a user's clean data. Two attacks:

- Token level (seed 003 eq. 14), against the noisy token vectors of ``token-dchi`` or
  ``token-gaussian`` at layer 0: for each position t the server computes, for every vocabulary
  token v, the vector the client would have noised had v stood there (the model's embedding
  layer on v at position t, segment 0, clipped to the run's clip C: exactly the clean input
  of the noise step), and guesses the token whose vector is nearest in L2 to the noisy one.
- Learned, from sentence-level reports to words: the server encodes public sentences with
  the same encoder, releases them through the run's randomizer, fits a ridge model from a
  report to the set of words its sentence contains (over the K most frequent public words),
  and names the k highest-scoring words of every attacked report.

Success is measured on the attacked records' true text, which only the experiment has; it
is shown next to chance (the same guess made without looking at the reports).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfed.fed.randomizers import Randomizer

STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being it its
    this that these those there here i you he she we they me him her us them my your his our their
    s t n nt not no do does did have has had will would can could should so than then too very just
    what which who whom when where why how all any some more most such only own same also into about
    up down out over under again further once""".split()
)
"""A short English stop-word list (optional: pass it as ``stopwords`` to :func:`learned_inversion`)."""

_WORD = re.compile(r"[^\W_]+")


def words_of(text: str) -> list[str]:
    """The lowercased words of ``text``: maximal runs of letters and digits ("it's" -> it, s)."""
    return _WORD.findall(text.lower())


# ------------------------------------------------------------------------------------------
# Token-level nearest neighbour (seed 003 eq. 14)
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenInversionOutcome:
    """Share of scored token positions whose token id the attack recovers, and chance.

    ``chance`` is the share of scored positions holding the most common token among them (a
    guess that knows the attacked text's token frequencies, so it is generous to chance);
    ``uniform_chance`` is 1 / number of candidate tokens.
    """

    success: float
    chance: float
    uniform_chance: float
    tokens: int
    reports: int


@dataclass(frozen=True)
class TokenSweepPoint:
    """One eta of :func:`token_inversion_sweep` and the worst-case epsilon it implies (MetricDPEvent)."""

    eta: float
    epsilon_per_token: float
    epsilon: float
    """Pure epsilon of one release: eta * diameter per token, composed over the L tokens."""
    outcome: TokenInversionOutcome


def _token_model(randomizer: Any) -> tuple[Any, Any]:
    """Tokenizer and model of a token-level randomizer that noises layer-0 vectors; ValueError otherwise."""
    if not getattr(randomizer, "token_vectors", False):  # token-dchi, token-gaussian (fed.randomizers.token_level)
        name = getattr(randomizer, "name", None)
        raise ValueError(f"the token inversion attacks token-dchi or token-gaussian reports, got {name!r}")
    if getattr(randomizer, "layer", None) != 0:
        raise ValueError(
            f"the token inversion compares with the embedding layer's output; the randomizer noises "
            f"after layer {getattr(randomizer, 'layer', None)}, not layer 0"
        )
    return randomizer.encoder._model


def tokenize_for_attack(randomizer: Any, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (n, L) of ``texts`` as the randomizer pads or cuts them, and the positions to score.

    Scored: real tokens (attention mask 1) that are not special tokens ([CLS], [SEP]: their
    place is public). Used for scoring only; the attack itself never reads them.
    """
    tokenizer, _ = _token_model(randomizer)
    batch = tokenizer(list(texts), padding="max_length", truncation=True, max_length=randomizer.length)
    ids = np.asarray(batch["input_ids"], dtype=np.int64)
    mask = np.asarray(batch["attention_mask"], dtype=bool)
    return ids, mask & ~np.isin(ids, list(tokenizer.all_special_ids))


def candidate_states(randomizer: Any, position: int, candidate_ids: np.ndarray | None = None, token_type: int = 0) -> np.ndarray:
    """What the client would noise had each candidate token stood at ``position``: float32 (V, d).

    The model's embedding layer (word + position + segment embeddings, LayerNorm) on each
    candidate id at that position, clipped to the randomizer's L2 radius C, as in its noise step
    (which clips in float64; float32 here halves the cost and moves no nearest neighbour that matters).
    """
    import torch

    _, model = _token_model(randomizer)
    if candidate_ids is None:
        candidate_ids = np.arange(model.embeddings.word_embeddings.num_embeddings)
    device = next(model.parameters()).device
    ids = torch.as_tensor(np.asarray(candidate_ids, dtype=np.int64)[:, None], device=device)
    positions = torch.full_like(ids, int(position))
    with torch.inference_mode():
        states = model.embeddings(input_ids=ids, token_type_ids=torch.full_like(ids, token_type), position_ids=positions)
        flat = states[:, 0, :].float()
        norms = flat.norm(dim=1, keepdim=True).clamp(min=1e-30)
        flat = flat * torch.clamp(randomizer.clip / norms, max=1.0)
    return flat.cpu().numpy()


def nearest_tokens(
    noisy_states: np.ndarray, randomizer: Any, candidate_ids: np.ndarray | None = None, token_type: int = 0
) -> np.ndarray:
    """Seed 003 eq. 14: for each position, the candidate token id whose clipped vector is nearest in L2.

    ``noisy_states``: (n, L, d) as :meth:`TokenLevelRandomizer.token_states` returns them.
    Returns int64 (n, L).
    """
    noisy = np.asarray(noisy_states, dtype=np.float32)
    if noisy.ndim != 3 or noisy.shape[0] == 0:
        raise ValueError(f"expected noisy token vectors of shape (n >= 1, L, d), got {noisy.shape}")
    if not np.isfinite(noisy).all():
        raise ValueError("noisy token vectors contain NaN or infinite values")
    ids = None if candidate_ids is None else np.asarray(candidate_ids, dtype=np.int64)
    if ids is not None and ids.size == 0:
        raise ValueError("no candidate tokens")
    guesses = np.empty(noisy.shape[:2], dtype=np.int64)
    for position in range(noisy.shape[1]):
        table = candidate_states(randomizer, position, ids, token_type)
        if table.shape[1] != noisy.shape[2]:
            raise ValueError(f"noisy vectors have {noisy.shape[2]} dimensions, the model's embeddings {table.shape[1]}")
        scores = (table**2).sum(axis=1)[None, :] - 2.0 * noisy[:, position, :] @ table.T
        best = np.argmin(scores, axis=1)
        guesses[:, position] = best if ids is None else ids[best]
    return guesses


def _vocabulary_size(randomizer: Any, candidate_ids: np.ndarray | None) -> int:
    if candidate_ids is not None:
        return len(candidate_ids)
    return int(randomizer.encoder._model[1].embeddings.word_embeddings.num_embeddings)


def _score(guesses: np.ndarray, true_ids: np.ndarray, scored: np.ndarray, vocabulary: int) -> TokenInversionOutcome:
    truth = true_ids[scored]
    _, counts = np.unique(truth, return_counts=True)
    return TokenInversionOutcome(
        success=float((guesses[scored] == truth).mean()),
        chance=float(counts.max() / truth.size),
        uniform_chance=1.0 / vocabulary,
        tokens=int(truth.size),
        reports=int(len(guesses)),
    )


def _check_scoring(shape: tuple[int, ...], true_ids: np.ndarray, scored: np.ndarray) -> None:
    if len(shape) != 3 or shape[0] == 0:
        raise ValueError(f"expected noisy token vectors of shape (n >= 1, L, d), got {shape}")
    if true_ids.shape != shape[:2] or scored.shape != shape[:2]:
        raise ValueError(
            f"true ids {true_ids.shape} and scored mask {scored.shape} must match the noisy vectors' (n, L) {shape[:2]}"
        )
    if not scored.any():
        raise ValueError("no token position to score")


def token_inversion(
    noisy_states: np.ndarray,
    true_ids: np.ndarray,
    scored: np.ndarray,
    randomizer: Any,
    candidate_ids: np.ndarray | None = None,
) -> TokenInversionOutcome:
    """Guess every position's token (:func:`nearest_tokens`); score on the ``scored`` positions of ``true_ids``.

    ``true_ids`` and ``scored`` (both (n, L), e.g. from :func:`tokenize_for_attack`) are for
    scoring only.
    """
    true_ids = np.asarray(true_ids, dtype=np.int64)
    scored = np.asarray(scored, dtype=bool)
    _check_scoring(np.shape(noisy_states), true_ids, scored)
    guesses = nearest_tokens(noisy_states, randomizer, candidate_ids)
    return _score(guesses, true_ids, scored, _vocabulary_size(randomizer, candidate_ids))


def attack_tokens(
    randomizer: Any, texts: Sequence[str], rng: np.random.Generator, candidate_ids: np.ndarray | None = None
) -> TokenInversionOutcome:
    """Release ``texts``' token vectors through ``randomizer`` (fresh noise from ``rng``) and invert them."""
    if len(texts) == 0:
        raise ValueError("no texts to attack")
    ids, scored = tokenize_for_attack(randomizer, texts)
    return token_inversion(randomizer.token_states(list(texts), None, rng), ids, scored, randomizer, candidate_ids)


def token_inversion_sweep(
    encoder: Any,
    texts: Sequence[str],
    etas: Sequence[float],
    clip: float,
    length: int,
    rng: np.random.Generator,
    post_clip: float | None = None,
    candidate_ids: np.ndarray | None = None,
) -> list[TokenSweepPoint]:
    """:func:`attack_tokens` against ``token-dchi`` at layer 0 for each eta, with the epsilon each implies.

    The epsilon is the randomizer's own MetricDPEvent: eta * 2C per token, composed over the
    L tokens of one release (``event.epsilon``). Every eta attacks a fresh release of ``texts``.
    """
    from ldpfed.fed.randomizers.token_level import TokenLevelRandomizer

    if len(etas) == 0:
        raise ValueError("no eta to sweep")
    if len(texts) == 0:
        raise ValueError("no texts to attack")
    randomizers = [
        TokenLevelRandomizer(encoder, "token-dchi", length, eta, clip=clip, layer=0, post_clip=post_clip) for eta in etas
    ]
    ids, scored = tokenize_for_attack(randomizers[0], texts)
    noisy = np.concatenate([r.token_states(list(texts), None, rng) for r in randomizers])
    guesses = nearest_tokens(noisy, randomizers[0], candidate_ids)  # one candidate table per position for all etas
    vocabulary, n = _vocabulary_size(randomizers[0], candidate_ids), len(texts)
    points = []
    for i, (eta, randomizer) in enumerate(zip(etas, randomizers)):
        event = randomizer.event
        outcome = _score(guesses[i * n : (i + 1) * n], ids, scored, vocabulary)
        points.append(TokenSweepPoint(float(eta), float(event.epsilon_per_token), float(event.epsilon), outcome))
    return points


# ------------------------------------------------------------------------------------------
# Learned inversion: sentence report -> words
# ------------------------------------------------------------------------------------------

MIN_PUBLIC = 100
"""Fewest public records the learned inversion trains on."""

RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, np.inf)
"""Ridge penalties tried, relative to the public features' mean variance times the record
count; inf is no model at all (every report gets the public word frequencies: chance)."""


@dataclass(frozen=True)
class InversionOutcome:
    """The words a learned inversion names (top ``k`` per report) against those in the sentence.

    Micro-averaged over reports: precision = hits / (k * reports), recall = hits / true
    vocabulary words (words outside the attack's vocabulary cannot be named), f1 of the two,
    hit_rate = share of reports with at least one word right. ``success`` is f1; every
    ``chance_*`` is the same metric for naming the k most frequent public words for every report.
    """

    success: float
    chance: float
    reports: int
    k: int
    vocab_size: int
    precision: float
    recall: float
    hit_rate: float
    chance_precision: float
    chance_recall: float
    chance_hit_rate: float
    penalty: float
    """The chosen relative ridge penalty (inf: the model fell back to word frequencies)."""


def word_vocabulary(texts: Sequence[str], size: int, stopwords: Collection[str] = ()) -> list[str]:
    """The ``size`` words in the most of ``texts`` (ties: alphabetical), ``stopwords`` left out."""
    counts = Counter(word for text in texts for word in set(words_of(text)) if word not in stopwords)
    return [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]]


def word_matrix(texts: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
    """Indicator (n, K): does text i contain vocabulary word j."""
    index = {word: j for j, word in enumerate(vocabulary)}
    out = np.zeros((len(texts), len(vocabulary)), dtype=np.float64)
    for i, text in enumerate(texts):
        for word in set(words_of(text)):
            if word in index:
                out[i, index[word]] = 1.0
    return out


class _Ridge:
    """Multi-output ridge regression with intercept, solved once by SVD for every penalty."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x_mean, self.y_mean = x.mean(axis=0), y.mean(axis=0)
        u, self.s, vt = np.linalg.svd(x - self.x_mean, full_matrices=False)
        self.v, self.uty = vt.T, u.T @ (y - self.y_mean)
        self.scale = float(((x - self.x_mean) ** 2).sum() / x.shape[1])  # records * mean variance

    def scores(self, x: np.ndarray, penalty: float) -> np.ndarray:
        if np.isinf(penalty):
            return np.broadcast_to(self.y_mean, (len(x), len(self.y_mean)))
        shrink = self.s / (self.s**2 + penalty * max(self.scale, 1e-300))
        weights = self.v @ (shrink[:, None] * self.uty)
        return (x - self.x_mean) @ weights + self.y_mean


def _top_k_metrics(scores: np.ndarray, truth: np.ndarray, k: int) -> tuple[float, float, float, float]:
    """precision, recall, f1, hit_rate of naming each row's ``k`` highest-scoring words."""
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    hits = np.take_along_axis(truth, top, axis=1).sum(axis=1)
    precision = float(hits.sum() / (k * len(truth)))
    recall = float(hits.sum() / max(truth.sum(), 1.0))
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return precision, recall, f1, float((hits > 0).mean())


def learned_inversion(
    reports: np.ndarray,
    true_texts: Sequence[str],
    public_x: np.ndarray,
    public_texts: Sequence[str],
    randomizer: Randomizer,
    rng: np.random.Generator,
    vocab_size: int = 500,
    k: int = 5,
    stopwords: Collection[str] = (),
) -> InversionOutcome:
    """Train on ``public_x`` (clean encodings of ``public_texts``) released through ``randomizer``;
    name the top ``k`` words of each of ``reports`` (as the server received them).

    The ridge penalty is chosen on a fifth of the public reports held out (best f1 at k, the
    frequency guess included), then the model is refit on all of them. ``true_texts`` (the
    attacked records' text) are for scoring only.
    """
    reports = np.asarray(reports, dtype=np.float64)
    public_x = np.asarray(public_x, dtype=np.float64)
    if reports.ndim != 2 or len(reports) == 0:
        raise ValueError(f"no reports to attack (expected a non-empty 2-D array, got shape {reports.shape})")
    if len(true_texts) != len(reports):
        raise ValueError(f"{len(reports)} reports but {len(true_texts)} true texts")
    if public_x.ndim != 2 or len(public_x) != len(public_texts):
        raise ValueError(f"public encodings {public_x.shape} and {len(public_texts)} public texts do not match")
    if len(public_x) < MIN_PUBLIC:
        raise ValueError(f"the public data has {len(public_x)} records, too few to learn an inversion (need {MIN_PUBLIC})")
    if int(k) != k or k < 1 or int(vocab_size) != vocab_size or vocab_size < k:
        raise ValueError(f"need integers 1 <= k <= vocab_size, got k={k!r}, vocab_size={vocab_size!r}")
    vocabulary = word_vocabulary(public_texts, int(vocab_size), stopwords)
    if len(vocabulary) < k:
        raise ValueError(f"the public texts hold {len(vocabulary)} distinct words, fewer than k={k}")
    features, _ = randomizer.decode(randomizer.release(public_x, rng))
    attacked, _ = randomizer.decode(reports)
    if attacked.shape[1] != features.shape[1]:
        raise ValueError(f"reports have {attacked.shape[1]} dimensions, the randomizer releases {features.shape[1]}")
    labels = word_matrix(public_texts, vocabulary)

    order = rng.permutation(len(features))
    held, fit = order[: len(order) // 5], order[len(order) // 5 :]
    trial = _Ridge(features[fit], labels[fit])
    penalty = max(RIDGE_GRID, key=lambda p: _top_k_metrics(trial.scores(features[held], p), labels[held], k)[2])

    model = _Ridge(features, labels)
    truth = word_matrix(true_texts, vocabulary)
    precision, recall, f1, hit_rate = _top_k_metrics(model.scores(attacked, penalty), truth, k)
    c_precision, c_recall, c_f1, c_hit = _top_k_metrics(model.scores(attacked, np.inf), truth, k)
    return InversionOutcome(
        success=f1, chance=c_f1, reports=int(len(reports)), k=int(k), vocab_size=len(vocabulary),
        precision=precision, recall=recall, hit_rate=hit_rate,
        chance_precision=c_precision, chance_recall=c_recall, chance_hit_rate=c_hit, penalty=float(penalty),
    )
