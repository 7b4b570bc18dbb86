"""The one release pipeline (fed.runtime.release) against a reference ledger written here.

A node serves training steps one user at a time (a cohort of one, fed.runtime.user) or for all its users
at once (scale mode, fed.runtime.cohort). Both are the same pipeline; both are checked here against
:class:`Reference`, a few lines of plain Python that keeps its own counts per user, record and
event and composes them itself (GDP in closed form for Gaussian-only counts). The pipeline must
take the reference's decisions: the same candidates, charges, step logs, refusals (codes and
texts) and summaries. The node's store must also read what other connections committed and keep
nothing of a failed transaction."""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ndtr

from ldpfed.fed.runtime.cohort import Cohort
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, PrivacyEvent
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.privacy.sampling import TrainSampling
from ldpfed.fed.runtime.user import UserRecords

DELTA = 1e-5
OWNER = staticmethod(lambda uid: f"user-{uid}")
PATHS = ("per-user", "cohort")


def _population(seed: int = 0, users: int = 30) -> dict[int, UserRecords]:
    """Users with 0-4 training records, some sharing content (with each other or with a query)."""
    rng = np.random.default_rng(seed)
    records = {}
    for uid in range(users):
        n_train, n_query = int(rng.integers(0, 5)), int(rng.integers(0, 3))
        ids = [f"s{uid}-{i}" for i in range(n_train + n_query)]
        if n_train >= 3:
            ids[2] = ids[1]  # the same sentence twice: one column, spent once
        if n_train and n_query:
            ids[n_train] = ids[0]  # a training sentence also asked as a query
        records[uid * 3 + 1] = UserRecords(
            train=rng.normal(size=(n_train, 4)),
            train_labels=rng.integers(0, 2, n_train),
            query=rng.normal(size=(n_query, 4)),
            query_labels=rng.integers(0, 2, n_query),
            ids=np.array(ids, dtype=object),
        )
    return records


def _host(
    folder: Path, path: str, labels: str, sampling: str = "all", epsilon_user: float = math.inf, max_events: int = 64
) -> NodeHost:
    """A simulated node serving training steps one user at a time (``per-user``) or all at once (``cohort``)."""
    randomizer = GaussianRandomizer(1.0, 2.0)
    label_channel = PublicLabels(2) if labels == "public" else RandomizedResponse(float(labels[3:]), 2)
    plan = PrivacyPlan(
        randomizer, randomizer, label_channel, Budget(9.0, DELTA, epsilon_user), train_sampling=TrainSampling.parse(sampling)
    )
    policy = DevicePolicy(
        9.0, epsilon_user, DELTA, mechanisms=("gaussian",), labels=labels, memoize=False, max_events=max_events
    )
    records = _population()
    cohort = Cohort.build(records, OWNER) if path == "cohort" else None
    store = LedgerStore(folder / f"{path}.sqlite", durable=False)
    return NodeHost(records, plan, policy, store, OWNER, seed=0, simulation=True, cohort=cohort)


def _request(host: NodeHost, users: list[int], records: int) -> dict:
    return {
        "users": users,
        "randomizer": '{"mechanism": "gaussian", "clip": 1.0, "sigma": 2.0}',
        "records": records,
        "sampling": host.plan.train_sampling.spec,
    }


def _counts_by_user(reply) -> dict[int, int]:
    users, counts = np.unique(reply.users, return_counts=True)
    return dict(zip(users.tolist(), counts.tolist()))


def gdp_epsilon(counts: Counter, delta: float) -> float:
    """Epsilon at ``delta`` of Gaussian runs composed exactly (mu-GDP, Dong, Roth and Su, Cor. 2.13)."""
    return _gdp_epsilon(math.sqrt(sum(n * (e.sensitivity / e.sigma) ** 2 for e, n in counts.items() if n)), delta)


