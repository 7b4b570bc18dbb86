"""Split a dataset's records among users with Flower Datasets partitioners.

Schemes (``scheme`` argument of ``partition``):

- "iid": a seeded shuffle cut into equal contiguous shares (sizes differ by at most one),
  the same cut ``IidPartitioner`` makes; done with ``SizePartitioner`` because that
  exposes every user's indices at once (``IidPartitioner`` needs one ``load_partition``
  call per user, milliseconds each, too slow for thousands of users).
- "dirichlet:<alpha>": ``DirichletPartitioner`` over the label (or over the (label, group)
  cell when ``groups`` is given, so users also differ in writing style); smaller alpha
  means more skew. Run with ``min_partition_size=0``; a user left with no record then
  gets one taken at random from the currently largest user.
- "size:linear", "size:square", "size:exponential": ``LinearPartitioner``,
  ``SquarePartitioner``, ``ExponentialPartitioner`` (user sizes proportional to i, i^2,
  e^i over a shuffle). Every user needs at least one record, so linear needs about
  num_users^2 / 2 records and exponential about e^num_users: few users only.
- "size:lognormal:<sigma>": ``SizePartitioner`` with sizes 1 + Multinomial(n - users,
  w / sum(w)), w ~ LogNormal(0, sigma): a heavy-tailed size skew that works at any scale.

- "natural" (:func:`natural_partition`): by the data's own source column (the file a record
  came from, e.g. amazon / imdb / yelp, or a generated corpus's writing style): each user holds
  training and query records of one source only, and each source gets users in proportion to
  its training records (at least one).

The size schemes hand the sizes to users in a seeded random order. All schemes
shuffle the records first (seeded), and return sorted indices per user.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ldpfed.fed.data import partition_cache
from ldpfed.fed.heterogeneity.shares import share_counts

if TYPE_CHECKING:  # imported where used: Flower Datasets brings seaborn and matplotlib, seconds of a device's setup
    from datasets import Dataset

_SIZE_KINDS = {"linear": "LinearPartitioner", "square": "SquarePartitioner", "exponential": "ExponentialPartitioner"}
"""Size schemes with a partitioner of their own (its name in flwr_datasets.partitioner)."""


def partition(
    labels: np.ndarray,
    num_users: int,
    scheme: str,
    seed: int,
    groups: np.ndarray | None = None,
    cache_dir: str | Path | None = None,
) -> list[np.ndarray]:
    """Assign every record to exactly one user; with ``cache_dir``, the cut is read from there when a process made
    it before, and stored there when not (fed.data.partition_cache).

    Parameters
    ----------
    labels:
        Integer label of each record.
    num_users:
        Number of users; each gets at least one record.
    scheme:
        "iid", "dirichlet:<alpha>", "size:linear|square|exponential" or
        "size:lognormal:<sigma>" (see the module docstring).
    seed:
        Seed of the shuffle and of the partitioner's draws.
    groups:
        Optional integer group of each record (e.g. writing style); only "dirichlet" uses
        it, skewing users over (label, group) cells.
    cache_dir:
        The run's cache folder, or None (no cache).

    Returns
    -------
    list of np.ndarray
        ``num_users`` sorted int64 index arrays that together cover every record once.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-d integer array, got {labels.dtype} {labels.shape}")
    if num_users < 1:
        raise ValueError(f"num_users must be at least 1, got {num_users}")
    if num_users > len(labels):
        raise ValueError(f"cannot give {num_users} users at least one record each: only {len(labels)} records")
    keys = labels.astype(np.int64)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != labels.shape or not np.issubdtype(groups.dtype, np.integer):
            raise ValueError(f"groups must be {len(labels)} integers, got {groups.dtype} {groups.shape}")
        if groups.min() < 0:
            raise ValueError("groups must be non-negative")
        keys = keys * (int(groups.max()) + 1) + groups
    if cache_dir is None:
        return _cut(keys, num_users, scheme, seed)
    path = partition_cache.path_of(cache_dir, labels, num_users, scheme, seed, groups)
    shares = partition_cache.read(path, len(labels), num_users)
    if shares is None:
        shares = _cut(keys, num_users, scheme, seed)
        partition_cache.write(path, shares)
    return shares


