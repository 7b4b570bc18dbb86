"""LdpStrategy: sample users, gather their noisy reports, train the classifier, evaluate.

A Flower Strategy (configure/aggregate train and evaluate, driven by ``Strategy.start``)
plus the steps that have no slot there: the setup handshake, remote inference, and
collecting the users' ledgers. Users are not nodes: a node may host many users, so each
message names the users it addresses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from clients.wire import is_refusal, models_to_record, record_to_reply
from fed.aggregation import ReportAggregator
from fed.classifier import LinearModel
from fed.config import RunConfig
from fed.evaluation import accuracy
from fed.plan import PrivacyPlan, make_plan
from fed.node import NodeReply
from fed.randomizers import make_randomizer
from fed.randomizers.labels import make_label_release
from fed.run_record import RunRecord


class LdpStrategy(Strategy):
    """Server side of an ldpfed run.

    Parameters
    ----------
    config:
        The run options.
    record:
        Where per-round metrics go.
    baselines:
        Classifiers evaluated beside the private one (public-only; non-private in simulation).
    """

    def __init__(self, config: RunConfig, record: RunRecord, baselines: dict[str, LinearModel]) -> None:
        self.config = config
        self.record = record
        self.baselines = baselines
        self.rng = np.random.default_rng(config.seed)
        self.node_of: dict[int, int] = {}
        self.train_counts: dict[int, int] = {}
        self.query_counts: dict[int, int] = {}
        self.exhausted: set[int] = set()
        self.summaries: dict[int, dict[str, float]] = {}
        self.saved: list[dict[str, np.ndarray]] = []
        self.errors: list[str] = []
        self.aggregator: ReportAggregator | None = None
        self.nonprivate_accuracy: float | None = None
        self.plan: PrivacyPlan | None = None
        self.dim = self.num_labels = 0
        self.round_started = time.monotonic()
        self.round_metrics: dict[str, Any] = {}

    # -- setup -------------------------------------------------------------------------
    def setup(self, grid: Grid, bundle: np.ndarray, expected_nodes: int, timeout: float) -> None:
        """Wait for the nodes, ship the asset bundle, and learn which users each node hosts."""
        deadline = time.monotonic() + timeout
        nodes = list(grid.get_node_ids())
        while len(nodes) < expected_nodes and time.monotonic() < deadline:
            time.sleep(1.0)
            nodes = list(grid.get_node_ids())
        if not nodes:
            raise RuntimeError("no Flower node connected")
        content = RecordDict({"assets": ArrayRecord({"bundle": Array(bundle)})})
        messages = [Message(content, dst_node_id=n, message_type="query.setup") for n in nodes]
        for reply in grid.send_and_receive(messages, timeout=timeout):
            if reply.has_error():
                raise RuntimeError(f"node {reply.metadata.src_node_id} failed setup: {reply.error.reason}")
            info = reply.content["node"]
            for uid in info["users"]:
                self.node_of[int(uid)] = reply.metadata.src_node_id
            if "query-counts" in info:
                self.train_counts.update(zip(map(int, info["users"]), map(int, info["train-counts"])))
                self.query_counts.update(zip(map(int, info["users"]), map(int, info["query-counts"])))
            if info["users"]:
                self.dim, self.num_labels = int(info["dim"]), int(info["num-labels"])
        missing = set(range(self.config.users)) - set(self.node_of)
        if missing:
            raise RuntimeError(f"{len(missing)} users are hosted by no node (e.g. {sorted(missing)[:5]})")
        self.plan = make_plan(self.config, self.num_labels, max(max(self.query_counts.values(), default=1), 1))
        self.feature_dim = self.dim
        # The classifier reads what the randomizer reports: preprocess(x) may change the dimension
        # (bit encodings report dim * bits); local inference applies the same preprocess.
        self.dim = int(self.plan.train.preprocess(np.zeros((1, self.feature_dim))).shape[1])
        self.aggregator = ReportAggregator(self.dim, self.num_labels, self.config.shrinkage)

    # -- training ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample users with budget left and ask their nodes for reports."""
        self.round_started = time.monotonic()
        spent = {u for u, s in self.summaries.items() if s.get("train_records_left", 1.0) == 0}
        available = np.array(sorted(set(self.node_of) - self.exhausted - spent), dtype=np.int64)
        size = len(available) if not self.config.users_per_round else min(self.config.users_per_round, len(available))
        sampled = np.sort(self.rng.choice(available, size=size, replace=False)) if size else available
        self.round_metrics = {"round": server_round, "users_sampled": int(size)}
        request = {
            "randomizer": json.dumps(self.plan.train.params()),
            "records": self.config.records_per_user_round,
            "sampling": self.plan.train_sampling.spec,
        }
        return self._per_node(sampled.tolist(), "train", request)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Add every received report to the classifier's statistics and refit it."""
        received = refused = 0
        for reply in self._ok(replies):
            data = record_to_reply(reply.content)
            self.summaries.update(data.ledgers)
            self.exhausted.update(data.refusals)
            refused += len(data.refusals)
            if len(data.reports):
                transition = make_label_release(data.label_channel).transition_matrix()
                self.aggregator.add(data.reports, data.labels, data.randomizer, transition)
                received += len(data.reports)
                if self.config.save_reports:
                    self.saved.append({"reports": data.reports, "labels": data.labels, "users": data.users})
        self.round_metrics.update(
            {"reports_received": received, "reports_total": self.aggregator.reports, "users_refused": refused}
        )
        if not self.aggregator.reports:
            return None, MetricRecord({"reports-total": 0})
        self.round_metrics["classifier_coordinates"] = int(self.aggregator.lda.coordinates().sum())
        return models_to_record({"private": self.aggregator.model()}), MetricRecord(
            {"reports-total": self.aggregator.reports}
        )

    # -- evaluation --------------------------------------------------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the classifiers to every node for local inference on clean queries."""
        models = dict(self.baselines)
        if self.aggregator.reports:
            models["private"] = self.aggregator.model()
        content = RecordDict({"models": models_to_record(models)})
        return [Message(content, dst_node_id=n, message_type="evaluate") for n in sorted(set(self.node_of.values()))]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Pool local-inference accuracy and record the round."""
        counts, totals = [], []
        for reply in self._ok(replies):
            metrics = reply.content["metrics"]
            counts.append({k.removeprefix("correct."): int(v) for k, v in metrics.items() if k.startswith("correct.")})
            totals.append(int(metrics["total"]))
        acc = accuracy(counts, totals)
        eps = [s["epsilon_sentence"] for s in self.summaries.values()]
        self.round_metrics.update(
            {
                "accuracy_local": acc.get("private"),
                "accuracy_public_only": acc.get("public_only"),
                "accuracy_nonprivate": self.nonprivate_accuracy,
                "epsilon_sentence_max": max(eps, default=0.0),
                "epsilon_sentence_median": float(np.median(eps)) if eps else 0.0,
                "seconds": time.monotonic() - self.round_started,
            }
        )
        self.record.round(self.round_metrics)
        return MetricRecord({k: float(v) for k, v in acc.items()})

    def summary(self) -> None:
        """Strategy description (Flower prints it at start)."""
        print(f"LdpStrategy: {self.config.users} users, {self.config.rounds} rounds, mechanism {self.config.mechanism}")

    # -- remote inference and ledgers ---------------------------------------------------
    def remote_inference(self, grid: Grid, timeout: float) -> dict[str, Any]:
        """Up-sampled remote inference (seed 000 Alg. 3), step by step until every user is done.

        Each step: users release sampled items of their mixed (true + fictitious) query sets
        under opaque slot numbers; the server scores every report and sends the scores back;
        users say when each of their true queries has k answers, or refuse once their budget
        is spent. At the end every node reports the outcome (a simulation metric).
        """
        request = {"randomizer": json.dumps(self.plan.query.params()), "records": 0, "sampling": self.plan.upsampling.spec}
        model = self.aggregator.model_for_reports(self.plan.query.params(), answers=self.plan.upsampling.k)
        active = sorted(u for u in self.node_of if self.query_counts.get(u, 1) > 0)
        max_steps = 10 * self.plan.query_steps + 10
        steps = 0
        stopped: dict[int, str] = {}
        reports_total = 0
        while active and steps < max_steps:
            steps += 1
            replied: set[int] = set()
            answers = []
            for reply in self._ok(grid.send_and_receive(self._per_node(active, "query.release", request), timeout=timeout)):
                replied.add(reply.metadata.src_node_id)
                data = record_to_reply(reply.content)
                self.summaries.update(data.ledgers)
                stopped.update(data.refusals)
                if not len(data.reports):
                    continue
                reports_total += len(data.reports)
                arrays = ArrayRecord(
                    {"users": Array(data.users), "slots": Array(data.slots), "scores": Array(model.scores(self._decode(data)))}
                )
                answers.append(
                    Message(RecordDict({"answers": arrays}), dst_node_id=reply.metadata.src_node_id, message_type="query.answer")
                )
            finished: set[int] = set()
            for reply in self._ok(grid.send_and_receive(answers, timeout=timeout)):
                finished.update(int(u) for u in json.loads(str(reply.content["answered"]["finished"])))
            active = [u for u in active if u not in stopped and u not in finished and self.node_of[u] in replied]
        nodes = sorted(set(self.node_of.values()))
        messages = [Message(RecordDict(), dst_node_id=n, message_type="query.score") for n in nodes]
        totals: dict[str, int] = {}
        for reply in self._ok(grid.send_and_receive(messages, timeout=timeout)):
            for key, value in reply.content["metrics"].items():
                totals[key] = max(totals.get(key, 0), int(value)) if key == "steps_max" else totals.get(key, 0) + int(value)
        total = totals.get("total", 0)
        budget_stops = sum(1 for reason in stopped.values() if "budget" in reason)
        return {
            "accuracy": totals.get("correct", 0) / total if total else None,
            "accuracy_single_answer": totals.get("correct_single", 0) / total if total else None,
            "queries": total,
            "queries_answered": totals.get("answered", 0),
            "queries_with_k_answers": totals.get("complete", 0),
            "answers": totals.get("answers", 0),
            "server_steps": steps,
            "user_steps_max": totals.get("steps_max", 0),
            "planned_steps": self.plan.query_steps,
            "releases_true": totals.get("released_true", 0),
            "releases_fictitious": totals.get("released_fictitious", 0),
            "reports": reports_total,
            "users_stopped_by_budget": budget_stops,
            "users_unfinished_at_step_limit": len(active),
        }

    def collect_ledgers(self, grid: Grid, timeout: float) -> dict[int, dict[str, Any]]:
        """Every user's full ledger (each event and its count per record)."""
        nodes = sorted(set(self.node_of.values()))
        messages = [Message(RecordDict(), dst_node_id=n, message_type="query.ledger") for n in nodes]
        ledgers: dict[int, dict[str, Any]] = {}
        for reply in self._ok(grid.send_and_receive(messages, timeout=timeout)):
            ledgers.update({int(k): v for k, v in json.loads(str(reply.content["ledgers"]["json"])).items()})
        return dict(sorted(ledgers.items()))

    # -- helpers -----------------------------------------------------------------------
    def _decode(self, data: NodeReply) -> np.ndarray:
        return make_randomizer(data.randomizer).decode(data.reports)[0]

    def _per_node(self, users: list[int], message_type: str, request: dict[str, Any]) -> list[Message]:
        by_node: dict[int, list[int]] = {}
        for uid in users:
            by_node.setdefault(self.node_of[uid], []).append(int(uid))
        return [
            Message(
                RecordDict({"request": ConfigRecord({"users": group, **request})}),
                dst_node_id=node,
                message_type=message_type,
            )
            for node, group in sorted(by_node.items())
        ]

    def _ok(self, replies: Iterable[Message]) -> Iterable[Message]:
        """Replies that carry content; errors and refusals are logged and skipped."""
        for reply in replies:
            if reply.has_error():
                self.errors.append(f"node {reply.metadata.src_node_id}: {reply.error.reason}")
            elif is_refusal(reply.content):
                self.errors.append(f"node {reply.metadata.src_node_id} refused: {reply.content['meta']['reason']}")
            else:
                yield reply