@functools.lru_cache(maxsize=None)
def _gdp_epsilon(mu: float, delta: float) -> float:
    """:func:`gdp_epsilon` of mu-GDP (``ndtr`` is the standard normal CDF that ``scipy.stats.norm.cdf`` calls)."""
    if mu == 0:
        return 0.0

    def excess(eps: float) -> float:
        return ndtr(-eps / mu + mu / 2) - math.exp(eps) * ndtr(-eps / mu - mu / 2) - delta

    return 0.0 if excess(0.0) <= 0 else brentq(excess, 0.0, 10 * mu + mu * mu, xtol=1e-13)


class Reference:
    """An independent worst-case ledger (design.md section 2) for the users of one node.

    Counts per user, record id and event, and per user and user-level event, in plain Counters. A
    Gaussian-only count composes in closed form (:func:`gdp_epsilon`); with randomized-response
    labels it is composed by fed.privacy.composition (its PLD accountant is checked in
    tests/test_privacy_core.py): the bookkeeping, not the accountant, is what is under test here.
    """

    def __init__(self, records: dict[int, UserRecords], budget: Budget, max_events: int) -> None:
        self.records, self.budget, self.max_events = records, budget, max_events
        self.spent: dict[int, dict[str, Counter]] = {u: {} for u in records}
        self.reports: dict[int, Counter] = {u: Counter() for u in records}
        self.steps: dict[int, Counter] = {u: Counter() for u in records}

    def epsilon(self, counts: Counter) -> float:
        if all(isinstance(e, GaussianEvent) for e in counts):
            return gdp_epsilon(counts, self.budget.delta)
        return compose_epsilon(counts, self.budget.delta)

    def candidates(self, uid: int, events: list[PrivacyEvent]) -> list[int]:
        """The first training record of each content whose next release stays within the sentence budget."""
        ids = self.records[uid].record_ids[: len(self.records[uid].train)].astype(str).tolist()
        first = [i for i, key in enumerate(ids) if ids.index(key) == i]
        spent = self.spent[uid]
        return [i for i in first if self.epsilon(spent.get(ids[i], Counter()) + Counter(events)) <= self.budget.epsilon_sentence]

    def step(self, uid: int, events: list[PrivacyEvent], pick) -> tuple[tuple[str, str] | None, list[int]]:
        """One training step of ``uid`` releasing ``pick(candidates)``: its refusal (code, text) or None, and the records released."""
        if not len(self.records[uid].train):
            return ("budget", f"user {uid}: holds no train records"), []
        candidates = self.candidates(uid, events)
        if not candidates:
            return ("budget", f"user {uid}: no train record has budget left"), []
        chosen = pick(candidates)
        assert set(chosen) <= set(candidates) and len(set(chosen)) == len(chosen)
        user_cost = Counter({e: len(chosen) for e in events})  # one Gaussian run per report, and its label
        if self.epsilon(self.reports[uid] + user_cost) > self.budget.epsilon_user:
            return ("budget", f"user {uid}: user-level budget would be exceeded"), []
        held = {e for c in self.spent[uid].values() for e, n in c.items() if n} | {e for e, n in self.reports[uid].items() if n}
        new = set(events) - held
        if len(held) + len(new) > self.max_events:
            return ("policy", f"the ledger holds {len(held)} distinct privacy events; {len(new)} more would pass the policy's cap of {self.max_events}"), []
        ids = self.records[uid].record_ids.astype(str)
        for i in chosen:
            self.spent[uid][ids[i]] = self.spent[uid].get(ids[i], Counter()) + Counter(events)
        self.reports[uid] += user_cost
        return None, chosen

    def log(self, uid: int, sampling: str, events: list[PrivacyEvent], reports: int) -> None:
        """The step log of a served step: one step per kind, and the reports that left."""
        kinds = ["train", "labels"]
        for kind, event in zip(kinds, events):
            self.steps[uid][(kind, sampling, event)] += 1
        for event in events:
            self.steps[uid][("reports", sampling, event)] += reports

    def ledger(self, uid: int) -> tuple[dict, dict, dict]:
        """Counts per (event, record index), the user-level account and the step log, nonzero entries only."""
        ids = self.records[uid].record_ids.astype(str)
        counts = {(e, i): n for i, key in enumerate(ids) for e, n in self.spent[uid].get(key, Counter()).items() if n}
        return counts, dict(+self.reports[uid]), dict(+self.steps[uid])

    def summary(self, uid: int, events: list[PrivacyEvent]) -> dict[str, float]:
        spent = self.spent[uid].values()
        return {
            "epsilon_sentence": max([self.epsilon(c) for c in spent], default=0.0),
            "epsilon_user": self.epsilon(self.reports[uid]),
            "releases": float(sum(sum(c.values()) for c in spent)),
            "train_records_left": float(len(self.candidates(uid, events))),
        }


