"""A regex word tokenizer and the word vocabulary built from the server's public data."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

PAD, UNK, SEP = "<pad>", "<unk>", "<sep>"
_SPECIALS = (PAD, UNK, SEP)
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?|#\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words (with inner apostrophes), hashtags, and single punctuation marks."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Vocab:
    """Token list; id 0 is padding, 1 unknown, 2 the separator between a pair's sentences."""

    tokens: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.tokens[: len(_SPECIALS)] != _SPECIALS:
            raise ValueError(f"a vocabulary must start with {_SPECIALS}")
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("vocabulary tokens must be unique")
        object.__setattr__(self, "_index", {token: i for i, token in enumerate(self.tokens)})

    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 1, max_size: int = 30_000) -> Vocab:
        """The most frequent tokens of ``texts`` seen at least ``min_count`` times."""
        if min_count < 1 or max_size <= len(_SPECIALS):
            raise ValueError(f"need min_count >= 1 and max_size > {len(_SPECIALS)}")
        counts = Counter(token for text in texts for token in tokenize(text))
        ranked = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
        return cls(_SPECIALS + tuple(ranked[: max_size - len(_SPECIALS)]))

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, text: str) -> list[int]:
        """Token ids of ``text`` (unknown words map to the unknown id)."""
        unk = self._index[UNK]
        return [self._index.get(token, unk) for token in tokenize(text)]

    def batch(
        self, texts: Sequence[str], texts2: Sequence[str] | None, max_length: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Padded id matrix (n, longest) and lengths; a pair is ``a <sep> b``.

        Inputs are cut to ``max_length`` tokens; a pair's two sentences share the budget,
        each keeping at least half of it unless the other needs less. An empty input
        becomes one unknown token.
        """
        rows = []
        for i, text in enumerate(texts):
            first = self.ids(text)
            if texts2 is None:
                row = first[:max_length]
            else:
                second = self.ids(texts2[i])
                budget = max_length - 1
                keep2 = min(len(second), max(budget // 2, budget - len(first)))
                row = first[: budget - keep2] + [self._index[SEP]] + second[:keep2]
            rows.append(row or [self._index[UNK]])
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        out = np.zeros((len(rows), int(lengths.max(initial=1))), dtype=np.int64)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out, lengths
