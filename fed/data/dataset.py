"""A labelled text dataset held in memory: sentences (or pairs), labels, optional groups."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TextDataset:
    """Labelled sentences or sentence pairs.

    Parameters
    ----------
    name:
        Where the data came from (not part of the fingerprint).
    texts:
        First sentence of each record.
    texts2:
        Second sentence of each record for pair tasks, else None.
    labels:
        Integer label of each record (int64).
    label_names:
        Name of each label id.
    groups:
        Optional integer group of each record (int64): the writing style of a generated
        record, or the source file of a folder read as several files. Partitions can use
        it to give users different styles. None when the data has no groups.
    group_names:
        Name of each group id (empty when ``groups`` is None).
    """

    name: str
    texts: tuple[str, ...]
    texts2: tuple[str, ...] | None
    labels: np.ndarray
    label_names: tuple[str, ...]
    groups: np.ndarray | None = None
    group_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.texts)
        if self.texts2 is not None and len(self.texts2) != n:
            raise ValueError(f"{self.name}: {len(self.texts2)} second sentences for {n} records")
        object.__setattr__(self, "labels", self._ids(self.labels, "labels", "label", len(self.label_names)))
        if self.groups is None:
            if self.group_names:
                raise ValueError(f"{self.name}: group_names given without groups")
            return
        object.__setattr__(self, "groups", self._ids(self.groups, "groups", "group", len(self.group_names)))

    def _ids(self, values: Any, field: str, kind: str, count: int) -> np.ndarray:
        """``values`` as one int64 id in [0, count) per record; ValueError naming ``field`` otherwise."""
        n = len(self.texts)
        ids = np.asarray(values)
        if ids.shape != (n,) or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{self.name}: {field} must be {n} integers, got {ids.dtype} {ids.shape}")
        if n and (ids.min() < 0 or ids.max() >= count):
            raise ValueError(f"{self.name}: {kind} ids must lie in [0, {count})")
        return ids.astype(np.int64, copy=False)

    @property
    def num_labels(self) -> int:
        """Number of label ids (length of ``label_names``)."""
        return len(self.label_names)

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, indices: Sequence[int] | np.ndarray) -> TextDataset:
        """The records at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise ValueError(f"{self.name}: subset index out of range for {len(self)} records")
        return TextDataset(
            name=self.name,
            texts=tuple(self.texts[i] for i in idx),
            texts2=None if self.texts2 is None else tuple(self.texts2[i] for i in idx),
            labels=self.labels[idx],
            label_names=self.label_names,
            groups=None if self.groups is None else self.groups[idx],
            group_names=self.group_names,
        )

    def fingerprint(self) -> str:
        """SHA-256 (hex) of the content: texts, second texts and labels, not the name."""
        digest = hashlib.sha256()
        for column in (self.texts, self.texts2 or ()):
            digest.update(len(column).to_bytes(8, "little"))
            for text in column:
                data = text.encode("utf-8")
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
        digest.update(b"pairs" if self.texts2 is not None else b"single")
        digest.update(self.labels.astype("<i8").tobytes())
        return digest.hexdigest()
