"""LdpStrategy: sample users, gather their noisy reports, train the classifier, evaluate.

A Flower Strategy (configure/aggregate train and evaluate, driven by ``Strategy.start``)
plus the steps that have no slot there: the setup handshake, remote inference, and
collecting the users' ledgers. Users are not nodes: a node may host many users, so each
message names the users it addresses.

Nodes may be missing, slow or gone: every exchange waits at most --round-timeout and goes on
with the replies that came back; a node that errs or stays silent is left out of the rest of
that step (its users count as unavailable in the round's metrics, the reason goes to
``errors``), and before every round the connected nodes are re-read, so a node that joins
(e.g. a restarted SuperNode, which gets a new node id) is set up and serves its users again.
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

from ldpfed.fed import protocol
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.classifiers import make_classifier, servable
from ldpfed.fed.learning.server_classifier import ClassifierContext, Model, ServerClassifier
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.plan import PrivacyPlan, make_plan
from ldpfed.fed.learning.evaluation import accuracy
from ldpfed.fed.heterogeneity.registry import online as reached
from ldpfed.fed.heterogeneity.registry import spec_groups
from ldpfed.fed.reporting.groups import Axis, UserAttributes, heterogeneity_axes, simulated_budgets
from ldpfed.fed.runtime.assets import default_cache_dir
from ldpfed.fed.runtime.node import NodeReply
from ldpfed.fed.privacy.noise import ENGINE_SAMPLER
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.fed.randomizers import make_randomizer
from ldpfed.fed.randomizers.labels import make_label_release
from ldpfed.fed.reporting.run_record import RunRecord
from ldpfed.fed.runtime.shuffler import Shuffler
from ldpfed.fed.data.population import Population
from ldpfed.fed.reporting.user_results import UserResults, round_metrics
from ldpfed.fed.heterogeneity.virtual_clock import VirtualClock


FLOWER = protocol.Records(RecordDict, ArrayRecord, ConfigRecord, MetricRecord, Array)
"""Builds the Flower content of a request from the protocol's plain content."""
SHUFFLE_STREAM = 0x5348
"""Stream of the shuffler's permutations under the run seed (simulation; a deployed shuffler draws from the OS)."""


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

    def __init__(self, config: RunSpec, record: RunRecord, baselines: dict[str, Model]) -> None:
        self.config = config
        self.record = record
        self.baselines = baselines
        self.rng = np.random.default_rng(config.seed)
        self.node_of: dict[int, int] = {}
        self.samplers: dict[int, str] = {}
        self.ready: set[int] = set()
        self.available: set[int] = set()
        self.refused: set[int] = set()
        self.dropped: dict[int, str] = {}
        self.outbox: list[Message] = []
        self.bundle = np.zeros(0, dtype=np.uint8)
        self.train_counts: dict[int, int] = {}
        self.query_counts: dict[int, int] = {}
        self.exhausted: set[int] = set()
        self.summaries: dict[int, dict[str, float]] = {}
        self.saved: list[dict[str, np.ndarray]] = []
        self.errors: list[str] = []
        self.aggregator: ServerClassifier | None = None
        self.top_tier: ServerClassifier | None = None
        """Where an axis asks for it (fed.heterogeneity.registry.group_baseline; privacy tiers): the same classifier
        fed only the largest-budget group's reports (a baseline)."""
        self.public_records: tuple[np.ndarray, np.ndarray] | None = None
        """--combined-baseline: the server's public labelled records (features, labels), added to the reports'
        classifier for the model ``combined`` (strategies.app sets them)."""
        self.nonprivate_accuracy: float | None = None
        self.plans: list[PrivacyPlan] = []
        """The plan of each group of users served with their own run options (fed.heterogeneity.registry.spec_groups,
        e.g. privacy tiers; one when no axis sets run options)."""
        self.plan: PrivacyPlan | None = None
        """The run's plan; with several groups the plan of the group with the largest budget."""
        self.group_of = np.zeros(config.data.users, dtype=np.int64)
        """Each user's group among :attr:`plans`, by user id."""
        self.clock: VirtualClock | None = None
        """Where an axis plays on one (--device-speed): the run's virtual clock (simulation only)."""
        self.late: set[int] = set()
        """This round's stragglers: asked, but their reports arrive past --deadline and are left out."""
        self.dim = self.feature_dim = self.num_labels = 0
        self.round_started = time.monotonic()
        self.first_round_started: float | None = None
        self.round_metrics: dict[str, Any] = {}
        self.user_results: UserResults | None = None
        self.attributes: UserAttributes | None = None
        self.shuffler = Shuffler(np.random.default_rng([config.seed, SHUFFLE_STREAM])) if config.privacy.privacy_model == "shuffle" else None
        """With --privacy-model shuffle: what stands between the nodes' replies and the classifier (fed.runtime.shuffler)."""
        self.shuffled: list[int] = []
        """Reports shuffled together in each training round (the batch sizes of the amplification bound)."""

    # -- setup -------------------------------------------------------------------------
    def setup(self, grid: Grid, bundle: np.ndarray, expected_nodes: int) -> None:
        """Wait for the nodes, ship the asset bundle, and learn which users each node hosts.

        Waits up to --round-timeout for ``expected_nodes`` to connect, then goes on with the
        nodes that answered; fewer than --min-nodes is an error.
        """
        self.bundle = bundle
        deadline = time.monotonic() + self.config.schedule.round_timeout
        listed = set(grid.get_node_ids())
        while len(listed) < expected_nodes and time.monotonic() < deadline:
            time.sleep(1.0)
            listed = set(grid.get_node_ids())
        self._set_up(grid, listed)
        if len(self.ready) < self.config.schedule.min_nodes:
            raise RuntimeError(
                f"{len(self.ready)} of {len(listed)} connected nodes (expected {expected_nodes}) answered the setup, "
                f"fewer than --min-nodes {self.config.schedule.min_nodes}: {'; '.join(self.errors) or 'no node connected'}"
            )
        if not self.node_of:
            raise RuntimeError("the nodes that answered the setup host no users")
        self.available = set(self.ready)
        group_specs, self.group_of = spec_groups(self.config)
        max_queries = max(max(self.query_counts.values(), default=1), 1)
        self.plans = [make_plan(spec, self.num_labels, max_queries) for spec in group_specs]
        self.plan = max(self.plans, key=lambda plan: plan.budget.epsilon_sentence)
        # The classifier reads what the server decodes: features(x) may change the dimension (bit
        # encodings report dim * bits; snd decodes token matrices to sentence vectors); local
        # inference applies the same features.
        self.dim = int(self.plan.train.features(np.zeros((1, self.feature_dim))).shape[1])
        self.clock = VirtualClock.start(self.config, self.dim)
        self.aggregator = self.classifier()
        if ENGINE_SAMPLER in {self.samplers.get(n) for n in self.ready}:
            self._user_attributes()  # per-user results will come: rebuild the population now, not inside a round

    def classifier(self, target: np.ndarray | None = None, public_means: np.ndarray | None = None) -> ServerClassifier:
        """A new downstream classifier of --classifier for this run (public data's covariance ``target`` and
        class ``public_means`` where the server has them)."""
        evaluation = self.config.evaluation
        context = ClassifierContext(
            self.dim, self.num_labels, self.config.seed, self.plan.budget.delta, evaluation.shrinkage, target,
            public_means, evaluation.screening, evaluation.weighting,
        )
        return make_classifier(evaluation.classifier, context)

    def refresh(self, grid: Grid) -> None:
        """Re-read the connected nodes: set up new ones (a restarted SuperNode), mark gone ones.

        A node that joins is sent the setup bundle and its users are mapped to it (a restarted
        device lists the same users and keeps its ledger); users of nodes that are not
        connected are unavailable until their node is back.
        """
        listed = set(grid.get_node_ids())
        for node in sorted(self.available - listed):
            self._lost(node, f"node {node} is no longer connected")
        self._set_up(grid, listed - self.ready - self.refused)
        self.available = self.ready & listed

    def _set_up(self, grid: Grid, nodes: set[int]) -> None:
        """Send the setup bundle to ``nodes`` and learn the users of those that accept it."""
        content = FLOWER(protocol.setup_request(self.bundle))
        messages = [Message(content, dst_node_id=n, message_type=protocol.SETUP) for n in sorted(nodes)]
        for node, reply in self._exchange(grid, messages):
            info = protocol.read_setup_reply(reply.content)
            if info.users and self.feature_dim and (info.dim, info.num_labels) != (self.feature_dim, self.num_labels):
                self.refused.add(node)
                self.errors.append(
                    f"{protocol.SETUP}: node {node} reports dimension {info.dim} and {info.num_labels} labels, "
                    f"the run has {self.feature_dim} and {self.num_labels}; left out"
                )
                continue
            self.ready.add(node)
            self.samplers[node] = info.sampler
            self.node_of.update(dict.fromkeys(info.users, node))
            self.train_counts.update(zip(info.users, info.train_counts))
            self.query_counts.update(zip(info.users, info.query_counts))
            if info.users and not self.feature_dim:
                self.feature_dim, self.num_labels = info.dim, info.num_labels

    # -- training ----------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample users with budget left on connected nodes and ask their nodes for reports."""
        self.round_started = time.monotonic()
        if self.first_round_started is None:
            self.first_round_started = self.round_started
        self.refresh(grid)
        spent = {u for u, s in self.summaries.items() if s.get("train_records_left", 1.0) == 0}
        reachable = {u for u, node in self.node_of.items() if node in self.available}
        available = np.array(sorted(reachable - self.exhausted - spent), dtype=np.int64)
        online = reached(self.config, server_round, self.clock)  # a simulation: the server plays the network
        offline = int((~online[available]).sum())
        available = available[online[available]]
        size = len(available) if not self.config.schedule.users_per_round else min(self.config.schedule.users_per_round, len(available))
        sampled = np.sort(self.rng.choice(available, size=size, replace=False)) if size else available
        self.round_metrics = {"round": server_round, "users_sampled": int(size), "users_offline": offline}
        self.late = set()
        if self.clock is not None:
            per_round = self.config.schedule.records_per_user_round
            records = np.array([self.train_counts.get(int(u), 0) for u in sampled], dtype=np.int64)
            late = self.clock.run_round(sampled, np.minimum(records, per_round) if per_round else records)
            self.late = set(sampled[late].tolist())
            self.round_metrics.update({"users_late": len(self.late), "virtual_seconds": self.clock.now})
        # A shuffler takes single reports, not sums; so does a classifier that reads every report (--classifier mlp).
        summarise = not self.config.output.save_reports and self.shuffler is None and not self.aggregator.needs_reports
        self.outbox = self._per_node(sampled.tolist(), protocol.TRAIN, summarise=summarise, late=self.late)
        return self.outbox

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Add every received report to the classifier's statistics; refit it in a round that evaluates."""
        received = refused = late = 0
        ledger_seconds = 0.0
        hosts: dict[str, set[int]] = {}  # Ray node id -> users whose reports it served (simulation engine only)
        parts = [part for _, reply in self._received(self.outbox, replies) for part in protocol.read_release_replies(reply.content)]
        on_time: list[NodeReply] = []
        for data in parts:
            if data.host and len(data.users):
                hosts.setdefault(data.host, set()).update(np.unique(data.users).tolist())
            self.summaries.update(data.ledgers)
            self.exhausted.update(data.refusals)
            refused += len(data.refusals)
            ledger_seconds += data.ledger_seconds
            if len(data.users) and int(data.users[0]) in self.late:  # a straggler's part: it arrived too late
                late += int(data.sums.count) if data.sums is not None else len(data.reports)
            else:
                on_time.append(data)
        if self.shuffler is not None:  # the shuffle model: the classifier sees the round's reports without origin
            batches = self.shuffler.shuffle(on_time)
            unknown = [np.full(len(b.reports), -1, dtype=np.int64) for b in batches]  # saved reports: origin unknown (-1)
            on_time = [NodeReply(b.reports, b.labels, u, u, b.randomizer, b.label_channel) for b, u in zip(batches, unknown)]
            self.shuffled.append(sum(len(b.reports) for b in batches))
            self.round_metrics["reports_shuffled"] = self.shuffled[-1]
        top_randomizer = json.dumps(self.plan.train.params(), sort_keys=True)
        for data in on_time:
            transition = make_label_release(data.label_channel).transition_matrix()
            top = self.top_tier is not None and json.dumps(data.randomizer, sort_keys=True) == top_randomizer
            for aggregator in (self.aggregator, self.top_tier) if top else (self.aggregator,):
                if data.sums is not None:
                    aggregator.add_sums(data.sums, data.randomizer, transition)
                elif len(data.reports):
                    aggregator.add(data.reports, data.labels, data.randomizer, transition)
            received += int(data.sums.count) if data.sums is not None else len(data.reports)
            if data.sums is None and len(data.reports) and self.config.output.save_reports:
                self.saved.append({"reports": data.reports, "labels": data.labels, "users": data.users})
        self.round_metrics.update(
            {
                "reports_received": received,
                "reports_total": self.aggregator.reports,
                "users_refused": refused,
                **({"reports_late": late} if self.clock is not None else {}),
                "ledger_seconds": ledger_seconds,
            }
        )
        self.round_metrics["users_by_host"] = {host: len(users) for host, users in hosts.items()}
        if not self.aggregator.reports or not self.evaluates(server_round):
            return None, MetricRecord({"reports-total": self.aggregator.reports})
        self.round_metrics.update(self.aggregator.round_metrics())
        return FLOWER.record(protocol.models_record({"private": self._model(self.aggregator)})), MetricRecord(
            {"reports-total": self.aggregator.reports}
        )

    # -- evaluation --------------------------------------------------------------------
    def evaluates(self, server_round: int) -> bool:
        """Whether ``server_round`` evaluates the classifiers: every --evaluate-every rounds, and the last."""
        return server_round % self.config.schedule.evaluate_every == 0 or server_round == self.config.schedule.rounds

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the classifiers to every available node for local inference on clean queries
        (no message in a round that does not evaluate)."""
        if not self.evaluates(server_round):
            self.outbox = []
            return self.outbox
        models = dict(self.baselines)
        if self.aggregator.reports:
            models["private"] = self._model(self.aggregator)
            if self.public_records is not None and isinstance(self.aggregator, ReportAggregator):
                models["combined"] = self.aggregator.with_public(*self.public_records)
        if self.top_tier is not None and self.top_tier.reports:
            models["top_tier"] = self._model(self.top_tier)
        content = FLOWER(protocol.evaluate_request(models))
        self.outbox = [Message(content, dst_node_id=n, message_type=protocol.EVALUATE) for n in self._hosting()]
        return self.outbox

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Pool local-inference accuracy (exact in a simulation, estimated from randomized bits on devices);
        in a simulation also each user's own, whose spread over users and groups joins the round's metrics.
        A round that does not evaluate (--evaluate-every) records its metrics without accuracies and returns None.

        Ends the round: its metrics count the nodes that took part throughout (set up, connected,
        answering) and the users out of reach on the others.
        """
        if not self.evaluates(server_round):
            self.round_metrics.update(self._round_end_metrics())
            self.record.round(self.round_metrics)
            return None
        outcomes = [protocol.read_outcomes_reply(reply.content) for _, reply in self._received(self.outbox, replies)]
        acc = accuracy(outcomes)
        kinds = {"exact (simulation only)" if o.exact else "unbiased estimate from randomized outcome bits" for o in outcomes}
        self.round_metrics["accuracy_local_kind"] = " + ".join(sorted(kinds)) or None
        self.round_metrics.update(
            {
                "accuracy_local": acc.get("private"),
                "accuracy_public_only": acc.get("public_only"),
                "accuracy_top_tier_only": acc.get("top_tier"),
                "accuracy_nonprivate": self.nonprivate_accuracy,
                **self._round_end_metrics(),
            }
        )
        if "combined" in acc:  # --combined-baseline: the reports and the public data as one more group
            self.round_metrics["accuracy_combined"] = acc["combined"]
        if "private_denoised" in acc:  # snd: the classifier on denoised query releases (fed.runtime.node.DENOISED)
            self.round_metrics["accuracy_local_denoised"] = acc["private_denoised"]
        per_user = [o.per_user for o in outcomes if o.per_user is not None]
        if per_user:  # simulation only: a device's reply carries no per-user outcome
            self.user_results = UserResults.pool(per_user, self.config.data.users)
            self.round_metrics.update(round_metrics(self.user_results, self.user_axes()))
        self.record.round(self.round_metrics)
        return MetricRecord({k: float(v) for k, v in acc.items()})

    def _round_end_metrics(self) -> dict[str, Any]:
        """The metrics that end every round, evaluated or not: users' epsilon, nodes and users in reach,
        the round's seconds and the seconds since round 1 began (``elapsed``: all work between rounds included)."""
        hosting = self._hosting()
        eps = [s["epsilon_sentence"] for s in self.summaries.values()]
        return {
            "epsilon_sentence_max": max(eps, default=0.0),
            "epsilon_sentence_median": float(np.median(eps)) if eps else 0.0,
            "nodes_available": len(hosting),
            "noise_samplers": " + ".join(sorted({self.samplers[n] for n in hosting})) or None,
            "users_unavailable": sum(self.node_of.get(u) not in hosting for u in range(self.config.data.users)),
            "seconds": time.monotonic() - self.round_started,
            "elapsed": time.monotonic() - (self.first_round_started or self.round_started),
        }

    def user_axes(self, budgets: np.ndarray | None = None) -> list[Axis]:
        """Every grouping of the users (tier, size and label-skew quartiles, availability, device tier): simulation only.

        The population is rebuilt on the server once (at setup in a simulation), as the
        non-private baseline does; availability counts the users that answered a training request so far. ``budgets``
        (by user id, NaN: unknown) replaces the simulated budgets, e.g. with the ledgers' own.
        """
        attributes = self._user_attributes()
        if budgets is not None:
            self.attributes = attributes = attributes.with_budgets(budgets)
        took_part = np.zeros(self.config.data.users, dtype=bool)
        took_part[np.fromiter(self.summaries, dtype=np.int64, count=len(self.summaries))] = True
        return attributes.axes(took_part)

    def _user_attributes(self) -> UserAttributes:
        """The users' attributes, from the run's population rebuilt on the server (once)."""
        if self.attributes is None:
            simulated = simulated_budgets(self.plans, self.group_of)
            axes = heterogeneity_axes(self.config)
            population = Population.build(self.config.data, self.config.seed, default_cache_dir(self.config))
            self.attributes = UserAttributes.from_population(population, simulated, axes)
        return self.attributes

    def summary(self) -> None:
        """Strategy description (Flower prints it at start)."""
        print(f"LdpStrategy: {self.config.data.users} users, {self.config.schedule.rounds} rounds, mechanism {self.config.privacy.mechanism}")

    # -- remote inference and ledgers ---------------------------------------------------
    def remote_inference(self, grid: Grid) -> dict[str, Any]:
        """Up-sampled remote inference (seed 000 Alg. 3), step by step until every user is done.

        Each step: users release sampled items of their mixed (true + fictitious) query sets
        under opaque slot numbers; the server scores every report and sends the scores back;
        users say when each of their true queries has k answers, or refuse once their budget
        is spent. At the end every node reports the outcome (a simulation metric). Users of
        nodes that are not connected, or that miss a step, take no further part.
        """
        self.refresh(grid)
        models: dict[str, Model] = {}  # per query randomizer (one per group, e.g. privacy tier)

        def model_for(randomizer: dict[str, Any]) -> Model:
            key = json.dumps(randomizer, sort_keys=True)
            if key not in models:
                model = self.aggregator.model_for_reports(randomizer, answers=self.plan.upsampling.k)
                models[key] = servable(model, self.config.evaluation.classifier)
            return models[key]

        active = sorted(u for u, node in self.node_of.items() if node in self.available and self.query_counts.get(u, 1) > 0)
        planned_steps = max(plan.query_steps for plan in self.plans)
        max_steps = 10 * planned_steps + 10
        steps = 0
        stopped: dict[int, str] = {}
        reports_total = 0
        while active and steps < max_steps:
            steps += 1
            replied: set[int] = set()
            answers = []
            for node, reply in self._exchange(grid, self._per_node(active, protocol.RELEASE)):
                replied.add(node)
                parts = protocol.read_release_replies(reply.content)
                for data in parts:
                    self.summaries.update(data.ledgers)
                    stopped.update(data.refusals)
                parts = [data for data in parts if len(data.reports)]
                if not parts:
                    continue
                reports_total += sum(len(data.reports) for data in parts)
                content = protocol.answer_request(
                    np.concatenate([data.users for data in parts]),
                    np.concatenate([data.slots for data in parts]),
                    np.concatenate([model_for(data.randomizer).scores(self._decode(data)) for data in parts]),
                )
                answers.append(Message(FLOWER(content), dst_node_id=node, message_type=protocol.ANSWER))
            finished: set[int] = set()
            for _, reply in self._exchange(grid, answers):
                finished.update(protocol.read_answer_reply(reply.content))
            active = [u for u in active if u not in stopped and u not in finished and self.node_of[u] in replied]
        messages = [Message(RecordDict(), dst_node_id=n, message_type=protocol.SCORE) for n in self._hosting()]
        totals: dict[str, int] = {}
        for _, reply in self._exchange(grid, messages):
            outcomes = protocol.read_outcomes_reply(reply.content)
            if not outcomes.exact:  # a device: only a randomized estimate of correct answers
                estimate = outcomes.estimated_correct()["remote"]
                totals["correct"] = totals.get("correct", 0) + round(estimate)
                totals["total"] = totals.get("total", 0) + outcomes.total["remote"]
                continue
            for key, value in outcomes.correct.items():
                totals[key] = max(totals.get(key, 0), int(value)) if key == "steps_max" else totals.get(key, 0) + int(value)
        total = totals.get("total", 0)
        budget_stops = sum(1 for code, _ in stopped.values() if code == Refusal.BUDGET)
        return {
            "accuracy": totals.get("correct", 0) / total if total else None,
            "accuracy_single_answer": totals.get("correct_single", 0) / total if total else None,
            "queries": total,
            "queries_answered": totals.get("answered", 0),
            "queries_with_k_answers": totals.get("complete", 0),
            "answers": totals.get("answers", 0),
            "server_steps": steps,
            "user_steps_max": totals.get("steps_max", 0),
            "planned_steps": planned_steps,
            "releases_true": totals.get("released_true", 0),
            "releases_fictitious": totals.get("released_fictitious", 0),
            "reports": reports_total,
            "users_stopped_by_budget": budget_stops,
            "users_unfinished_at_step_limit": len(active),
        }

    def collect_ledgers(self, grid: Grid) -> dict[int, dict[str, Any]]:
        """Every reachable user's ledger answer: in full from a simulation-engine node, a device's aggregates from a device."""
        self.refresh(grid)
        messages = [Message(RecordDict(), dst_node_id=n, message_type=protocol.LEDGER) for n in self._hosting()]
        ledgers: dict[int, dict[str, Any]] = {}
        for _, reply in self._exchange(grid, messages):
            ledgers.update(protocol.read_ledger_reply(reply.content))
        return dict(sorted(ledgers.items()))

    # -- helpers -----------------------------------------------------------------------
    def _model(self, classifier: ServerClassifier) -> Model:
        """``classifier``'s model for clean inputs, checked to be a form users run."""
        return servable(classifier.model(), self.config.evaluation.classifier)

    def _decode(self, data: NodeReply) -> np.ndarray:
        return make_randomizer(data.randomizer).decode(data.reports)[0]

    def _per_node(
        self, users: list[int], message_type: str, summarise: bool = False, late: set[int] | frozenset[int] = frozenset()
    ) -> list[Message]:
        """One message per node hosting ``users``, with a release request per group among them (:attr:`plans`, e.g. a
        privacy tier; each with its group's randomizer; the ``late`` users of a group in a part of their own, so that their
        reports can be left out); with ``summarise``, simulation-engine nodes send the sums of their
        reports (all the classifier reads; a device's one report stays smaller)."""
        by_node: dict[int, dict[tuple[int, bool], list[int]]] = {}
        for uid in users:
            group = int(self.group_of[uid]) if uid < len(self.group_of) else 0
            by_node.setdefault(self.node_of[uid], {}).setdefault((group, uid in late), []).append(int(uid))
        messages = []
        for node, groups in sorted(by_node.items()):
            summed = summarise and self.samplers.get(node) == ENGINE_SAMPLER
            parts = [
                protocol.release_request(members, *self._request(message_type, group), summarise=summed)
                for (group, _), members in sorted(groups.items())
            ]
            messages.append(Message(FLOWER(protocol.release_parts(parts)), dst_node_id=node, message_type=message_type))
        return messages

    def _request(self, message_type: str, group: int) -> tuple[dict[str, Any], int, str]:
        """Randomizer, records per user and sampling of a group's training or query release."""
        plan = self.plans[group]
        if message_type == protocol.TRAIN:
            return plan.train.params(), self.config.schedule.records_per_user_round, plan.train_sampling.spec
        return plan.query.params(), 0, plan.upsampling.spec

    def _hosting(self) -> list[int]:
        """Available nodes that host users."""
        return sorted(set(self.node_of.values()) & self.available)

    def _exchange(self, grid: Grid, messages: list[Message]) -> list[tuple[int, Message]]:
        """Send ``messages`` and wait up to --round-timeout; see :meth:`_received`."""
        if not messages:
            return []
        return self._received(messages, grid.send_and_receive(messages, timeout=self.config.schedule.round_timeout))

    def _received(self, sent: list[Message], replies: Iterable[Message]) -> list[tuple[int, Message]]:
        """(node, reply) of the replies to ``sent`` that carry content.

        An error reply (the ClientApp raised; the SuperLink's "Node Unavailable") or no reply
        within the timeout makes its node unavailable for the rest of the step; a refusal is
        recorded, and ``not-set-up`` (a restarted node) has the node set up again at the next
        refresh. Every one of them goes to ``errors``.
        """
        sent_to = {m.metadata.message_id: (m.metadata.dst_node_id, m.metadata.message_type) for m in sent}
        answered: set[str] = set()
        ok: list[tuple[int, Message]] = []
        for reply in replies:
            # An error made by the SuperLink comes from its own node id: find the node by the message answered.
            asked = reply.metadata.reply_to_message_id
            node, kind = sent_to.get(asked, (reply.metadata.src_node_id, reply.metadata.message_type))
            answered.add(asked)
            if reply.has_error():
                self._lost(node, f"{kind}: node {node} failed: {reply.error.reason}")
            elif (refused := protocol.read_refusal(reply.content)) is not None:
                self.errors.append(f"{kind}: node {node} refused ({refused[0]}): {refused[1]}")
                if kind == protocol.SETUP:
                    self.refused.add(node)
                elif refused[0] == Refusal.NOT_SET_UP:
                    self.ready.discard(node)
                    self.available.discard(node)
            else:
                ok.append((node, reply))
        for asked in sent_to.keys() - answered:
            node, kind = sent_to[asked]
            self._lost(node, f"{kind}: node {node} sent no reply within {self.config.schedule.round_timeout:g} s")
        return ok

    def _lost(self, node: int, reason: str) -> None:
        """Record that ``node`` dropped out; its users are unavailable until it answers again."""
        self.errors.append(reason)
        self.available.discard(node)
        self.dropped.setdefault(node, reason)
