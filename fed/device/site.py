"""Where a node runs, and what follows from it: policy, state folder, data, entropy, owners.

On a device (any runtime that is not the simulation engine, fed.device.entropy) everything the
node's guarantee rests on comes from the device owner, through the node config given to
``flower-supernode --node-config``:

| key | meaning | default |
|---|---|---|
| ``policy`` | path of the owner's policy TOML (fed.device.policy) | strict defaults |
| ``state-dir`` | the node's own folder: ledger database, record-id key (fed.device.state), record store (fed.device.records), accounting figures (fed.privacy.figure_cache) | ``$LDPFED_STATE`` or ``~/.local/state/ldpfed`` |
| ``data`` | the device's dataset folder (train.tsv / dev.tsv), not inside the state folder | none: setup is refused |
| ``cache-dir`` | encodings and unpacked bundles, not inside the state folder | ``<state-dir>/cache`` |
| ``partition-id``, ``num-partitions`` | the id of the one user this device hosts (its slot among ``num-partitions`` devices) | 0, 1 |

A device serves only from a state folder its owner made (``ldpfed device init``), whose ledger
is bound to its record-id key (fed.device.state.open_state), and its process makes every
file and folder its owner's only (umask 077).

A device hosts one user, id ``partition-id``, holding every record of its data: training
records from ``train.tsv``, queries from ``dev.tsv``. The run config's ``data``, ``cache-dir``,
``users``, ``partition``, ``train_limit``, budgets, labels, enforcement and seed are ignored
there (issue 39, finding 1: a partition chosen by the server grouped the records by label). Inside the simulation engine the experimenter writes both sides, so the run options
serve as every simulated user's policy, data and seed.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.runtime.assets import default_cache_dir
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.state import DEVICE_UMASK, LEDGER_FILE, open_state
from ldpfed.fed.device.entropy import in_simulation_engine
from ldpfed.fed.heterogeneity.registry import encoding_groups, spec_groups
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.figure_cache import FIGURES_FILE, stop_store, use_store
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.data.loaders import label_schema
from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.requests import Refusal, RequestRefused

DEVICE_OWNER = "device"
HUB_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
"""Environment switches that keep Hugging Face's libraries off the network (local files and cache only)."""