def _node_ledger(data: dict) -> tuple[dict, dict, dict]:
    """A node's ledger answer in :meth:`Reference.ledger`'s terms."""
    from ldpfed.fed.privacy.events import event_from_json

    counts = {
        (event_from_json(entry["event"]), i): n
        for entry in data["events"]
        for i, n in enumerate(entry["counts_per_record"])
        if n
    }
    reports = {event_from_json(e["event"]): e["reports"] for e in data["user_events"] if e["reports"]}
    steps = {(s["kind"], s["sampling"], event_from_json(s["event"])): s["steps"] for s in data["steps"]}
    return counts, reports, steps


def _events(host: NodeHost) -> list[PrivacyEvent]:
    return [GaussianRandomizer(1.0, 2.0).event] + ([host.labels.event] if host.labels.event is not None else [])


def _check_against(reference: Reference, host: NodeHost, reply, events: list[PrivacyEvent]) -> None:
    ledgers = host.ledgers()
    for uid in host.records:
        assert _node_ledger(ledgers[uid]) == reference.ledger(uid), uid
    for uid, figures in reply.ledgers.items():
        assert figures == pytest.approx(reference.summary(uid, events), rel=1e-6, abs=1e-9), uid


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("labels,epsilon_user", [("public", math.inf), ("rr:2.0", math.inf), ("public", 12.0)])
def test_training_steps_take_the_reference_ledgers_decisions(tmp_path: Path, path: str, labels: str, epsilon_user: float) -> None:
    """Every record with budget left, every step: the same releases, charges, step logs, refusals and figures."""
    host = _host(tmp_path, path, labels, epsilon_user=epsilon_user)
    events = _events(host)
    reference = Reference(host.records, host.budget, 64)
    ids = sorted(host.records)
    released = 0
    for step, users in enumerate([ids, ids[::2], ids, ids[5:], ids]):
        reply = host.release("train", _request(host, users, 0))
        expected_refusals, expected_counts = {}, {}
        for uid in users:
            refusal, chosen = reference.step(uid, events, lambda c: c)
            if refusal is None:
                reference.log(uid, "all", events, len(chosen))
                if chosen:
                    expected_counts[uid] = len(chosen)
            else:
                expected_refusals[uid] = refusal
        assert reply.refusals == expected_refusals, step
        assert _counts_by_user(reply) == expected_counts, step
        assert reply.users.tolist() == [u for u in users for _ in range(expected_counts.get(u, 0))]  # by user, as requested
        _check_against(reference, host, reply, events)
        released += len(reply.reports)
    assert released and any(code == "budget" for code, _ in reply.refusals.values())  # some released, all are out
    if epsilon_user < math.inf:
        assert any("user-level" in text for _, text in reply.refusals.values())


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("sampling,records", [("all", 1), ("all", 2), ("fixed:2", 0), ("poisson:0.5", 0)])
def test_sampled_steps_charge_exactly_a_valid_sample_of_the_reference_candidates(
    tmp_path: Path, path: str, sampling: str, records: int
) -> None:
    """Which records a step picks is random: each user's pick must be a sample of the reference's candidates
    of the size the sampling asks, charged once per event, and nothing else may be charged."""
    host = _host(tmp_path, path, "public", sampling)
    events = _events(host)
    reference = Reference(host.records, host.budget, 64)
    ids = sorted(host.records)
    size = records if sampling == "all" else 2 if sampling == "fixed:2" else None  # None: Poisson, any size
    # device-style draws (not seeded): Poisson may leave a record unspent after 20 steps, so go on until none is left
    for step in itertools.count():
        assert step < 200, "users still hold records after 200 steps"
        before = {uid: _node_ledger(data)[0] for uid, data in host.ledgers().items()}
        reply = host.release("train", _request(host, ids, records))
        after = {uid: _node_ledger(data)[0] for uid, data in host.ledgers().items()}
        expected_refusals = {}
        for uid in ids:
            new = {i for (e, i), n in after[uid].items() if n != before[uid].get((e, i), 0)}
            ids_of = host.records[uid].record_ids.astype(str)
            charged = sorted({ids_of.tolist().index(ids_of[i]) for i in new})  # each content by its first record

            def pick(candidates: list[int], charged: list[int] = charged) -> list[int]:
                if size is not None:
                    assert len(charged) == min(size, len(candidates)), (step, uid)
                return charged

            refusal, chosen = reference.step(uid, events, pick)
            if refusal is None:
                reference.log(uid, sampling, events, len(chosen))
                assert _counts_by_user(reply).get(uid, 0) == len(chosen)
            else:
                expected_refusals[uid] = refusal
                assert not charged
        assert reply.refusals == expected_refusals, step
        _check_against(reference, host, reply, events)
        if step >= 19 and len(reply.refusals) == len(ids):
            break  # all are out of budget