def _cut(keys: np.ndarray, num_users: int, scheme: str, seed: int) -> list[np.ndarray]:
    """:func:`partition`'s shares of records with the (label, group) ``keys``, arguments checked."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    kind, _, arg = scheme.partition(":")
    try:
        _check_scheme(kind, arg)
        if num_users == 1:  # every scheme gives the one user every record (a device's usual case): no partitioner
            return [np.arange(len(keys), dtype=np.int64)]
        from datasets import Dataset

        table = Dataset.from_dict({"key": keys[order]})
        if kind == "iid" and not arg:
            shares = _iid(table, num_users)
        elif kind == "dirichlet":
            shares = _dirichlet(table, num_users, _positive(arg), seed, rng)
        elif kind == "size":
            shares = _size(table, num_users, arg, rng)
        else:
            raise ValueError(
                "unknown scheme; use iid, dirichlet:<alpha>, "
                "size:linear, size:square, size:exponential, size:lognormal:<sigma> or natural"
            )
    except ValueError as err:
        context = f"partition scheme {scheme!r} with {num_users} users and {len(keys)} records"
        raise ValueError(f"{context}: {err}") from err
    return [np.sort(order[np.asarray(share, dtype=np.int64)]) for share in shares]


NATURAL_STREAM = 17
"""Seed tag of the natural partition's draws."""