@dataclass(frozen=True)
class Site:
    """A node's resolved environment.

    Attributes
    ----------
    simulation:
        Whether the node runs inside the simulation engine.
    config:
        The run config with the device's own data and cache folder put in (device), or as given.
    state_dir:
        Folder of the ledger database (and, on a device, the record-id key).
    ledger_file:
        The ledger database file.
    device_policy:
        The owner's policy (device only; a simulated node derives it from the plan).
    key:
        The device's record-id key, its state checked whole (device only).
    """

    simulation: bool
    config: RunSpec
    state_dir: Path
    ledger_file: Path
    device_policy: DevicePolicy | None
    key: bytes | None = field(default=None, repr=False)
    user: int = 0
    """The one user a device hosts (its node config's ``partition-id``); unused in a simulation."""

    @classmethod
    def resolve(cls, node_config: Mapping[str, Any], config: RunSpec, run_id: int, node_id: int) -> "Site":
        """The site of a node from its node config (device) or the run (simulation engine)."""
        if in_simulation_engine():
            stop_store()  # figures are computed in the process, as everywhere but on a device
            folder = default_cache_dir(config) / "simulation-ledgers" / f"run-{run_id}"
            return cls(True, config, folder, folder / f"node-{node_id}.sqlite", None)
        hub_offline()
        os.umask(DEVICE_UMASK)  # whatever this process writes (caches, SQLite's -wal/-shm) is the owner's only
        state = Path(str(node_config.get("state-dir") or os.environ.get("LDPFED_STATE") or Path.home() / ".local" / "state" / "ldpfed"))
        data = node_config.get("data")
        if not data:
            raise RequestRefused(
                "this device names no data: start flower-supernode with --node-config \"data=/path/to/folder ...\"",
                Refusal.NOT_SET_UP,
            )
        for name in ("data", "cache-dir"):
            value = node_config.get(name)
            if value and Path(str(value)).resolve().is_relative_to(state.resolve()):
                raise RequestRefused(
                    f"node-config {name}={value} lies inside the state folder {state}, which holds only the device's "
                    "record-id key, ledger and (by default) cache: name a folder outside it",
                    Refusal.NOT_SET_UP,
                )
        try:
            policy = DevicePolicy.load(node_config["policy"]) if node_config.get("policy") else DevicePolicy()
        except ValueError as error:
            raise RequestRefused(f"this device's policy is unusable: {error}", Refusal.NOT_SET_UP) from None
        try:
            key = open_state(state)
        except ValueError as error:
            raise RequestRefused(f"this device is not set up: {error}", Refusal.NOT_SET_UP) from None
        use_store(state / FIGURES_FILE, key)  # this process's accounting figures, authenticated under the device's key
        cache = str(node_config.get("cache-dir") or state / "cache")
        own = config.with_options(data=str(data), cache_dir=cache)
        return cls(False, own, state, state / LEDGER_FILE, policy, key, _device_user(node_config))

    def num_labels(self) -> int:
        """A device's label set: its data's schema (labels.txt, or the generated corpus's), else its policy's
        ``num_labels``; never the records' own labels (a device holding only label 0 would say 1)."""
        try:
            schema = label_schema(self.config.data.data)
        except ValueError as error:
            raise data_unusable(error) from None
        if schema is not None:
            return len(schema)
        if self.device_policy is None or self.device_policy.num_labels is None:
            raise RequestRefused(texts.device_label_set(self.config.data.data), Refusal.NOT_SET_UP)
        return self.device_policy.num_labels

    def policy(self, plan: PrivacyPlan, config: RunSpec | None = None) -> DevicePolicy:
        """What the node grants: the owner's policy, or in a simulation what the run options grant
        (``config``: a privacy tier's options, by default the run's)."""
        if self.device_policy is not None:
            return self.device_policy
        return DevicePolicy.from_run(config or self.config, plan)

    def encodings(self) -> list[tuple[dict[str, Any], np.ndarray | None]]:
        """How each group of simulated devices encodes (e.g. a device tier's token limit) and its users (a mask
        by user id), over the heterogeneity axes (fed.heterogeneity.registry); a device: [({}, None)], every
        user running the encoder as shipped."""
        if not self.simulation:
            return [({}, None)]
        return encoding_groups(self.config)

    def tiers(self) -> list[tuple[RunSpec, np.ndarray | None]]:
        """The run options of each group of simulated users (e.g. a privacy tier's) and every user's group by
        user id, over the heterogeneity axes (fed.heterogeneity.registry); on a device one group, the run's,
        for all its users (None): the owner's policy sets the budget, not --tiers."""
        if not self.simulation:
            return [(self.config, None)]
        specs, group_of = spec_groups(self.config)
        return [(spec, None if specs[0] is self.config else group_of) for spec in specs]

    def store(self) -> LedgerStore:
        """The node's ledger store (crash-durable on a device)."""
        return LedgerStore(self.ledger_file, durable=not self.simulation, create=self.simulation)

    def secret(self) -> bytes:
        """Key of the record ids: the device's own secret, or a fixed one in a simulation."""
        return hashlib.sha256(b"ldpfed simulation").digest() if self.key is None else self.key

    def owner(self) -> Callable[[int], str]:
        """Whose spending a user's releases are: the simulated user's own, or the device's."""
        if self.simulation:
            return lambda uid: f"user-{uid}"
        return lambda uid: DEVICE_OWNER

    @property
    def seed(self) -> int | None:
        """The run seed inside the simulation engine; None (the OS) on a device."""
        return self.config.seed if self.simulation else None


def _device_user(node_config: Mapping[str, Any]) -> int:
    """The user id a device hosts: its ``partition-id`` (in [0, ``num-partitions``))."""
    try:
        user, count = int(node_config.get("partition-id", 0)), int(node_config.get("num-partitions", 1))
    except (TypeError, ValueError):
        raise RequestRefused("node-config partition-id and num-partitions must be integers", Refusal.NOT_SET_UP) from None
    if not 0 <= user < count:
        raise RequestRefused(f"node-config partition-id {user} is outside [0, {count})", Refusal.NOT_SET_UP)
    return user


def data_unusable(error: Exception) -> RequestRefused:
    """The refusal of a device whose own data cannot be used: ``error`` (which may name a line or a label of
    the data) goes to the node's log for its owner, the server gets a text that depends on nothing in the data."""
    print(f"ldpfed: this device's data cannot be used: {error}", file=sys.stderr, flush=True)
    return RequestRefused(texts.device_data_unusable(), Refusal.NOT_SET_UP)


def hub_offline() -> None:
    """Keep this process off the Hugging Face Hub: a device loads only what its owner installed.

    Sets :data:`HUB_OFFLINE`, and the flags that huggingface_hub and datasets read from them when
    imported, for a library this process imported already.
    """
    os.environ.update(dict.fromkeys(HUB_OFFLINE, "1"))
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    datasets = sys.modules.get("datasets.config")
    if datasets is not None:
        datasets.HF_HUB_OFFLINE = datasets.HF_DATASETS_OFFLINE = True
