"""The benchmark's device: the real ClientApp set up as a device (owner's policy, durable state), in this process."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DEFAULT_DATA = "generated:200"
DEFAULT_PUBLIC = "generated:200"
POLICY = 'epsilon_sentence = 8.0\nepsilon_user = inf\nlabels = "public"\n'
"""The owner's policy the benchmark device runs under: the example policy of docs/deployment.md (epsilon 8 per
sentence, public labels) without a user-level cap, so that every release of the benchmark is
granted; every other key keeps its strict default (memoize on, evaluation none)."""
NODE_ID = 1000  # simulations.local_grid numbers its nodes from 1000


@dataclass
class Device:
    """The ClientApp running as a device (node config: policy, state folder, data), set up."""

    label: str
    config: Any  # fed.configuration.run_spec.RunSpec, the server's run options
    grid: Any  # simulations.local_grid.LocalGrid with engine=False
    plan: Any  # the server's fed.configuration.plan.PrivacyPlan
    assets: Any  # fed.runtime.assets.Assets: the device's encoder and projection
    texts: list[str]
    state_dir: Path
    setup_seconds: float
    num_labels: int
    durable: bool
    sampler: str


def make_device(work: Path, label: str, data: str, public: str, dim: int, labels: str = "public") -> Device:
    """Build the server's bundle and a one-user device that has answered its setup (``labels``: the
    run's and the owner's policy's label channel)."""
    from flwr.app import Message

    from ldpfed.fed import protocol
    from ldpfed.clients.app import FLOWER, app as client_app
    from ldpfed.fed.runtime.assets import build_bundle, load_assets, load_public, unpack
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.device.state import init_state
    from ldpfed.fed.data.loaders import load_dataset
    from ldpfed.fed.configuration.plan import make_plan
    from ldpfed.fed.device.site import Site
    from ldpfed.simulations.local_grid import LocalGrid

    server_cache = work / "server-cache"
    config = RunSpec.of(
        data=data, public=public if dim else "none", users=1, nodes=1, dim=dim,
        cache_dir=str(server_cache), nonprivate_baseline=False, labels=labels,
    )
    bundle = build_bundle(config, None if config.data.public == "none" else load_public(config), server_cache)
    folder = work / label
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.toml").write_text(POLICY.replace('labels = "public"', f"labels = {json.dumps(labels)}"))
    # One encoding cache for the benchmark's devices (the second setting's setup reads the first's encodings).
    node_config = {
        "data": data, "state-dir": str(init_state(folder / "state")), "policy": str(folder / "policy.toml"), "cache-dir": str(work / "device-cache"),
    }
    grid = LocalGrid(client_app, 1, config.to_mapping(), engine=False, node_configs=[node_config])
    started = time.perf_counter()
    reply = send(grid, Message(FLOWER(protocol.setup_request(bundle)), dst_node_id=NODE_ID, message_type=protocol.SETUP))
    setup_seconds = time.perf_counter() - started
    info = protocol.read_setup_reply(reply.content)
    plan = make_plan(config, info.num_labels, max(max(info.query_counts, default=1), 1))  # as the server plans
    context = grid.node_ctx[NODE_ID]
    site = Site.resolve(context.node_config, RunSpec.from_mapping(context.run_config), context.run_id, NODE_ID)
    if site.simulation or not site.store().durable:
        raise RuntimeError("the benchmark device runs as the simulation engine; it must run as a device")
    assets = load_assets(unpack(bundle, work / label / "bench-cache"))
    return Device(
        label, config, grid, plan, assets, list(load_dataset(data, "train").texts), folder / "state",
        setup_seconds, info.num_labels, True, str(getattr(info, "sampler", "") or _sampler_name()),
    )


def send(grid: Any, message: Any) -> Any:
    from ldpfed.fed import protocol

    (reply,) = grid.send_and_receive([message])
    if reply.has_error():
        raise RuntimeError(f"the ClientApp failed: {reply.error.reason[-2000:]}")
    refused = protocol.read_refusal(reply.content)
    if refused is not None:
        raise RuntimeError(f"the device refused {message.metadata.message_type}: {refused}")
    return reply


def _sampler_name() -> str:
    """The sampler a device release draws its noise from (fed.privacy.noise when present)."""
    from ldpfed.fed.device.entropy import generator

    rng = generator(None, (0,))
    try:
        from ldpfed.fed.privacy.noise import sampler
    except ImportError:
        return f"numpy {type(rng.bit_generator).__name__} (OS-seeded)"
    return sampler(rng)
