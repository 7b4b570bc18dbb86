"""The ldpfed ClientApp: every handler decodes with fed.protocol and serves through fed.runtime.hosts.NodeHosts
(one fed.runtime.node.NodeHost per policy: a device has one, a simulated node one per privacy tier).

Whatever arrives is a request from an untrusted server (design.md section 2b): a request the
node cannot or will not serve gets a structured refusal (fed.protocol.refusal), never an
exception. What the node grants comes from its site (fed.device.site): the owner's policy, state
folder and data on a device; the run options inside the simulation engine.
"""

from __future__ import annotations

import gc
import hashlib
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod

from ldpfed.fed import protocol
from ldpfed.fed.encoders.base import EncoderRefused
from ldpfed.fed.runtime.assets import Assets, bundle_encoder, default_cache_dir, device_encoders, load_assets, unpacked
from ldpfed.fed.runtime.cohort import Cohort
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.records import StoredRecords, load_records, records_key, save_records
from ldpfed.fed.runtime.hosts import NodeHosts
from ldpfed.fed.runtime.setup_checks import check_plans
from ldpfed.fed.device.retention import bound_device_folders
from ldpfed.fed.runtime.node import NodeHost, sessions_from_json
from ldpfed.fed.privacy.noise import DEVICE_SAMPLER, ENGINE_SAMPLER
from ldpfed.fed.configuration.plan import encoder_spec, make_plan, plan_refusal
from ldpfed.fed.device.policy import MAX_BUNDLE_BYTES
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.randomizers.split_denoise import DENOISER_FILE
from ldpfed.fed.data.population import Population, hosted_users, user_records
from ldpfed.fed.privacy.figure_cache import batch as figure_batch
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.runtime.requests import Refusal, RequestRefused
from ldpfed.fed.device.shared_records import shared_records
from ldpfed.fed.device.site import Site, data_unusable
from ldpfed.fed.learning.softmax_head import local_sgd
from ldpfed.fed.runtime.threads import limit_blas_threads
from ldpfed.fed.runtime.user import UserRecords

if TYPE_CHECKING:
    from ldpfed.fed.learning.denoiser import Denoiser  # imports torch: loaded only where a bundle ships a denoiser

FLOWER = protocol.Records(RecordDict, ArrayRecord, ConfigRecord, MetricRecord, Array)
"""Builds the Flower content of a reply from the protocol's plain content."""


class NodeApp(ClientApp):
    """Flower's ClientApp, answering a message type it does not serve with a structured refusal.

    Flower's own ClientApp raises ValueError for an unregistered type (its runtime then
    replies with an error and, on a SuperNode, ends that ClientApp process); a hostile server
    gets the same kind of reply as for any other request the node will not serve.
    """

    def __call__(self, message: Message, context: Context) -> Message:
        """Serve a registered message type; refuse any other."""
        message_type = message.metadata.message_type
        if _handler(message_type) not in {_handler(t) for t in protocol.MESSAGE_TYPES}:
            served = ", ".join(protocol.MESSAGE_TYPES)
            reason = f"unknown message type {message_type[:100]!r}; this node serves {served}"
            return Message(FLOWER(protocol.refusal(Refusal.MALFORMED, reason)), reply_to=message)
        return super().__call__(message, context)


def _handler(message_type: str) -> str:
    """Flower's name of the handler a message type reaches ("train" is "train.default")."""
    return message_type if "." in message_type else f"{message_type}.default"


app = NodeApp()
limit_blas_threads()  # once per process (Ray actor or device)
# The objects loaded before the first message (Flower's runtime, this app's modules) leave the garbage collector's
# generations. On a SuperNode each message is served by a new process that imports Flower's runtime and this app first;
# a full collection triggered by the handler's allocations walked all of them again, about half of a train message's
# handler CPU (simulations/reports/device_costs/message_parts6.json). The cost: cyclic garbage left by the imports is
# never freed (the frozen objects live as long as the process anyway).
gc.freeze()

