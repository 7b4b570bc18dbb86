"""The ldpfed ClientApp: every handler is a thin adapter over fed.node.NodeHost.

Message types: ``query.setup`` (receive the server's asset bundle, say which users this
node hosts), ``train`` (release training reports), ``query.release`` (release query
reports for remote inference: one up-sampling step), ``query.answer`` (take the server's
answers to released slots), ``query.score`` (remote-inference outcome), ``evaluate`` (local inference with downloaded classifiers), ``query.ledger`` (full
ledgers, for the run directory).
"""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients.wire import record_to_models, refusal, reply_to_record
from fed.assets import default_cache_dir, load_assets, unpack
from fed.config import RunConfig
from fed.node import NodeHost, states_from_json
from fed.plan import make_plan
from fed.population import Population, hosted_users, user_records
from fed.requests import RequestRefused
from fed.user import UserRecords
from fed.threads import limit_blas_threads

app = ClientApp()
limit_blas_threads()  # once per process (Ray actor or device)

# Per process (one Ray actor, or one device): clean records of the hosted users, built once.
_RECORDS: dict[tuple[RunConfig, int, int, str], tuple[dict[int, UserRecords], int]] = {}
# Per process: the largest number of query records one user of the run holds (sizes are public).
_MAX_QUERIES: dict[RunConfig, int] = {}


@app.query("setup")
def setup(msg: Message, context: Context) -> Message:
    """Store the asset bundle, prepare the hosted users' clean records, and introduce the node."""
    config = RunConfig.from_mapping(context.run_config)
    folder = unpack(msg.content["assets"]["bundle"].numpy(), default_cache_dir(config))
    context.state["node"] = ConfigRecord({"assets": str(folder), "users": "{}"})
    records, num_labels = _records(context)
    dim = next(iter(records.values())).train.shape[1] if records else 0
    users = sorted(records)
    info = ConfigRecord(
        {
            "users": users,
            "dim": int(dim),
            "num-labels": num_labels,
            # dataset sizes are public (design.md section 2): they set the planned inference steps
            "train-counts": [len(records[u].train) for u in users],
            "query-counts": [len(records[u].query) for u in users],
        }
    )
    return Message(RecordDict({"node": info}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Release training reports for the requested users."""
    return _release("train", msg, context)


@app.query("release")
def release(msg: Message, context: Context) -> Message:
    """Release query reports for remote inference."""
    return _release("query", msg, context)


@app.query("answer")
def answer(msg: Message, context: Context) -> Message:
    """Take the server's answers to released query slots; say which users have all k answers."""
    arrays = msg.content["answers"]
    host = _host(context)
    try:
        finished = host.answer(arrays["users"].numpy(), arrays["slots"].numpy(), arrays["scores"].numpy())
    except RequestRefused as reason:
        return Message(refusal(str(reason)), reply_to=msg)
    context.state["node"]["users"] = host.states_json()
    return Message(RecordDict({"answered": ConfigRecord({"finished": json.dumps(finished)})}), reply_to=msg)


@app.query("score")
def score(msg: Message, context: Context) -> Message:
    """Remote-inference outcome of the hosted users (simulation metric): correct counts and effort."""
    return Message(RecordDict({"metrics": MetricRecord(_host(context).score())}), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Local inference: apply the downloaded classifiers to clean queries, at no privacy cost."""
    host = _host(context)
    try:
        models = record_to_models(msg.content["models"], host.model_dim, host.plan.labels.num_values)
    except ValueError as reason:
        return Message(refusal(str(reason)), reply_to=msg)
    counts, total = host.evaluate(models)
    metrics = MetricRecord({**{f"correct.{k}": v for k, v in counts.items()}, "total": total})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)


@app.query("ledger")
def ledger(msg: Message, context: Context) -> Message:
    """Full ledgers of the hosted users (each event and its count per record)."""
    host = _host(context)
    ledgers = {str(uid): state["ledger"] for uid, state in host.states().items()}
    return Message(RecordDict({"ledgers": ConfigRecord({"json": json.dumps(ledgers)})}), reply_to=msg)


def _release(kind: str, msg: Message, context: Context) -> Message:
    host = _host(context)
    try:
        reply = host.release(kind, dict(msg.content["request"]))  # type: ignore[arg-type]
    except RequestRefused as reason:
        return Message(refusal(str(reason)), reply_to=msg)
    context.state["node"]["users"] = host.states_json()
    return Message(reply_to_record(reply), reply_to=msg)


def _host(context: Context) -> NodeHost:
    if "node" not in context.state:
        raise RuntimeError("this node has not been set up (query.setup must come first)")
    config = RunConfig.from_mapping(context.run_config)
    records, num_labels = _records(context)
    seed = None if str(context.node_config.get("deployed", "false")).lower() == "true" else config.seed
    states = states_from_json(str(context.state["node"]["users"]))
    # The same planned inference steps as the server's plan (whose floor this must not undercut).
    max_queries = _MAX_QUERIES.get(config) or max((len(r.query) for r in records.values()), default=1)
    return NodeHost(records, make_plan(config, num_labels, max(max_queries, 1)), seed, states)


def _records(context: Context) -> tuple[dict[int, UserRecords], int]:
    config = RunConfig.from_mapping(context.run_config)
    partition_id = int(context.node_config.get("partition-id", 0))
    num_partitions = int(context.node_config.get("num-partitions", 1))
    folder = str(context.state["node"]["assets"])
    key = (config, partition_id, num_partitions, folder)
    if key not in _RECORDS:
        population = Population.build(config)
        assets = load_assets(Path(folder))
        cache = default_cache_dir(config)
        train_x, dev_x = assets.features(population.train, cache), assets.features(population.dev, cache)
        users = hosted_users(config.users, partition_id, num_partitions)
        _RECORDS[key] = (user_records(population, train_x, dev_x, users), population.train.num_labels)
        _MAX_QUERIES[config] = max((len(part) for part in population.query_parts), default=1)
    return _RECORDS[key]
