"""Who holds what: the run's users and their records, derived deterministically from the config.

Training records come from the dataset's train split and query records from its dev split,
each partitioned among users with the run's scheme, so every node of a simulation (and
the server's simulation-only baselines) rebuilds the same assignment from the run seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.configuration.sections import HELDOUT, DataSpec, heldout_size
from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.device.record_ids import record_ids
from ldpfed.fed.runtime.user import UserRecords


def hosted_users(num_users: int, partition_id: int, num_partitions: int) -> list[int]:
    """The users a node hosts: user u lives on node u mod num_partitions."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is outside [0, {num_partitions})")
    return list(range(partition_id, num_users, num_partitions))


@dataclass(frozen=True)
class Population:
    """The datasets of a run and each user's training and query record indices."""

    train: TextDataset
    dev: TextDataset
    train_parts: tuple[np.ndarray, ...]
    query_parts: tuple[np.ndarray, ...]

    @classmethod
    def of_device(cls, data: str) -> "Population":
        """A device's own records, as its one user holds them: every training record and every dev record
        (queries), in the order of its files. Nothing of the run config shapes it (design.md section 2b): a
        partition the server chose would group the records by label or content (issue 39, finding 1)."""
        train = load_dataset(data, "train")
        dev = load_dataset(data, "dev")
        return cls(train, dev, (np.arange(len(train)),), (np.arange(len(dev)),))

    @classmethod
    def build(cls, data: DataSpec, seed: int, cache: str | Path | None = None) -> "Population":
        """Load the run's data (its data section) and partition it among ``data.users`` users with the run ``seed``;
        the cuts are kept in and read from the run's ``cache`` folder (fed.data.partition_cache), if given."""
        from ldpfed.fed.data.partition import natural_partition, partition

        train = load_dataset(data.data, "train")
        dev = load_dataset(data.data, "dev")
        check_split_labels(data.data, train, dev)
        train = limited(train, data, seed)
        if len(train) < data.users:
            raise ValueError(f"the train split has {len(train)} records, fewer than --users {data.users}")
        if data.partition == "natural":
            train_parts, query_parts = natural_partition(train.groups, dev.groups, data.users, seed, data.data)
            return cls(train, dev, tuple(train_parts), tuple(query_parts))
        train_parts = partition(train.labels, data.users, data.partition, seed, train.groups, cache)
        # Fewer dev records than users: a seeded random subset of users hold the queries, one or
        # more each; the others hold none (they do not evaluate).
        holders = np.arange(data.users)
        if len(dev) < data.users:
            holders = np.sort(np.random.default_rng(seed + 2).choice(data.users, len(dev), replace=False))
        query_parts = [np.zeros(0, np.int64)] * data.users
        if len(holders):
            parts = partition(dev.labels, len(holders), data.partition, seed + 1, dev.groups, cache)
            for user, part in zip(holders.tolist(), parts):
                query_parts[user] = part
        return cls(train, dev, tuple(train_parts), tuple(query_parts))


def limited(train: TextDataset, data: DataSpec, seed: int) -> TextDataset:
    """The training records a run's users hold: all of ``train``, or the seeded sample of ``--train-limit`` of them;
    never a record withheld for ``--public heldout:N`` (:func:`withheld`)."""
    keep, _ = _split_heldout(len(train), data, seed)
    return train if keep is None else train.subset(keep)


def withheld(train: TextDataset, data: DataSpec, seed: int, size: int) -> TextDataset:
    """``size`` records of the task's ``train`` split that no user holds: the server's ``heldout:N`` public data
    (simulation only), the first ``size`` of those the run withholds. Raises ValueError when it withholds fewer."""
    _, taken = _split_heldout(len(train), data, seed)
    if taken is None or size > max(heldout_size(data.public) or 0, heldout_size(data.projection_public) or 0):
        raise ValueError(f"the run withholds fewer than {size} training records: give --public or --projection-public {HELDOUT}:{size}")
    return train.subset(np.sort(taken[:size]))


HELDOUT_STREAM = 41
"""Seed stream of the withheld records' order (the users' sample keeps the run seed's own)."""


def _split_heldout(records: int, data: DataSpec, seed: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Sorted indices of the users' training records (None: all) and the withheld records in their order
    (None: none). The withheld records are the first N of one seeded order, so that a smaller N takes a part of
    a larger one's; with --train-limit they come from outside its sample, which stays what it is without them."""
    sizes = [n for n in (heldout_size(data.public), heldout_size(data.projection_public)) if n is not None]
    keep = None
    if data.train_limit and data.train_limit < records:
        keep = np.sort(np.random.default_rng(seed).choice(records, data.train_limit, replace=False))
    if not sizes:
        return keep, None
    pool = np.setdiff1d(np.arange(records), keep) if keep is not None else np.arange(records)
    if max(sizes) > len(pool) - (0 if keep is not None else data.users):
        outside = f"outside the --train-limit sample of {data.train_limit}" if keep is not None else "beside the users' own"
        raise ValueError(
            f"--public {HELDOUT}:{max(sizes)} needs {max(sizes)} training records {outside}; the train split has {records}"
        )
    order = np.random.default_rng([seed, HELDOUT_STREAM]).permutation(pool)
    if keep is None:
        keep = np.sort(order[max(sizes):])
    return keep, order


def check_split_labels(spec: str, train: TextDataset, dev: TextDataset) -> None:
    """Refuse a dev split with a label id the train split never has where no schema names the labels.

    Without names (a folder without labels.txt) the task's labels are the ids the train split holds; a label
    only the dev split has would be a class the classifier never sees, counted silently as an error. With
    names (labels.txt, a Hugging Face dataset's) every split is read against them and such a label is known.
    """
    if dev.num_labels <= train.num_labels or any(name != str(i) for i, name in enumerate(dev.label_names)):
        return
    extra = sorted({int(label) for label in dev.labels if label >= train.num_labels})
    raise ValueError(
        f"{spec}: the dev split holds label {', '.join(map(str, extra[:8]))}, which the train split never has "
        f"(its labels are 0..{train.num_labels - 1}), and no labels.txt names the task's labels. Name every label "
        "in labels.txt (id<TAB>name lines) or drop those dev records"
    )


def user_records(
    population: Population,
    train_x: np.ndarray,
    dev_x: np.ndarray,
    users: list[int],
    secret: bytes | None = None,
) -> dict[int, UserRecords]:
    """Clean records of the given users from the features of the train and dev splits.

    With ``secret``, every record carries its stable id (fed.device.record_ids) for the ledger store.
    """
    train_ids = dev_ids = None
    if secret is not None:
        train_ids, dev_ids = record_ids([population.train, population.dev], secret)
    return {
        u: UserRecords(
            train=train_x[population.train_parts[u]],
            train_labels=population.train.labels[population.train_parts[u]],
            query=dev_x[population.query_parts[u]],
            query_labels=population.dev.labels[population.query_parts[u]],
            ids=None
            if secret is None
            else np.concatenate([train_ids[population.train_parts[u]], dev_ids[population.query_parts[u]]]),
        )
        for u in users
    }