_SPECS: dict[str, RunSpec] = {}
"""repr of a run config -> its run spec (per process)."""
# Per process: clean records of the hosted users, by bundle content (a bundle re-sent with other
# bytes but the same files, e.g. a tar cut short in its trailing padding, unpacks to another folder
# and would otherwise re-hash the encoder's weights and rebuild the population). In the engine (one
# Ray actor) built once per run; on a device read from its record store (fed.device.records) by key.
_RECORDS: dict[tuple[RunSpec, int, int, str] | str, StoredRecords] = {}
_CONTENT: dict[str, str] = {}
_ASSETS: dict[str, Assets] = {}
"""Unpacked bundle folder -> its loaded assets."""
"""Unpacked bundle folder -> digest of its files (names and bytes)."""
_TIERS: dict[tuple[int, int], dict[int, UserRecords]] = {}
"""(id of a records dict in _RECORDS, privacy tier) -> that tier's users among them (simulation only)."""
_COHORTS: dict[int, Cohort] = {}
"""id of a records dict in _RECORDS or _TIERS -> the same records stacked (simulation only: fed.runtime.cohort)."""


def _serve(msg: Message, context: Context, handle: Callable[[Message, Context], protocol.Content]) -> Message:
    """Run a handler; any refusal or malformed content becomes a structured refusal reply."""
    try:
        # The accounting figures this message computes reach the device's store in one write; every encoder it
        # names resolves under the device owner's policy (none inside the simulation engine: the experimenter's).
        with figure_batch(), device_encoders(lambda: _site(context).device_policy):
            content = FLOWER(handle(msg, context))
    except RequestRefused as refused:
        content = FLOWER(protocol.refusal(refused.code, str(refused)))
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as error:
        content = FLOWER(protocol.refusal(Refusal.MALFORMED, f"malformed request: {type(error).__name__}: {error}"[:500]))
    return Message(content, reply_to=msg)


@app.query("setup")
def setup(msg: Message, context: Context) -> Message:
    """Store the asset bundle, prepare the hosted users' clean records, and introduce the node."""
    return _serve(msg, context, _setup)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Release training reports for the requested users."""
    return _serve(msg, context, lambda m, c: _release("train", m, c))


@app.query("release")
def release(msg: Message, context: Context) -> Message:
    """Release query reports for remote inference."""
    return _serve(msg, context, lambda m, c: _release("query", m, c))


@app.query("answer")
def answer(msg: Message, context: Context) -> Message:
    """Take the server's answers to released query slots; say which users have all k answers."""
    return _serve(msg, context, _answer)


@app.query("score")
def score(msg: Message, context: Context) -> Message:
    """Remote-inference outcome: exact in a simulation, randomized (if the policy allows) on a device."""
    return _serve(msg, context, lambda m, c: _with_host(c, lambda host: protocol.outcomes_reply(host.score())))


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Local inference with downloaded classifiers: exact in a simulation, randomized (if allowed) on a device."""

    def handle(host: NodeHosts) -> protocol.Content:
        models = protocol.read_evaluate_request(msg.content, host.model_dim, host.num_labels)
        return protocol.outcomes_reply(host.evaluate(models))

    return _serve(msg, context, lambda m, c: _with_host(c, handle, local_inference=True))


class _Refused(Exception):
    """A central handler's refusal, carried past Flower's clipping mod (which makes an error of a reply without arrays)."""

    def __init__(self, reply: Message) -> None:
        super().__init__("refused")
        self.reply = reply


def refusing_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """The central handlers' outermost mod, before Flower's clipping mod: a request the node refuses gets a structured
    refusal like every other message, not that mod's error (a request without the shape it reads, rejected before the
    handler runs; a refusal without arrays, rejected after)."""
    malformed = protocol.central_request_refusal(msg.content)
    if malformed:
        return Message(FLOWER(protocol.refusal(Refusal.MALFORMED, malformed)), reply_to=msg)
    try:
        return call_next(msg, context)
    except _Refused as refused:
        return refused.reply


def _central(msg: Message, context: Context) -> Message:
    """Serve a central request; a refusal leaves through :func:`refusing_mod`, past Flower's clipping mod."""
    reply = _serve(msg, context, _train_central)
    if protocol.read_refusal(reply.content) is not None:
        raise _Refused(reply)
    return reply


@app.train("central", mods=[refusing_mod, fixedclipping_mod])
def train_central(msg: Message, context: Context) -> Message:
    """Central DP-FedAvg (simulation only): train the global head on the hosted user's clean encodings;
    Flower's fixedclipping_mod then clips the update to the request's norm before it leaves."""
    return _central(msg, context)


@app.train("central_adaptive", mods=[refusing_mod, adaptiveclipping_mod])
def train_central_adaptive(msg: Message, context: Context) -> Message:
    """The same with adaptive clipping: Flower's adaptiveclipping_mod clips to the server's current norm."""
    return _central(msg, context)


