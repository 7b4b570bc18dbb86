"""The users one Flower node hosts, and how they answer each kind of server message.

One node hosts one user (deployment) or a cohort of users (scale mode); the code is the
same. Everything here is plain Python and numpy, so the ClientApp stays a thin adapter.

What a node grants comes from its :class:`~fed.device.policy.DevicePolicy` (budgets, floors,
mechanisms, label channel, evaluation), never from the run config; the run's plan only
supplies what is public protocol (sampling specs, the number of answers per query, the
preprocess a downloaded classifier expects). Every message that can spend budget is one
transaction of the node's :class:`~fed.privacy.store.LedgerStore`: check, charge and
release happen under its write lock and the charge commits before the reply exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ldpfed.fed.learning.server_classifier import Model
from ldpfed.fed.runtime.cohort import Cohort, summaries
from ldpfed.fed.device.entropy import generator
from ldpfed.fed.learning.evaluation import Outcomes, local_outcomes
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.events import PrivacyEvent
from ldpfed.fed.privacy.sampling import UpSampling
from ldpfed.fed.privacy.ledger import EVALUATION, FULL_VIEW, ONE, Budget, Ledger
from ldpfed.fed.privacy.store import LedgerStore, LedgerTransaction
from ldpfed.fed.randomizers.base import Randomizer
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.runtime.requests import ClientLimits, ReleaseRequest, parse_release_request
from ldpfed.fed.runtime import refusals as texts
from ldpfed.fed.runtime.refusals import Refusal, RequestRefused, USER_REFUSALS
from ldpfed.fed.runtime.release import CohortDraws, charge, refuse_past_cap, train_step
from ldpfed.fed.runtime.user import Kind, MemoBook, User, UserRecords, UserState

MAX_SCORES = 10_000_000
COHORT_STREAM = 2
"""Key tag of a cohort step's generator: (first hosted user, step number, 2), apart from every
user's own keys (user, calls) and (user, calls, 1)."""
DENOISE_STREAM = 3
"""Key tag of the generator of denoised local inference: (first hosted user, evaluation number, 3)."""
DENOISED = "_denoised"
"""Suffix of a model's outcomes on denoised query releases (fed.randomizers.split_denoise)."""


@dataclass
class NodeReply:
    """Reports of every user that released, plus what the server needs to read them.

    ``refusals`` maps a user to ``(code, reason)`` (codes: :class:`fed.runtime.requests.Refusal`).
    """

    reports: np.ndarray
    labels: np.ndarray
    users: np.ndarray
    slots: np.ndarray
    randomizer: dict[str, Any]
    label_channel: dict[str, Any]
    refusals: dict[int, tuple[str, str]] = field(default_factory=dict)
    ledgers: dict[int, dict[str, float]] = field(default_factory=dict)
    host: str = ""
    """Ray node id of the actor that served the reply, inside the simulation engine only ("" on a device)."""
    ledger_seconds: float = 0.0
    """Seconds the node spent reading, checking, charging and writing ledgers for this reply (scale mode)."""
    sums: ReportSums | None = None
    """The sums of the decoded reports, sent instead of ``reports`` and ``labels`` when the request asks."""

    def summarised(self, randomizer: Randomizer, num_labels: int) -> "NodeReply":
        """The same reply with the sums of its decoded reports in place of the reports and labels."""
        sums = ReportSums.of_reports(randomizer, self.reports, self.labels, num_labels)
        return replace(self, reports=self.reports[:0], labels=np.zeros(0, np.int64), sums=sums)


