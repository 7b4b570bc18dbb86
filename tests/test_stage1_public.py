"""Stage 1's public set may add TweetEval tweets (never SST-2 or MR); seed000_tables runs QQP pairs."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from ldpfed.simulations.reproductions import _seed000_stage1_run as runner

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (DATA / "tweeteval" / "sentiment").is_dir(), reason="needs ../shared/data")


def test_public_tweets_are_positive_and_negative_tweets_only() -> None:
    from ldpfed.fed.data.loaders import load_dataset

    base = runner.public_set(DATA, "sentiment_labelled_sentences")
    both = runner.public_set(DATA, "sentiment_labelled_sentences", 500)
    assert len(both) == len(base) + 500 and both.texts[: len(base)] == base.texts
    raw = load_dataset(str(DATA / "tweeteval" / "sentiment"), "test")
    label_of = {}
    for text, label in zip(raw.texts, raw.labels):
        label_of.setdefault(text, set()).add(int(label))
    added = both.texts[len(base):]
    assert all(1 not in label_of[t] for t in added)  # no neutral tweet
    expected = [1 if 2 in label_of[t] else 0 for t in added]
    assert both.labels[len(base):].tolist() == expected  # 2 (positive) -> 1, 0 (negative) -> 0
    with pytest.raises(ValueError, match="public_tweets"):
        runner.tweets(DATA, int((raw.labels != 1).sum()) + 1)


def test_seed000_tables_qqp_uses_its_epsilons_and_pairs() -> None:
    from ldpfed.simulations.reproductions import seed000_tables as tables

    context = tables.Context(DATA, 0.1, 10, 1, "qqp")
    own, users, dev = context.splits()
    assert own.texts2 is not None and len(own) + len(users) == 8_999 and len(dev) == 1_000
    args = argparse.Namespace(latent_records=100, token_records=50, tables=["4", "5"], dims=[128], accountings=["paper"],
                             token_servers=list(tables.SERVERS))
    epsilons = {s["epsilon"] for s in tables.settings(args, context) if s["accounting"] == "paper"}
    assert epsilons == set(tables.PAPER["qqp"]["table4"])
    vocab_batch = []

    class Vocab:
        def batch(self, texts, texts2, length):  # noqa: ANN001, ANN202
            vocab_batch.append(texts2)
            return np.ones((len(texts), 3), dtype=np.int64), None

    context.encoder = lambda dim: argparse.Namespace(vocab=Vocab())  # type: ignore[method-assign]
    assert context.ids(dev.subset([0, 1])).shape == (2, tables.LENGTH)
    assert vocab_batch == [dev.subset([0, 1]).texts2]  # the second question goes in too