@app.query("ledger")
def ledger(msg: Message, context: Context) -> Message:
    """The hosted users' ledgers: in full inside the simulation engine, as aggregates on a device (fed.runtime.node.NodeHost.ledgers)."""
    return _serve(msg, context, lambda m, c: _with_host(c, lambda host: protocol.ledger_reply(host.ledgers())))


def owner_ledgers(context: Context) -> dict[int, Ledger]:
    """The hosted users' full ledgers, read on the node by its owner (a device never sends them)."""
    return _host(context).full_ledgers()


def _train_central(msg: Message, context: Context) -> protocol.Content:
    """The hosted user's head after --central-epochs of local SGD from the global one (one user per node)."""
    site = _site(context)
    if not site.simulation:
        raise RequestRefused(
            "train.central sends a model update computed from clean data without local noise; a device releases only "
            "through a charged randomizer (docs/privacy_models.md), so central DP-FedAvg is simulation only",
            Refusal.POLICY,
        )
    expected = protocol.CENTRAL_TRAIN if site.config.privacy.central_clipping == "fixed" else protocol.CENTRAL_TRAIN_ADAPTIVE
    if site.config.privacy.privacy_model != "central" or msg.metadata.message_type != expected:
        raise RequestRefused(f"this run serves {expected} only with --privacy-model central", Refusal.POLICY)
    if "node" not in context.state.config_records:
        raise RequestRefused("this node has not been set up (query.setup must come first)", Refusal.NOT_SET_UP)
    records, num_labels, max_queries = _records(site, context, str(context.state["node"]["assets"]))
    if len(records) != 1:
        raise RequestRefused(f"central DP-FedAvg needs one user per node (user-level clipping); this node hosts {len(records)}")
    user = next(iter(records.values()))
    features = make_plan(site.config, num_labels, max(max_queries, 1)).train.features
    x = features(user.train)
    model, norm = protocol.read_central_request(msg.content, x.shape[1], num_labels)
    fixed = site.config.privacy.central_clipping == "fixed"
    if fixed and norm != site.config.privacy.central_clip:  # the clipping norm is the node's own option, not the server's say
        raise RequestRefused(f"clipping norm {norm:g} is not this run's --central-clip {site.config.privacy.central_clip:g}", Refusal.POLICY)
    server_round = protocol.read_central_round(msg.content)
    rng = np.random.default_rng([int(site.seed), int(context.node_id) % 2**32, server_round])  # SGD order only
    trained = local_sgd(model, x, user.train_labels.astype(np.int64), site.config.privacy.central_lr, site.config.privacy.central_epochs, rng)
    return protocol.central_reply(trained)


def _setup(msg: Message, context: Context) -> protocol.Content:
    site = _site(context)
    bundle = protocol.read_setup_request(msg.content)

    def accept(spec: str, names: Mapping[str, str]) -> None:
        """Refuse a bundle by its encoder and files (names and digests), before any of its files is loaded or written."""
        refused = site.device_policy and site.device_policy.bundle_refusal(spec, names)
        if refused:
            raise RequestRefused(refused, Refusal.POLICY)
        if spec != encoder_spec(site.config):  # the plan's randomizer may load what the run names (snd: its encoder)
            raise RequestRefused(f"the bundle's encoder {spec!r} is not the run's {encoder_spec(site.config)!r}", Refusal.POLICY)
        missing = [name for name in RANDOMIZERS[site.config.privacy.mechanism].shipped_files if name not in names]
        if missing:
            raise RequestRefused(f"--mechanism {site.config.privacy.mechanism} needs {', '.join(missing)} in the bundle", Refusal.POLICY)

    max_bytes = site.device_policy.max_bundle_bytes if site.device_policy else MAX_BUNDLE_BYTES
    try:  # a bundle refused here, or by the records it gives, leaves no folder behind
        with unpacked(bundle, default_cache_dir(site.config), accept, max_bytes) as folder:
            records, num_labels, _ = check_plans(site, _records(site, context, str(folder), setup=True), folder)
    except (RequestRefused, EncoderRefused):  # an encoder's refusal gets its code in _serve (device_encoders)
        raise
    except ValueError as error:
        raise RequestRefused(str(error)) from None
    # Only now, with the bundle valid and the records built, does the node's state change;
    # the users' sessions and ledgers are never reset by a setup.
    bound_device_folders(site, folder)  # a device keeps its most recently used bundles only
    node = context.state.config_records.get("node")
    sessions = str(node["users"]) if node is not None else "{}"
    context.state["node"] = ConfigRecord({"assets": str(folder), "users": sessions})
    users = sorted(records)
    dim = records[users[0]].train.shape[1] if users else 0
    info = protocol.NodeInfo(
        users=users,
        dim=int(dim),
        num_labels=num_labels,
        train_counts=[len(records[u].train) for u in users],
        query_counts=[len(records[u].query) for u in users],
        sampler=ENGINE_SAMPLER if site.simulation else DEVICE_SAMPLER,
    )
    return protocol.setup_reply(info)


