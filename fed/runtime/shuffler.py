"""The shuffler of the shuffle model: what passes between the nodes and the server in one round.

It takes every node's release reply of a round, keeps only what a report itself says (the
noisy vector, its released label, and the randomizer and label channel needed to read it),
drops where it came from (user ids, node, host, slots, ledger figures) and permutes the
reports of each randomizer uniformly. The server is handed :class:`ShuffledBatch` objects only.

In a deployment this is a service the server does not run (docs/privacy_models.md); in the
simulation it sits inside the ServerApp process, between the replies and the classifier, so
the amplified figure (fed.privacy.shuffle) describes what a server behind such a service sees.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpfed.fed.runtime.node import NodeReply


@dataclass(frozen=True)
class ShuffledBatch:
    """One round's reports of one randomizer, in a uniformly random order, without origin."""

    reports: np.ndarray
    labels: np.ndarray
    randomizer: dict[str, Any]
    label_channel: dict[str, Any]


class Shuffler:
    """Strips origin and permutes; ``rng`` draws the permutations (seeded only in a simulation)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def shuffle(self, parts: Iterable[NodeReply]) -> list[ShuffledBatch]:
        """The reports of ``parts``, pooled per (randomizer, label channel) and permuted.

        A part that carries sums instead of reports cannot be shuffled: ValueError.
        """
        pooled: dict[str, tuple[list[np.ndarray], list[np.ndarray], dict[str, Any], dict[str, Any]]] = {}
        for part in parts:
            if part.sums is not None:
                raise ValueError("the shuffler takes individual reports, not a node's sums of them")
            if not len(part.reports):
                continue
            key = json.dumps([part.randomizer, part.label_channel], sort_keys=True)
            reports, labels, _, _ = pooled.setdefault(key, ([], [], part.randomizer, part.label_channel))
            reports.append(part.reports)
            labels.append(part.labels)
        batches = []
        for key in sorted(pooled):
            reports, labels, randomizer, channel = pooled[key]
            stacked, stacked_labels = np.concatenate(reports), np.concatenate(labels)
            order = self.rng.permutation(len(stacked))
            batches.append(ShuffledBatch(stacked[order], stacked_labels[order], randomizer, channel))
        return batches