@pytest.mark.parametrize("path", PATHS)
def test_the_event_cap_refuses_as_the_reference_does(tmp_path: Path, path: str) -> None:
    host = _host(tmp_path, path, "rr:0.5", max_events=1)
    reference = Reference(host.records, host.budget, 1)
    ids = sorted(host.records)
    reply = host.release("train", _request(host, ids, 0))
    assert reply.refusals == {uid: reference.step(uid, _events(host), lambda c: c)[0] for uid in ids}
    assert len(reply.reports) == 0
    assert {code for code, _ in reply.refusals.values()} == {"policy", "budget"}  # cap, or no train records


def test_the_reference_composes_as_the_node_does() -> None:
    """The reference's closed form is the node's accountant (else the tests above compare two different budgets)."""
    event = GaussianRandomizer(1.0, 2.0).event
    for n in (1, 2, 3, 4, 7):
        assert gdp_epsilon(Counter({event: n}), DELTA) == pytest.approx(compose_epsilon({event: n}, DELTA), rel=1e-6)
    assert gdp_epsilon(Counter({event: 3}), DELTA) <= 9.0 < gdp_epsilon(Counter({event: 4}), DELTA)  # 3 releases a record


def test_a_cohort_sees_what_another_connection_spent(tmp_path: Path) -> None:
    """The cohort's arrays kept between messages are used only if no other transaction committed since."""
    cohort_path = _host(tmp_path, "cohort", "public")
    uid = next(u for u, r in cohort_path.records.items() if len(r.train) == 1)
    cohort_path.release("train", _request(cohort_path, [u for u in cohort_path.records if u != uid], 0))
    per_user = NodeHost(
        cohort_path.records, cohort_path.plan, cohort_path.policy, LedgerStore(cohort_path.store.path, durable=False),
        OWNER, seed=0, simulation=True,
    )
    for _ in range(5):  # another connection spends the user's only record
        per_user.release("train", _request(per_user, [uid], 0))
    reply = cohort_path.release("train", _request(cohort_path, [uid], 0))
    assert len(reply.reports) == 0 and reply.refusals[uid][0] == "budget"


