"""Run the real ServerApp and ClientApp in this process (no Ray, no SuperLink), for sweeps.

The same app code as `ldpfed simulate`, on the in-process grid of simulations/local_grid.py:
every message goes through the ClientApp handlers, so a sweep of many small runs costs no
process start-up. Also: reuse the full training split's cached encodings for a
``--train-limit`` sample instead of encoding the sample again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def single_threaded_blas() -> None:
    """One BLAS thread in this process (see fed/threads.py); the apps do the same when they start."""
    from fed.threads import limit_blas_threads

    limit_blas_threads()


def warm_train_sample_cache(values: Mapping[str, Any]) -> bool:
    """Write the encodings of the run's --train-limit sample from the full split's cache, if cached.

    Returns whether the sample's encodings are now cached (False: the run will encode it).
    """
    from fed.assets import default_cache_dir
    from fed.config import RunConfig
    from fed.encoders.cache import cache_path
    from fed.encoders.factory import make_encoder
    from fed.loaders import load_dataset
    from fed.population import Population

    config = RunConfig.from_mapping(values)
    if config.encoder == "bilstm":
        return False
    cache = default_cache_dir(config)
    encoder = make_encoder(config.encoder)
    sample = Population.build(config).train
    target = cache_path(encoder, sample, cache)
    if target.is_file():
        return True
    full = load_dataset(config.data, "train")
    source = cache_path(encoder, full, cache)
    if not config.train_limit or config.train_limit >= len(full) or not source.is_file():
        return False
    keep = np.sort(np.random.default_rng(config.seed).choice(len(full), config.train_limit, replace=False))
    if full.subset(keep).fingerprint() != sample.fingerprint():  # Population.build sampled differently
        return False
    encodings = np.load(source, mmap_mode="r")[keep]
    temp = target.with_suffix(".tmp.npy")
    np.save(temp, np.ascontiguousarray(encodings, dtype=np.float32))
    os.replace(temp, target)
    return True


def run_in_process(values: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """One whole run with these options on the in-process grid; returns (run directory, summary)."""
    from clients.app import app as client_app
    from fed.config import RunConfig
    from simulations.local_grid import run_local
    from strategies.app import app as server_app

    config = RunConfig.from_mapping(values)
    if not config.out:
        raise ValueError("give 'out': the run directory")
    run_local(server_app, client_app, config.nodes, config.to_mapping())
    out = Path(config.out)
    return out, json.loads((out / "summary.json").read_text())