class NodeHost:
    """A cohort of users on one node, with ledgers in the node's store.

    Parameters
    ----------
    records:
        Clean records per hosted user id (with stable record ids).
    plan:
        The run's plan: the public protocol of the run (sampling, answers, preprocess).
    policy:
        What the device owner allows (on a simulated node: what the run options grant).
    store:
        The node's ledger store.
    owner:
        The owner of a user's spending: the user in a simulation, the device on a device
        (so re-partitioning the device's data into users finds the same spending).
    seed:
        Run seed (honoured only inside the simulation engine, fed.device.entropy).
    sessions:
        Each user's release counter and remote-inference session from earlier messages.
    simulation:
        Whether this node runs in the simulation engine (exact evaluation metrics allowed).
    cohort:
        The same records stacked (scale mode): training steps that need no per-user state
        are then served for all requested users at once (fed.runtime.cohort).
    denoiser:
        The bundle's denoiser (fed.learning.denoiser; snd): local inference also scores each model on
        denoised query releases (``<model>_denoised``), as a user running only the embedding layer would.
    bundle:
        Fingerprint of the setup bundle the records were encoded with: part of every memo key, so
        that after a new bundle a record's report is a new draw, not a report of its old encoding.
    """

    def __init__(
        self,
        records: Mapping[int, UserRecords],
        plan: PrivacyPlan,
        policy: DevicePolicy,
        store: LedgerStore,
        owner: Callable[[int], str],
        seed: int | None,
        sessions: Mapping[int, dict[str, Any]] | None = None,
        simulation: bool = False,
        cohort: Cohort | None = None,
        denoiser: Any = None,
        bundle: str = "",
    ) -> None:
        self.records = records
        self.plan = plan
        self.policy = policy
        self.store = store
        self.owner = owner
        self.seed = seed
        self.sessions = {int(k): dict(v) for k, v in (sessions or {}).items()}
        self.simulation = simulation
        self.cohort = cohort
        self.denoiser = denoiser
        self.bundle = bundle
        self.labels = policy.label_channel(plan.labels.num_values)
        self.budget = Budget(policy.epsilon_sentence, policy.delta, policy.epsilon_user)

    def limits(self, kind: str) -> ClientLimits:
        """What one request of ``kind`` may ask: the policy's floor, the run's sampling."""
        return ClientLimits(
            self.policy.floor(kind),
            self.policy.delta,
            sampling=self.plan.sampling_spec(kind),
            pinned=self.plan.pinned(kind),
            max_dim=self.policy.max_dim,
            min_release_epsilon=self.policy.least_release_epsilon(),
        )

    @contextmanager
    def _users(self, tx: LedgerTransaction, uids: list[int]) -> Iterator[Callable[[int], User]]:
        """Open each user's ledger in turn (saved when the next one opens, and at the end)."""
        opened: list[User] = []

        def user(uid: int) -> User:
            if opened:
                tx.save(opened.pop().state.ledger)
            records = self.records[uid]
            ledger = tx.ledger(self.owner(uid), records.record_ids, self.budget, self.policy.max_events)
            session = self.sessions.get(uid, {})
            memo = None
            if self.policy.memoize:
                owner = self.owner(uid)
                memo = MemoBook(
                    lambda key, randomizer: tx.memo(owner, key, randomizer),
                    lambda key, randomizer, report, label: tx.remember(owner, key, randomizer, report, label),
                    self.bundle,
                )
            state = UserState(ledger, int(session.get("calls", 0)), dict(session.get("extra", {})))
            built = User(uid, records, self.budget, self.labels, self.seed, state, self.policy.enforce, memo)
            opened.append(built)
            return built

        yield user
        if opened:
            tx.save(opened.pop().state.ledger)

    def _keep(self, user: User) -> None:
        self.sessions[user.user_id] = user.state.session_json()

    def release(self, kind: Kind, raw_request: Mapping[str, Any]) -> NodeReply:
        """Serve a train or query release request; refused requests release nothing.

        Raises RequestRefused for a malformed request, or one the policy does not allow (for
        every user). A user out of budget is listed in ``refusals`` and the others still answer.
        """
        request = self.check(kind, raw_request)
        with self.store.transaction() as tx:
            return self.serve(kind, request, tx)

    def check(self, kind: Kind, raw_request: Mapping[str, Any]) -> ReleaseRequest:
        """The request, checked against the policy and the hosted users' records; RequestRefused otherwise."""
        request = parse_release_request(raw_request, self.limits(kind))
        if request.summarise and kind != "train":
            raise RequestRefused("'summarise' applies to train requests only (query reports are answered one by one)")
        reason = self.policy.refusal(request.randomizer)
        if reason:
            raise RequestRefused(reason, Refusal.POLICY)
        q = UpSampling.parse(request.sampling).q if kind == "query" else 1.0
        if q < self.policy.min_upsampling_q:  # before a fictitious row is built
            raise RequestRefused(texts.upsampling_below_least(q, self.policy.min_upsampling_q), Refusal.POLICY)
        self._check_hosted(request.users)
        try:
            request.randomizer.preprocess(np.zeros((1, self.dim)))
        except ValueError as error:
            raise RequestRefused(f"the randomizer does not take this node's records of {self.dim} values: {error}"[:500]) from None
        return request

    def serve(self, kind: Kind, request: ReleaseRequest, tx: LedgerTransaction) -> NodeReply:
        """Release what a checked request asks (see :meth:`release`) within the message's transaction ``tx``
        (which the caller commits once every part of the message is served, or rolls back)."""
        if kind == "train" and self._batched(request):
            reply = self._cohort_train(request, tx)
        else:
            reply = self._release(kind, request, tx)
        if request.summarise and reply.sums is None:  # a cohort step sums its reports as it draws them
            return reply.summarised(request.randomizer, self.plan.labels.num_values)
        return reply

    def _release(self, kind: Kind, request: ReleaseRequest, tx: LedgerTransaction) -> NodeReply:
        """Serve a checked request one user at a time."""
        parts: list[tuple[int, Any]] = []
        refusals: dict[int, tuple[str, str]] = {}
        figures: dict[int, dict[str, float]] = {}
        with self._users(tx, list(request.users)) as user_of:
            for uid in request.users:
                user = user_of(uid)
                try:
                    parts.append((uid, user.release(kind, request)))
                except USER_REFUSALS as refused:
                    refusals[uid] = (str(refused.code), str(refused))
                self._keep(user)
                figures[uid] = self._figures(user, request)
        dim = request.randomizer.preprocess(np.zeros((1, self.dim))).shape[1]
        reports = np.concatenate([r.reports for _, r in parts]) if parts else np.zeros((0, dim), np.float32)
        sizes = [len(r.reports) for _, r in parts]
        return NodeReply(
            reports=reports,
            labels=_stack_labels([r.labels for _, r in parts]) if kind == "train" and parts else np.zeros(0, np.int64),
            users=np.repeat([uid for uid, _ in parts], sizes).astype(np.int64),
            slots=np.concatenate([r.slots for _, r in parts]).astype(np.int64)
            if kind == "query" and parts
            else np.zeros(0, np.int64),
            randomizer=request.randomizer.params(),
            label_channel=self.labels.params(),
            refusals=refusals,
            ledgers=figures,
        )

    def _batched(self, request: ReleaseRequest) -> bool:
        """Whether a training request can be served for all its users at once (fed.runtime.cohort).

        Not when a user needs state of its own (memoized reports, the amplified step
        schedule), when reports mix records, or when the request names a user twice.
        """
        return (
            self.cohort is not None
            and self.policy.enforce == "worst-case"
            and not self.policy.memoize
            and type(request.randomizer).batch_release
            and request.randomizer.records_per_report == 1
            and len(set(request.users)) == len(request.users)
        )

    def _cohort_train(self, request: ReleaseRequest, tx: LedgerTransaction) -> NodeReply:
        """One training step of every requested user, checked and charged in the message's transaction."""
        assert self.cohort is not None
        started = time.perf_counter()
        ledger = tx.cohort_ledger(self.cohort.keys, self.budget, self.policy.max_events)
        rng = generator(self.seed, (int(self.cohort.users[0]), tx.next_count("cohort-steps"), COHORT_STREAM))
        step = train_step(self.cohort, ledger, request, self.labels, CohortDraws(rng), summarise=request.summarise)
        tx.save_cohort(ledger)  # written now: a later part of the message may read these users again
        idx = self.cohort.index(np.asarray(request.users, dtype=np.int64))
        figures = summaries(self.cohort, ledger, idx, np.asarray(request.users, dtype=np.int64), self._train_events(request.randomizer.event))
        return NodeReply(
            reports=step.reports,
            labels=_stack_labels([step.labels]) if len(step.labels) else np.zeros(0, np.int64),
            users=step.users,
            slots=np.zeros(0, np.int64),
            randomizer=request.randomizer.params(),
            label_channel=self.labels.params(),
            refusals=step.refusals,
            ledgers=figures,
            ledger_seconds=time.perf_counter() - started - step.release_seconds,
            sums=step.sums,
        )

    def evaluate(self, models: Mapping[str, Model]) -> Outcomes:
        """Local inference on every user's clean queries: exact counts, pooled and per user, in a
        simulation; on a device only the pooled counts of the policy's evaluation channel (charged
        per query and model), never a user's own accuracy."""
        if len(models) > self.policy.max_models:
            raise RequestRefused(f"{len(models)} models in one message; this device's policy allows {self.policy.max_models}", Refusal.POLICY)
        if self.simulation:
            if self.cohort is not None:
                users, query, labels, starts = self.cohort.users, self.cohort.query, self.cohort.query_labels, self.cohort.query_start
            else:
                users = np.array(sorted(self.records), dtype=np.int64)
                parts = [self.records[int(u)] for u in users]
                query = np.concatenate([r.query for r in parts]) if parts else np.zeros((0, 0))
                labels = np.concatenate([r.query_labels for r in parts]).astype(np.int64) if parts else np.zeros(0, np.int64)
                starts = np.cumsum([0] + [len(r.query_labels) for r in parts])
            if not len(labels):
                return local_outcomes(models, dict.fromkeys(models, query), labels, users, starts)
            with self.store.transaction() as tx:
                rng = generator(self.seed, (int(users[0]), tx.next_count("denoised-evaluations"), DENOISE_STREAM))
            named, inputs = self._local_inputs(models, query, rng)
            return local_outcomes(named, inputs, labels, users, starts)
        named = self._local_inputs(models, np.zeros((0, self.dim)), None)[0]
        correct = {name: 0 for name in named}
        total = {name: 0 for name in named}
        channel = self._evaluation_channel()

        def bits(user: User) -> dict[str, np.ndarray]:
            records = user.records
            if not len(records.query):
                return {name: np.zeros(0, dtype=bool) for name in named}
            named_models, inputs = self._local_inputs(models, records.query, user.rng())
            return {name: model.predict(inputs[name]) == records.query_labels for name, model in named_models.items()}

        return self._noisy_outcomes(channel, bits, correct, total)

    def _local_inputs(
        self, models: Mapping[str, Model], query: np.ndarray, rng: np.random.Generator | None
    ) -> tuple[dict[str, Model], dict[str, np.ndarray]]:
        """Each model to score and its input for the clean ``query`` rows: the query randomizer's
        features, and with a denoiser also ``<model>_denoised`` on denoised releases (noise from ``rng``)."""
        named = dict(models)
        inputs = dict.fromkeys(models, self.plan.query.features(query) if len(query) else query)
        if self.denoiser is not None:
            denoised = self.plan.query.denoised(query, self.denoiser, rng) if len(query) else query
            for name, model in models.items():
                named[f"{name}{DENOISED}"], inputs[f"{name}{DENOISED}"] = model, denoised
        return named, inputs

    def score(self) -> Outcomes:
        """Remote-inference outcome summed over the hosted users: exact effort and correct counts in
        a simulation; on a device only the correct bits, through the evaluation channel."""
        k = self.plan.upsampling.k
        if self.simulation:
            totals: dict[str, int] = {}
            steps_max = 0
            with self.store.transaction() as tx, self._users(tx, sorted(self.records)) as user_of:
                for uid in sorted(self.records):
                    result = user_of(uid).query_result(k)
                    steps_max = max(steps_max, result.pop("steps"))
                    for key, value in result.items():
                        totals[key] = totals.get(key, 0) + value
            totals["steps_max"] = steps_max
            return Outcomes(totals, {}, exact=True)
        channel = self._evaluation_channel()

        def bits(user: User) -> dict[str, np.ndarray]:
            return {"remote": user.query_correct()}

        return self._noisy_outcomes(channel, bits, {"remote": 0}, {"remote": 0})

    def _evaluation_channel(self) -> Any:
        channel = self.policy.evaluation_channel()
        if channel is None:
            raise RequestRefused(
                "evaluation outcomes may not leave this device (policy: evaluation = \"none\")", Refusal.POLICY
            )
        return channel

    def _noisy_outcomes(
        self,
        channel: Any,
        bits: Callable[[User], dict[str, np.ndarray]],
        correct: dict[str, int],
        total: dict[str, int],
    ) -> Outcomes:
        """Binary randomized response on each query's correct bit per model, charged to the query's ledger."""
        event = channel.event
        uids = sorted(self.records)
        with self.store.transaction() as tx, self._users(tx, uids) as user_of:
            for uid in uids:
                user = user_of(uid)
                n_train = len(user.records.train)
                rng = user.rng()
                for name, flags in bits(user).items():
                    ledger = user.state.ledger
                    refuse_past_cap(user.cohort(), ledger, [event])
                    ids = ledger.remaining([event], n_train + np.flatnonzero(flags >= 0)) - n_train
                    cost = {event: np.array([len(ids)])}
                    if not len(ids) or not ledger.users_can_afford(cost, ONE)[0]:
                        continue
                    noisy = channel.release(flags[ids].astype(np.int64), rng)
                    charge(ledger, "all", [(EVALUATION, event)], [event], ledger.columns[n_train + ids], cost, cost, ONE, ONE)
                    correct[name] += int(noisy.sum())
                    total[name] += int(len(ids))
                self._keep(user)
        return Outcomes(correct, total, exact=False, keep_probability=channel.keep_probability)

    def answer(self, users: np.ndarray, slots: np.ndarray, scores: np.ndarray, apply: bool = True) -> list[int]:
        """Remote inference: take the server's scores for released query slots.

        Everything is checked before any user's state changes (RequestRefused otherwise); with
        ``apply`` False only checked. Returns the users whose true queries now all have k answers.
        """
        users, slots, scores = np.asarray(users), np.asarray(slots), np.asarray(scores)
        if users.ndim != 1 or slots.ndim != 1 or scores.ndim != 2 or scores.size > MAX_SCORES:
            raise RequestRefused(
                f"answers need 1-D users and slots and a 2-D score matrix, got shapes {users.shape}, {slots.shape}, {scores.shape}"
            )
        if len(users) != len(scores) or len(slots) != len(scores):
            raise RequestRefused(f"answer arrays must align: {len(users)} users, {len(slots)} slots, {len(scores)} score rows")
        if scores.shape[1] != self.plan.labels.num_values:
            raise RequestRefused(f"answers must have {self.plan.labels.num_values} scores per slot, got {scores.shape[1]}")
        if not np.isfinite(scores).all():
            raise RequestRefused("answer scores contain NaN or infinite values")
        if not (np.issubdtype(users.dtype, np.integer) and np.issubdtype(slots.dtype, np.integer)):
            raise RequestRefused("users and slots must be integer arrays")
        self._check_hosted(np.unique(users).tolist())
        k = self.plan.upsampling.k
        finished: list[int] = []
        uids = np.unique(users).tolist()
        built: dict[int, User] = {}
        with self.store.transaction() as tx, self._users(tx, uids) as user_of:
            for uid in uids:
                built[uid] = user_of(uid)
                built[uid].check_answers(slots[users == uid])
            for uid in uids if apply else []:
                if built[uid].take_answers(slots[users == uid], scores[users == uid], k):
                    finished.append(uid)
                self._keep(built[uid])
        return finished

    def ledgers(self) -> dict[int, dict[str, Any]]:
        """The hosted users' ledger answers: full ledgers inside the simulation engine (labelled
        simulation only), on a device only its aggregates (fed.privacy.ledger.Ledger.device_json)."""
        if self.simulation:
            return {uid: {"view": FULL_VIEW, **ledger.to_json()} for uid, ledger in self.full_ledgers().items()}
        return {uid: ledger.device_json(self._enforced) for uid, ledger in self.full_ledgers().items()}

    def full_ledgers(self) -> dict[int, Ledger]:
        """The hosted users' full ledgers, as the node holds them (on a device: the owner's view, never sent)."""
        uids = sorted(self.records)
        out: dict[int, Ledger] = {}
        with self.store.transaction() as tx, self._users(tx, uids) as user_of:
            for uid in uids:
                out[uid] = user_of(uid).state.ledger
        return out

    def _figures(self, user: User, request: ReleaseRequest) -> dict[str, float]:
        """A user's figures in a release reply: its own summary in a simulation, the served aggregates on a device."""
        if self.simulation:
            return user.summary(self._train_events(request.randomizer.event))
        return user.state.ledger.served_figures(self._enforced)

    @property
    def _enforced(self) -> bool:
        """Whether budgets are enforced on the worst-case ledger (so that it caps every record)."""
        return self.policy.enforce == "worst-case"

    def _check_hosted(self, users: Any) -> None:
        unknown = [u for u in users if u not in self.records]
        if unknown:
            raise RequestRefused(f"users {unknown[:5]} are not hosted on this node")

    def _train_events(self, representation: PrivacyEvent) -> list[PrivacyEvent]:
        """What one training release costs a record (representation and label)."""
        label = self.labels.event
        return [representation] + ([label] if label is not None else [])

    def sessions_json(self) -> str:
        """Every hosted user's counter and session as one JSON string (kept in the node's state)."""
        return json.dumps({str(k): v for k, v in self.sessions.items()})

    @property
    def model_dim(self) -> int:
        """Dimension of the classifier's input: the query randomizer's features of a record."""
        return int(self.plan.query.features(np.zeros((1, self.dim))).shape[1])

    @property
    def dim(self) -> int:
        """Dimension of the clean records (after any shipped projection)."""
        return next(iter(self.records.values())).train.shape[1]


def sessions_from_json(text: str) -> dict[int, dict[str, Any]]:
    """Inverse of :meth:`NodeHost.sessions_json`."""
    return {int(k): v for k, v in json.loads(text).items()}


def _stack_labels(parts: list[np.ndarray]) -> np.ndarray:
    """Users' released labels in one array: class ids (int64), or mixed soft labels (float64 rows)."""
    labels = np.concatenate(parts)
    return labels.astype(np.int64) if labels.ndim == 1 else labels.astype(np.float64)
