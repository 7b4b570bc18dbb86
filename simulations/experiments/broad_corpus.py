"""Offline test of a broad public corpus for the default projection (issue 29, item 4): does a PCA fitted on real
sentences from many domains, none of them an evaluated task or its source, give one fixed default (dimension and
clip) within 3 points of the best cell on SST-2, SNIPS, AG News and TweetEval sentiment?

The corpus (fixed before any task accuracy was seen): a seeded sample of distinct, non-empty first sentences from
each source in SOURCES (numpy default_rng([0, source index]) picks the records, without replacement), in SOURCES
order. 'broad' is all of it; 'broad-ship' only the sources a package may redistribute (SHIPPABLE). Excluded as
evaluated tasks or sharing their source: sst2, mr (Rotten Tomatoes, SST-2's source), snips, ag_news, tweeteval
sentiment. Each cell fits the tool's PCAProjection on the corpus's MiniLM encodings (encode_cached) and runs the
offline release of pilot_dim (the run's calibrated Gaussian from make_plan, ReportAggregator's noise-aware LDA,
5 seeds). The clip is 1, or the median L2 norm of the public corpus after the projection ('clip public median':
not a tool option; it tests whether a clip read from public norms helps). Every fixed cell of pilot_dim
(public 'generated') runs again with the same seeds, so the best cell per task is taken over all cells.

Offline, not the ServerApp: same reduced setting as pilot_dim (seeded 8,000 training records, one release per
record, worst-case epsilon, delta 1e-5, no partition, local inference on the whole evaluation split).

    python -m simulations.experiments.broad_corpus --epsilons 8 3 1 --seeds 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fed.data.dataset import TextDataset
from fed.data.loaders import read_tsv
from fed.encoders.cache import encode_cached
from fed.encoders.factory import make_encoder
from fed.encoders.projection import PCAProjection
from fed.runtime.assets import default_cache_dir
from fed.spec.run_spec import RunSpec
from simulations.experiments.defaults_sweep import DATASETS, REPORT
from simulations.experiments.local_run import SHARED, single_threaded_blas
from simulations.experiments.pilot_dim import CANDIDATES, CELLS, fixed_cell, randomizer, summary, task_encodings

SOURCES: tuple[tuple[str, int], ...] = (
    ("banking77/train.tsv", 3000),
    ("sms_spam/all.tsv", 2500),
    ("sentiment_labelled_sentences/amazon_cells_labelled.tsv", 900),
    ("sentiment_labelled_sentences/imdb_labelled.tsv", 900),
    ("sentiment_labelled_sentences/yelp_labelled.tsv", 900),
    ("tweeteval/emotion/train.tsv", 800),
    ("tweeteval/hate/train.tsv", 800),
    ("tweeteval/irony/train.tsv", 800),
    ("tweeteval/offensive/train.tsv", 800),
    ("tweeteval/emoji/train.tsv", 800),
    ("qqp/train.tsv", 1500),
    ("cola/train.tsv", 1500),
    ("rte/train.tsv", 750),
    ("mrpc/train.tsv", 750),
)
"""(file under the data folder, records sampled): the broad corpus's recipe, 16,700 sentences (8,200 of them shippable)."""
SHIPPABLE = frozenset(("banking77", "sms_spam", "sentiment_labelled_sentences"))
"""Sources whose licence lets a package redistribute them (SOURCES.md): BANKING77 CC BY 4.0; SMS Spam Collection
free to use with citation; Sentiment Labelled Sentences (UCI, CC BY 4.0 as usually listed, not verified here)."""
CORPORA = {"broad": None, "broad-ship": SHIPPABLE}
"""Corpus name -> the sources it keeps (None: all)."""


def broad_corpus(root: Path, keep: frozenset[str] | None = None) -> TextDataset:
    """The recipe's sample (label: the source's index in SOURCES), restricted to the sources in ``keep``."""
    texts: list[str] = []
    labels: list[int] = []
    for index, (file, size) in enumerate(SOURCES):
        distinct = list(dict.fromkeys(t.strip() for t in read_tsv(root / file)[0] if t.strip()))
        picked = np.random.default_rng([0, index]).choice(len(distinct), size, replace=False)
        if keep is None or file.split("/")[0] in keep:
            texts += [distinct[i] for i in np.sort(picked)]
            labels += [index] * size
    return TextDataset(name="broad", texts=tuple(texts), texts2=None, labels=np.array(labels),
                       label_names=tuple(file for file, _ in SOURCES))
