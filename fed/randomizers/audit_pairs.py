"""What a randomizer's distinguishing audit is made of: scores of its releases on a worst neighbouring pair.

Each randomizer (and label channel) states its own pair and likelihood-ratio score in
``audit_scores(dim)``; these helpers draw the releases in memory-bounded chunks. The test that
turns scores into an epsilon lower bound is fed.privacy.audit; fed.randomizers.auditing builds a
configuration as a run does and audits it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Scores = Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]]
"""(n, rng) -> the scores of n releases on the pair's first input and n on its second."""
CHUNK_ELEMENTS = 1 << 22
"""Most report values drawn at once."""


def repeated_scores(
    release: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    x: np.ndarray,
    score: Callable[[np.ndarray], np.ndarray],
    n: int,
    rng: np.random.Generator,
    width: int,
) -> np.ndarray:
    """Scores of ``n`` releases of the single row ``x``, drawn in memory-bounded chunks."""
    step = max(1, CHUNK_ELEMENTS // max(1, width))
    out = []
    for start in range(0, n, step):
        rows = min(step, n - start)
        out.append(score(release(np.repeat(x, rows, axis=0), rng)))
    return np.concatenate(out)


def pair_scores(randomizer: Any, x0: np.ndarray, x1: np.ndarray, score: Callable[[np.ndarray], np.ndarray], width: int) -> Scores:
    """Scores of ``randomizer.release`` on the rows ``x0`` and ``x1`` (reports ``width`` values wide)."""

    def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        null = repeated_scores(randomizer.release, x0, score, n, rng, width)
        alt = repeated_scores(randomizer.release, x1, score, n, rng, width)
        return null, alt

    return scores


def antipodal_scores(
    randomizer: Any, dim: int, llr: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
) -> Scores:
    """The pair +-clip e_1 (opposite points of the clip ball along one axis), scored by ``llr(y, x0, x1)``."""
    x0 = np.zeros((1, dim))
    x0[0, 0] = randomizer.clip
    x1 = -x0
    return pair_scores(randomizer, x0, x1, lambda y: llr(y, x0, x1), dim)


def label_scores(channel: Any) -> Scores:
    """A label channel's pair, labels 0 and 1, scored by the log ratio of its transition matrix."""
    logt = np.log(channel.transition_matrix())
    weights = logt[1] - logt[0]

    def scores(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        null = channel.release(np.zeros(n, dtype=np.int64), rng)
        alt = channel.release(np.ones(n, dtype=np.int64), rng)
        return weights[null], weights[alt]

    return scores
