"""Shared test fixtures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
WORDS = {0: ["great", "wonderful", "lovely"], 1: ["awful", "terrible", "boring"]}


DEVICE_POLICY = 'epsilon_sentence = 8.0\nepsilon_user = inf\nlabels = "public"\nevaluation = "rr:2.0"\n'
"""An owner's policy under which the small deployment runs can spend (epsilon 8, public labels)."""


def device_node_configs(folder: Path, state_dirs: list[Path], records: int = 120) -> list[str]:
    """``--node-config`` strings of devices, device i hosting user i with data of its own (``generated:<records>:<i>``,
    the generated corpus drawn with seed i), each with its own state folder (initialised as ``ldpfed device init``
    does, or kept) and the :data:`DEVICE_POLICY` written to ``folder/policy.toml``."""
    from ldpfed.fed.device.state import init_state

    policy = folder / "policy.toml"
    policy.write_text(DEVICE_POLICY)
    for state in state_dirs:
        init_state(state)
    return [
        f"partition-id={i} num-partitions={len(state_dirs)} data='generated:{records}:{i}' state-dir='{state}' policy='{policy}'"
        for i, state in enumerate(state_dirs)
    ]


def write_review_folder(folder: Path, sizes: dict[str, int], prefix: str, seed: int) -> Path:
    """A small two-class folder dataset (``<split>.tsv`` and its ``labels.txt``): '<prefix><i> the <split> film was
    <word> indeed' per row. A device reads its label set from labels.txt (or its policy), never from the records."""
    rng = np.random.default_rng(seed)
    for split, n in sizes.items():
        rows = ["sentence\tlabel"]
        for i in range(n):
            label = int(rng.integers(2))
            rows.append(f"{prefix}{i} the {split} film was {rng.choice(WORDS[label])} indeed\t{label}")
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    (folder / "labels.txt").write_text("0\tpositive\n1\tnegative\n")
    return folder


@pytest.fixture
def restored() -> Iterator[None]:
    """Nothing registered in this process (register_*) when the test starts; every registry, and what this process
    registered, as they were before the test when it ends (a registration left behind would be handed to every later
    simulation of the worker)."""
    from ldpfed.fed.encoders import registry as encoders
    from ldpfed.fed.heterogeneity import registry as axes
    from ldpfed.fed.learning import classifiers
    from ldpfed.fed.plugins import entry_points
    from ldpfed.fed.plugins.entry_points import PLUGINS
    from ldpfed.fed.randomizers import RANDOMIZERS

    saved = (dict(RANDOMIZERS), dict(encoders.ENCODERS), dict(classifiers.CLASSIFIERS), dict(axes._PLUGINS), axes.AXES)
    plugins = {g: dict(p) for g, p in PLUGINS.items()}
    registered = {g: dict(p) for g, p in entry_points._REGISTERED.items()}
    for names in entry_points._REGISTERED.values():
        names.clear()
    yield
    for target, before in zip((RANDOMIZERS, encoders.ENCODERS, classifiers.CLASSIFIERS, axes._PLUGINS), saved):
        target.clear()
        target.update(before)
    axes.AXES = saved[4]
    for table, before in ((PLUGINS, plugins), (entry_points._REGISTERED, registered)):
        for group, names in before.items():
            table[group].clear()
            table[group].update(names)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets beside the checkout (../shared/data); skip if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found (real datasets live beside the checkout)")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def _offline_and_isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One BLAS thread and one torch thread, in this process and in every process the tests start; no Hub
    downloads; one encoding cache for the session outside the home.

    torch's second intra-op thread only spins on 2 shared cores (fed.runtime.threads.one_torch_thread): with
    it, MiniLM encoding took 1.5 times and a 2-layer denoiser's training 60 times as long, and the
    in-process runs' ClientApp and ServerApp share this process. The suite's other worker keeps the other
    core busy, so the processes it starts (``ldpfed simulate``'s encoding child, a device's setup) get one
    thread too, through OMP_NUM_THREADS, which torch and OpenBLAS read at their start: the README's SST-2
    run took 84.7 CPU s with torch's default two threads beside a busy core, and 38.0 s with one.
    """
    import os

    import torch

    from ldpfed.fed.runtime.threads import limit_blas_threads

    limit_blas_threads()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["HF_HUB_OFFLINE"] = "1"
    # Under pytest-xdist (the README's `-n 2`) the workers share one cache beside their own
    # temporary folders: fed.encoders.cache writes shards atomically and tolerates duplicates.
    shared = tmp_path_factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else None
    cache = shared / "ldpfed-cache" if shared is not None else tmp_path_factory.mktemp("ldpfed-cache")
    cache.mkdir(exist_ok=True)
    os.environ.setdefault("LDPFED_CACHE", str(cache))
