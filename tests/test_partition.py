"""Partitioning records among users, and splitting users' records into train and query."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset
from flwr_datasets.partitioner import IidPartitioner

from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.sections import DataSpec
from ldpfed.fed.data.partition import partition, split_train_query
from ldpfed.fed.data.population import Population

LABELS = np.random.default_rng(0).integers(0, 4, size=1200)


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    joined = np.concatenate(parts)
    assert len(joined) == n and np.array_equal(np.sort(joined), np.arange(n))
    assert all(len(part) >= 1 and part.dtype == np.int64 for part in parts)


def _mean_label_entropy(parts: list[np.ndarray], labels: np.ndarray) -> float:
    entropies = []
    for part in parts:
        p = np.bincount(labels[part], minlength=4) / len(part)
        entropies.append(-(p[p > 0] * np.log(p[p > 0])).sum())
    return float(np.mean(entropies))


@pytest.mark.parametrize(
    ("scheme", "users"),
    [("iid", 50), ("dirichlet:0.3", 50), ("dirichlet:0.05", 300), ("size:linear", 30),
     ("size:square", 10), ("size:exponential", 5), ("size:lognormal:1.5", 400), ("iid", 1200)],
)
def test_every_record_goes_to_exactly_one_user(scheme: str, users: int) -> None:
    parts = partition(LABELS, users, scheme, seed=1)
    assert len(parts) == users
    _assert_exact_cover(parts, len(LABELS))
    assert all(np.array_equal(a, b) for a, b in zip(parts, partition(LABELS, users, scheme, seed=1), strict=True))


def test_iid_matches_flwr_iid_partitioner() -> None:
    order = np.random.default_rng(1).permutation(len(LABELS))
    flwr = IidPartitioner(num_partitions=7)
    flwr.dataset = Dataset.from_dict({"row": order})
    expected = [np.sort(flwr.load_partition(i)["row"]) for i in range(7)]
    ours = partition(LABELS, 7, "iid", seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(ours, expected, strict=True))


def test_dirichlet_skews_labels() -> None:
    iid = _mean_label_entropy(partition(LABELS, 40, "iid", seed=2), LABELS)
    skewed = _mean_label_entropy(partition(LABELS, 40, "dirichlet:0.1", seed=2), LABELS)
    assert iid > 1.3  # close to log(4) = 1.39
    assert skewed < iid - 0.4


def test_dirichlet_with_groups_skews_groups() -> None:
    groups = np.random.default_rng(5).integers(0, 4, size=len(LABELS))
    plain = _mean_label_entropy(partition(LABELS, 10, "dirichlet:0.3", seed=0), groups)
    grouped = _mean_label_entropy(partition(LABELS, 10, "dirichlet:0.3", seed=0, groups=groups), groups)
    assert plain > 1.3  # groups independent of labels: a label skew leaves them mixed
    assert grouped < plain - 0.15


def test_size_schemes_skew_sizes() -> None:
    sizes = sorted(len(p) for p in partition(LABELS, 30, "size:linear", seed=0))
    assert sizes[-1] > 10 * sizes[0]
    lognormal = [len(p) for p in partition(LABELS, 100, "size:lognormal:1.5", seed=0)]
    assert max(lognormal) > 5 * np.median(lognormal)


@pytest.mark.parametrize(
    ("scheme", "users", "message"),
    [("bogus", 3, "unknown scheme"), ("iid", 1201, "only 1200 records"), ("dirichlet:-1", 3, "positive"),
     ("dirichlet:abc", 3, "not a number"), ("size:cubic", 3, "unknown size kind"),
     ("size:exponential", 800, "size:exponential"), ("iid", 0, "at least 1")],
)
def test_bad_schemes_raise(scheme: str, users: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        partition(LABELS, users, scheme, seed=0)


def test_split_train_query() -> None:
    parts = partition(LABELS, 60, "size:lognormal:1.0", seed=3)
    train, query = split_train_query(parts, 0.25, seed=4)
    for part, tr, qu in zip(parts, train, query, strict=True):
        assert len(tr) >= 1 and not np.intersect1d(tr, qu).size
        assert np.array_equal(np.sort(np.concatenate([tr, qu])), part)
        assert len(qu) == min(len(part) - 1, round(0.25 * len(part)))
    again = split_train_query(parts, 0.25, seed=4)
    assert all(np.array_equal(a, b) for a, b in zip(query, again[1], strict=True))
    with pytest.raises(ValueError, match="fraction"):
        split_train_query(parts, 1.0, seed=0)


def test_partition_does_not_import_flwr() -> None:
    # design.md section 3: fed/ must not import flwr; flwr_datasets (used here) must not either.
    code = (
        "import sys, fed.data.partition\n"
        "bad = sorted(m for m in sys.modules if m == 'flwr' or m.startswith('flwr.'))\n"
        "assert not bad, bad"
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_natural_partition_keeps_each_user_within_one_source() -> None:
    config = RunSpec.of(data="../shared/data/sentiment_labelled_sentences", users=10, partition="natural", seed=3)
    population = Population.build(config.data, config.seed)
    train, dev = population.train, population.dev
    sources = [np.unique(train.groups[part]) for part in population.train_parts]
    assert all(len(s) == 1 for s in sources)  # amazon, imdb or yelp, never a mix
    for part, source in zip(population.query_parts, sources):
        assert np.all(dev.groups[part] == source[0])  # queries from the user's own source
    for split, parts in ((train, population.train_parts), (dev, population.query_parts)):
        everything = np.concatenate(parts)
        assert len(everything) == len(split) and len(np.unique(everything)) == len(split)  # each record once
    holders = np.bincount([s[0] for s in sources], minlength=3)
    shares = np.bincount(train.groups, minlength=3) / len(train)
    assert holders.sum() == 10 and np.all(holders >= 1) and np.all(np.abs(holders - 10 * shares) < 1)
    again = Population.build(config.data, config.seed)
    assert all(np.array_equal(a, b) for a, b in zip(population.train_parts, again.train_parts))


@pytest.mark.parametrize(
    "data,users,problem",
    [("../shared/data/sst2", 10, "needs a source column, and ../shared/data/sst2 has none"), ("generated:600", 3, "4 sources")],
)
def test_natural_partition_refuses_data_without_sources_or_too_few_users(data: str, users: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Population.build(DataSpec(data=data, users=users, partition="natural"), seed=0)