def _release(kind: str, msg: Message, context: Context) -> protocol.Content:
    raw = protocol.read_release_request(msg.content)
    served_by = _engine_host(_site(context))

    def reply(hosts: NodeHosts) -> protocol.Content:
        released = hosts.release(kind, raw)  # type: ignore[arg-type]
        for part in released:
            part.host = served_by
        return protocol.release_reply(released)

    return _with_host(context, reply)


def _engine_host(site: Site) -> str:
    """Ray node id of the actor serving this call inside the simulation engine; "" elsewhere (a device reveals nothing)."""
    ray = sys.modules.get("ray") if site.simulation else None
    return str(ray.get_runtime_context().get_node_id()) if ray is not None and ray.is_initialized() else ""


def _answer(msg: Message, context: Context) -> protocol.Content:
    users, slots, scores = protocol.read_answer_request(msg.content)
    return _with_host(context, lambda host: protocol.answer_reply(host.answer(users, slots, scores)))


def _with_host(context: Context, act: Callable[[NodeHosts], protocol.Content], local_inference: bool = False) -> protocol.Content:
    """Build the node's host (with the bundle's denoiser for ``local_inference``), act, and keep the
    users' sessions in the node state."""
    host = _host(context, local_inference)
    content = act(host)
    context.state["node"]["users"] = host.sessions_json()
    return content


def _site(context: Context) -> Site:
    return Site.resolve(context.node_config, _spec(context), context.run_id, context.node_id)


def _spec(context: Context) -> RunSpec:
    """The run spec of ``context``'s run config, parsed and validated once per process and run config (every
    message of a run carries the same): a config it refuses is refused again, with the same error, each time."""
    key = repr(list(context.run_config.items()))
    if key not in _SPECS:
        _SPECS[key] = RunSpec.from_mapping(context.run_config, read_task=False)  # a folder it names is not read here
    return _SPECS[key]


def _host(context: Context, local_inference: bool = False) -> NodeHosts:
    """The node's users, one host per policy (a device: one; a simulation: one per privacy tier on the node);
    the bundle's denoiser (torch) is loaded for ``local_inference`` (evaluate) only."""
    if "node" not in context.state.config_records:
        raise RequestRefused("this node has not been set up (query.setup must come first)", Refusal.NOT_SET_UP)
    site = _site(context)
    records, num_labels, max_queries = _records(site, context, str(context.state["node"]["assets"]))
    sessions = sessions_from_json(str(context.state["node"]["users"]))
    store = site.store()
    hosts = []
    for tier, (config, members) in enumerate(site.tiers()):
        users = records if members is None else _tier_records(records, members, tier)
        if not users:
            continue
        # The same planned inference steps as the server's plan (whose floor this must not undercut).
        plan = make_plan(config, num_labels, max(max_queries, 1))
        cohort = None
        if site.simulation:
            if id(users) not in _COHORTS:
                _COHORTS[id(users)] = Cohort.build(users, site.owner())
            cohort = _COHORTS[id(users)]
        policy = site.policy(plan, config)
        refused = plan_refusal(plan, bundle_encoder(Path(context.state["node"]["assets"])), policy)
        if refused:  # before anything is built from the plan
            raise RequestRefused(refused, Refusal.POLICY)
        denoiser = _denoiser(str(context.state["node"]["assets"])) if local_inference else None
        bundle = _content(str(context.state["node"]["assets"]))  # memo keys: a new bundle's reports are new draws
        hosts.append(NodeHost(users, plan, policy, store, site.owner(), site.seed, sessions, site.simulation, cohort, denoiser, bundle))
    return NodeHosts(hosts)


def _tier_records(records: dict[int, UserRecords], members: np.ndarray, tier: int) -> dict[int, UserRecords]:
    """The hosted users of one privacy tier (``members``: each user's tier by user id), built once per records."""
    key = (id(records), tier)
    if key not in _TIERS:
        _TIERS[key] = {uid: user for uid, user in records.items() if members[uid] == tier}
    return _TIERS[key]