def test_a_failed_cohort_transaction_keeps_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cohort_path = _host(tmp_path, "cohort", "public")
    ids = sorted(cohort_path.records)
    cohort_path.release("train", _request(cohort_path, ids[:3], 0))  # the arrays are now kept in this process
    before = cohort_path.ledgers()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    from ldpfed.fed.privacy import store

    monkeypatch.setattr(store.LedgerTransaction, "save_cohort", fail)
    with pytest.raises(OSError):
        cohort_path.release("train", _request(cohort_path, ids, 0))
    monkeypatch.undo()
    assert cohort_path.ledgers() == before
    reply = cohort_path.release("train", _request(cohort_path, ids, 0))  # served from the store, not the failed arrays
    assert set(np.unique(reply.users).tolist()) >= {u for u in ids[3:] if len(cohort_path.records[u].train)}


@pytest.mark.parametrize("order", ["permuted", "consecutive"])
@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_a_release_in_blocks_is_the_release_of_all_rows_at_once(mechanism: str, order: str) -> None:
    """Blocks (fed.runtime.cohort.RELEASE_BLOCK rows per call, in chunks of GRAM_BLOCK rows) only bound memory
    traffic, and rows preprocessed once (fed.runtime.cohort.Cohort.rows_for) only save work: for a
    clip-and-noise randomizer they draw the same noise, in the same order, as one call on every
    selected row. Consecutive rows (a step selecting every record) are read in place, read-only."""
    from ldpfed.fed.learning.report_sums import GRAM_BLOCK
    from ldpfed.fed.runtime.release import RELEASE_BLOCK, release_blocks
    from ldpfed.fed.randomizers.base import make_randomizer

    scale = {"gaussian": {"sigma": 0.7}, "laplace": {"scale": 0.7}}[mechanism]
    randomizer = make_randomizer({"mechanism": mechanism, "clip": 1.0, **scale})
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(2 * GRAM_BLOCK, 8))
    n = GRAM_BLOCK + 2 * RELEASE_BLOCK + 17
    selected = rng.permutation(len(rows))[:n] if order == "permuted" else np.arange(5, 5 + n)
    labels = rng.integers(0, 2, len(selected))
    prepared = randomizer.preprocess(rows)
    kept = prepared.copy()
    blocks = list(release_blocks(randomizer, prepared, selected, labels, 2, np.random.default_rng(11)))
    np.testing.assert_array_equal(prepared, kept)  # the preprocessed rows are left as they were
    assert prepared.flags.writeable
    assert [len(r) for r, _ in blocks] == [GRAM_BLOCK, 2 * RELEASE_BLOCK + 17]
    reports, released = np.concatenate([r for r, _ in blocks]), np.concatenate([y for _, y in blocks])
    whole = randomizer.release(rows[selected], np.random.default_rng(11))
    assert reports.dtype == np.float32 and reports.shape == whole.shape
    np.testing.assert_array_equal(reports, whole.astype(np.float32))
    np.testing.assert_array_equal(released, labels)


def test_a_cohort_keeps_an_owners_counts_of_records_it_does_not_hold(tmp_path: Path) -> None:
    """A stored owner row may count records outside the cohort (e.g. an earlier partition): a cohort
    step rewrites the row with them kept, in a fresh read and from the arrays kept in the process."""
    cohort_path = _host(tmp_path, "cohort", "public")
    uid = next(u for u, r in cohort_path.records.items() if len(r.train) >= 2)
    with cohort_path.store.transaction() as tx:
        tx.ledger(OWNER(uid), ["elsewhere"], Budget(9.0, DELTA)).charge([GaussianRandomizer(1.0, 2.0).event], np.array([0]))
    for _ in range(2):  # a read from the store, then the process's own arrays
        cohort_path.release("train", _request(cohort_path, [uid], 0))
    with cohort_path.store.transaction() as tx:
        records = cohort_path.records[uid]
        ids = ["elsewhere", *records.record_ids[: len(records.train)]]
        counts = tx.ledger(OWNER(uid), ids, Budget(9.0, DELTA)).record_counts()[0]
    assert counts[0] == 1 and (counts[1:] > 0).all()


