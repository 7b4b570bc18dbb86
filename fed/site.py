"""Where a node runs, and what follows from it: policy, state folder, data, entropy, owners.

On a device (any runtime that is not the simulation engine, fed.entropy) everything the
node's guarantee rests on comes from the device owner, through the node config given to
``flower-supernode --node-config``:

| key | meaning | default |
|---|---|---|
| ``policy`` | path of the owner's policy TOML (fed.policy) | strict defaults |
| ``state-dir`` | the node's own folder: ledger database, record-id key (fed.device_state), record store (fed.device_records), accounting figures (fed.privacy.figure_cache) | ``$LDPFED_STATE`` or ``~/.local/state/ldpfed`` |
| ``data`` | the device's dataset folder (train.tsv / dev.tsv), not inside the state folder | none: setup is refused |
| ``cache-dir`` | encodings and unpacked bundles, not inside the state folder | ``<state-dir>/cache`` |
| ``partition-id``, ``num-partitions`` | which users of the data this node hosts | 0, 1 |

A device serves only from a state folder its owner made (``ldpfed device init``), whose ledger
is bound to its record-id key (fed.device_state.open_state), and its process makes every
file and folder its owner's only (umask 077).

The run config's ``data``, ``cache-dir``, budgets, labels, enforcement and seed are ignored
there. Inside the simulation engine the experimenter writes both sides, so the run options
serve as every simulated user's policy, data and seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fed.assets import default_cache_dir
from fed.config import RunConfig
from fed.device_state import DEVICE_UMASK, LEDGER_FILE, open_state
from fed.device_tiers import DeviceTiers
from fed.entropy import in_simulation_engine
from fed.plan import PrivacyPlan
from fed.policy import DevicePolicy
from fed.privacy.figure_cache import FIGURES_FILE, stop_store, use_store
from fed.privacy.store import LedgerStore
from fed.requests import Refusal, RequestRefused
from fed.tiers import run_tiers

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
    config: RunConfig
    state_dir: Path
    ledger_file: Path
    device_policy: DevicePolicy | None
    key: bytes | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls, node_config: Mapping[str, Any], config: RunConfig, run_id: int, node_id: int) -> "Site":
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
        own = dataclasses.replace(config, data=str(data), cache_dir=cache)
        return cls(False, own, state, state / LEDGER_FILE, policy, key)

    def policy(self, plan: PrivacyPlan, config: RunConfig | None = None) -> DevicePolicy:
        """What the node grants: the owner's policy, or in a simulation what the run options grant
        (``config``: a privacy tier's options, by default the run's)."""
        if self.device_policy is not None:
            return self.device_policy
        return DevicePolicy.from_run(config or self.config, plan)

    def device_tiers(self) -> list[tuple[int | None, np.ndarray | None]]:
        """Each device tier's token limit and its users (a mask by user id); a device, or a run without
        --device-tiers: [(None, None)], every user running the encoder as shipped."""
        if not self.simulation or not self.config.device_tiers:
            return [(None, None)]
        tiers = DeviceTiers.parse(self.config.device_tiers)
        tier_of = tiers.assign(self.config.users, self.config.seed)
        return [(tokens, tier_of == k) for k, tokens in enumerate(tiers.max_tokens)]

    def tiers(self) -> list[tuple[RunConfig, np.ndarray | None]]:
        """Each privacy tier's run options and every user's tier by user id (fed.tiers); on a device one
        tier, the run's, for all its users (None): the owner's policy sets the budget, not --tiers."""
        if not self.simulation or not self.config.tiers:
            return [(self.config, None)]
        configs, tier_of = run_tiers(self.config)
        return [(config, tier_of) for config in configs]

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