def _records(site: Site, context: Context, folder: str, setup: bool = False) -> StoredRecords:
    """Clean records of this node's users, the number of labels, and the largest query count of the run.

    In the engine every Ray actor would build the node's users again: the first one stores them for
    the run. On a device setup encodes them once into the device's record store, which every other
    message reads; a message whose records are not stored is refused (not set up), never rebuilt.
    """
    config = site.config
    partition_id = int(context.node_config.get("partition-id", 0))
    num_partitions = int(context.node_config.get("num-partitions", 1))

    def build() -> StoredRecords:
        return _build_records(site, config, folder, partition_id, num_partitions)

    if site.simulation:
        key: tuple[RunSpec, int, int, str] | str = (config, partition_id, num_partitions, _content(folder))
        if key not in _RECORDS:
            run_key = repr((context.run_id, key))
            _RECORDS[key] = shared_records(default_cache_dir(config) / "nodes", run_key, build)
        return _RECORDS[key]
    key = records_key(_content(folder), config.data.data, site.user, site.secret())
    if key not in _RECORDS:
        stored = load_records(site.state_dir, key)
        if stored is None:
            if not setup:
                raise RequestRefused("this device holds no records for its bundle and data (query.setup must come first)", Refusal.NOT_SET_UP)
            stored = _device_records(site, folder)
            save_records(site.state_dir, key, stored)
        _RECORDS[key] = stored
    return _RECORDS[key]


def _build_records(
    site: Site, config: RunSpec, folder: str, partition_id: int, num_partitions: int
) -> tuple[dict[int, UserRecords], int, int]:
    """Load, partition and encode the simulated node's users' records (the run options are the experimenter's)."""
    population = Population.build(config.data, config.seed, default_cache_dir(site.config))
    assets = _assets(folder)
    cache = default_cache_dir(site.config)
    users = hosted_users(config.data.users, partition_id, num_partitions)
    records = {}
    for encoding, members in site.encodings():
        train_x = assets.features(population.train, cache, **encoding)
        dev_x = assets.features(population.dev, cache, **encoding)
        tier_users = users if members is None else [u for u in users if members[u]]
        records.update(user_records(population, train_x, dev_x, tier_users, site.secret()))
    records = {u: records[u] for u in users}
    max_queries = max((len(part) for part in population.query_parts), default=1)
    return records, population.train.num_labels, max_queries


def _device_records(site: Site, folder: str) -> StoredRecords:
    """Load and encode a device's one user: every record of its own data, its label set from the schema or
    its policy (site.Site.num_labels). Nothing of the run config shapes it (issue 39, finding 1)."""
    num_labels = site.num_labels()
    try:
        population = Population.of_device(site.config.data.data)
        for split in (population.train, population.dev):
            if len(split) and not 0 <= int(split.labels.min()) <= int(split.labels.max()) < num_labels:
                raise ValueError(f"a label lies outside the device's label set of {num_labels}")
    except (OSError, ValueError) as error:
        raise data_unusable(error) from None
    assets = _assets(folder)
    cache = default_cache_dir(site.config)
    train_x = assets.features(population.train, cache)
    dev_x = assets.features(population.dev, cache)
    (user,) = user_records(population, train_x, dev_x, [0], site.secret()).values()
    return {site.user: user}, num_labels, len(population.dev)


def _denoiser(folder: str) -> Denoiser | None:
    """The bundle's denoiser (split-denoise; loading it imports torch), None when it ships none."""
    return _assets(folder).denoiser if (Path(folder) / DENOISER_FILE).is_file() else None


def _assets(folder: str) -> Assets:
    """The unpacked bundle's encoder, projection and denoiser, loaded once per process and folder."""
    if folder not in _ASSETS:
        _ASSETS[folder] = load_assets(Path(folder))
    return _ASSETS[folder]


def _content(folder: str) -> str:
    """Digest of an unpacked bundle's files (their names and bytes), computed once per folder."""
    if folder not in _CONTENT:
        digest = hashlib.sha256()
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            name = path.relative_to(folder).as_posix().encode()
            with open(path, "rb") as handle:
                data = hashlib.file_digest(handle, "sha256").digest()
            digest.update(len(name).to_bytes(8, "little") + name + data)
        _CONTENT[folder] = digest.hexdigest()
    return _CONTENT[folder]