def test_rows_are_preprocessed_once_per_clip_and_never_for_a_mixing_randomizer() -> None:
    """A server that changes the noise reuses the clipped rows; one that changes the clip gets rows
    clipped afresh (one copy kept: alternating clips cannot grow the node's memory); a mixup
    randomizer, whose reports mix rows before the noise, always gets the clean rows."""
    from ldpfed.fed.randomizers.base import make_randomizer

    cohort = Cohort.build(_population(users=40), OWNER)
    loose, noisier, tight = GaussianRandomizer(1.0, 2.0), GaussianRandomizer(1.0, 9.0), GaussianRandomizer(0.25, 2.0)
    first = cohort.rows_for(loose)
    assert cohort.rows_for(noisier) is first
    np.testing.assert_array_equal(first, loose.preprocess(cohort.train))
    clipped = cohort.rows_for(tight)
    assert clipped is not first and np.linalg.norm(clipped, axis=1).max() <= 0.25 + 1e-12
    assert cohort.rows_for(loose) is not first and len(cohort._prepared) == 2  # the key and one copy
    mixing = make_randomizer({"mechanism": "dpie-gaussian", "k": 2, "max_coefficient": 1.0, "masks": 0, "clip": 1.0, "sigma": 1.0})
    assert mixing.preprocess_key() is None and cohort.rows_for(mixing) is cohort.train


def test_cohort_columns_are_each_users_distinct_record_ids_in_order() -> None:
    """Columns as a per-user ledger numbers them: user by user, each user's distinct ids sorted;
    the same id held by two users is two columns."""
    records = _population(seed=3, users=40)
    shared = np.array(["s0-0", "x", "s0-0"], dtype=object)  # user 1's first id, and a query sharing a sentence
    records[1000] = UserRecords(np.ones((2, 4)), np.zeros(2, np.int64), np.ones((1, 4)), np.zeros(1, np.int64), ids=shared)
    cohort = Cohort.build(records, OWNER)
    columns, column_user, first = [], [], []
    for i, uid in enumerate(sorted(records)):
        keys, inverse = np.unique(records[uid].record_ids.astype(str), return_inverse=True)
        own = inverse[: len(records[uid].train)] + len(column_user)
        first.extend(np.arange(len(own)) == np.array([np.flatnonzero(own == c)[0] for c in own], dtype=np.int64))
        columns.extend(own)
        column_user.extend([i] * len(keys))
        assert cohort.keys.column_keys[cohort.column_start[i] : cohort.column_start[i + 1]] == keys.tolist()
    assert cohort.train_column.tolist() == columns
    assert cohort.train_first.tolist() == first
    assert cohort.keys.column_user.tolist() == column_user
    assert cohort.column_start[-1] == len(column_user)


def test_a_ledger_with_user_level_only_events_survives_json() -> None:
    """A mixup report's user-level event is charged to no record: the one ledger model keeps it as a row of
    its own, and a ledger read back from its JSON is the same ledger."""
    from ldpfed.fed.privacy.ledger import Ledger
    from ldpfed.fed.randomizers.base import make_randomizer

    mixup = make_randomizer({"mechanism": "dpie-gaussian", "k": 2, "max_coefficient": 0.5, "masks": 0, "clip": 1.0, "sigma": 2.0})
    assert mixup.user_event != mixup.event
    ledger = Ledger(4, Budget(9.0, DELTA), columns=np.array([0, 1, 1, 2]))
    ledger.charge([mixup.event], np.array([0, 1]), {mixup.user_event: 1})
    ledger.log_step("train", "all", mixup.event)
    data = ledger.to_json()
    assert [e["reports"] for e in data["user_events"]] == [1] and len(data["events"]) == 1
    again = Ledger.from_json(data)
    assert again.to_json() == data
    assert again.user_epsilon() == ledger.user_epsilon() > 0 and again.sentence_epsilon() == ledger.sentence_epsilon()