def natural_partition(
    train_groups: np.ndarray | None, dev_groups: np.ndarray | None, num_users: int, seed: int, name: str = "the data"
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Training and query record indices per user, every user within one source group.

    Sources get users in proportion to their training records (largest remainder), at least one
    each; which users (ids, hence nodes) hold which source is a seeded draw. Within a source, the
    records are shuffled and cut into near-equal shares, queries likewise among the same users
    (a user gets none when its source has fewer query records than users). Hand-written:
    flwr-datasets' NaturalIdPartitioner makes one partition per source, not several users per
    source with their queries from the same source.
    """
    if train_groups is None or dev_groups is None:
        raise ValueError(
            f"--partition natural needs a source column, and {name} has none: use data made of several files "
            "(e.g. ../shared/data/sentiment_labelled_sentences) or generated:<n>"
        )
    sources = np.unique(train_groups)
    if num_users < len(sources):
        raise ValueError(f"--partition natural: {name} has {len(sources)} sources, which need at least as many users, got {num_users}")
    sizes = np.array([(train_groups == g).sum() for g in sources], dtype=np.float64)
    users_per_source = 1 + share_counts(list(sizes / sizes.sum()), num_users - len(sources))
    if np.any(users_per_source > sizes):
        raise ValueError(f"--partition natural: a source of {name} has fewer training records than the users it would get")
    rng = np.random.default_rng([seed, NATURAL_STREAM])
    source_of = np.empty(num_users, dtype=np.int64)
    source_of[rng.permutation(num_users)] = np.repeat(np.arange(len(sources)), users_per_source)
    train_parts = [np.zeros(0, np.int64)] * num_users
    query_parts = [np.zeros(0, np.int64)] * num_users
    for k, source in enumerate(sources):
        holders = np.flatnonzero(source_of == k)
        for parts, groups in ((train_parts, train_groups), (query_parts, dev_groups)):
            records = rng.permutation(np.flatnonzero(groups == source))
            for user, share in zip(holders, np.array_split(records, len(holders))):
                parts[user] = np.sort(share).astype(np.int64)
    return train_parts, query_parts


def _check_scheme(kind: str, arg: str) -> None:
    """ValueError unless ``kind:arg`` names a scheme of :func:`partition` with valid parameters."""
    if kind == "iid" and not arg:
        return
    if kind == "dirichlet":
        _positive(arg)
        return
    if kind == "size":
        size_kind, _, param = arg.partition(":")
        if size_kind == "lognormal":
            _positive(param)
            return
        if size_kind in _SIZE_KINDS and not param:
            return
        raise ValueError("unknown size kind; use linear, square, exponential or lognormal:<sigma>")
    raise ValueError(
        "unknown scheme; use iid, dirichlet:<alpha>, "
        "size:linear, size:square, size:exponential, size:lognormal:<sigma> or natural"
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"parameter {text!r} is not a number") from None
    if not value > 0 or not np.isfinite(value):
        raise ValueError(f"parameter must be a positive number, got {text!r}")
    return value


def _iid(table: Dataset, num_users: int) -> list[list[int]]:
    from flwr_datasets.partitioner import SizePartitioner

    base, extra = divmod(len(table), num_users)
    return _indices(SizePartitioner([base + (user < extra) for user in range(num_users)]), table)


def _dirichlet(
    table: Dataset, num_users: int, alpha: float, seed: int, rng: np.random.Generator
) -> list[list[int]]:
    from flwr_datasets.partitioner import DirichletPartitioner

    partitioner = DirichletPartitioner(
        num_partitions=num_users,
        partition_by="key",
        alpha=alpha,
        min_partition_size=0,
        self_balancing=False,
        shuffle=False,
        seed=seed,
    )
    partitioner.dataset = table
    partitioner.num_partitions  # noqa: B018 - computes the assignment
    # flwr-datasets 0.6 exposes no public index map for this partitioner, and one
    # load_partition call per user costs milliseconds each.
    shares = [list(partitioner._partition_id_to_indices[user]) for user in range(num_users)]
    sizes = np.array([len(share) for share in shares])
    for user in np.flatnonzero(sizes == 0):
        donor = int(sizes.argmax())
        shares[user].append(shares[donor].pop(int(rng.integers(sizes[donor]))))
        sizes[user], sizes[donor] = 1, sizes[donor] - 1
    return shares


def _size(table: Dataset, num_users: int, arg: str, rng: np.random.Generator) -> list[list[int]]:
    import flwr_datasets.partitioner as partitioners

    kind, _, param = arg.partition(":")
    if kind == "lognormal":
        weights = rng.lognormal(0.0, _positive(param), size=num_users)
        extra = rng.multinomial(len(table) - num_users, weights / weights.sum())
        partitioner = partitioners.SizePartitioner([int(size) for size in 1 + extra])
    elif kind in _SIZE_KINDS and not param:
        partitioner = getattr(partitioners, _SIZE_KINDS[kind])(num_users)
    else:
        raise ValueError("unknown size kind; use linear, square, exponential or lognormal:<sigma>")
    with np.errstate(over="ignore", invalid="ignore"):
        shares = _indices(partitioner, table)
    return [shares[user] for user in rng.permutation(num_users)]


def _indices(partitioner: Any, table: Dataset) -> list[list[int]]:
    """Every user's row positions from a partitioner that exposes them publicly."""
    partitioner.dataset = table
    partitioner.num_partitions  # noqa: B018 - computes the assignment
    mapping = partitioner.partition_id_to_indices
    return [list(mapping[user]) for user in range(len(mapping))]


def split_train_query(
    parts: list[np.ndarray], fraction: float, seed: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each user's records into training records and query records.

    A user with n records gets min(n - 1, round(fraction * n)) query records, chosen at
    random (its own stream from (seed, user)), so every user keeps at least one training
    record.

    Parameters
    ----------
    parts:
        Record indices per user, e.g. from ``partition``.
    fraction:
        Share of each user's records used as queries, in [0, 1).
    seed:
        Seed of the choice.

    Returns
    -------
    (train, query)
        Two lists of sorted int64 index arrays, one entry per user.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"query fraction must lie in [0, 1), got {fraction}")
    train, query = [], []
    for user, part in enumerate(parts):
        part = np.asarray(part, dtype=np.int64)
        if part.size == 0:
            raise ValueError(f"user {user} has no records")
        count = min(part.size - 1, int(round(fraction * part.size)))
        chosen = np.random.default_rng([seed, user]).permutation(part.size)
        query.append(np.sort(part[chosen[:count]]))
        train.append(np.sort(part[chosen[count:]]))
    return train, query
