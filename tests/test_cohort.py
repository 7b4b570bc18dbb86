"""Scale mode serves a training step for all of a node's users at once (fed.cohort): it must take
exactly the decisions the per-user path takes (same candidates, charges, step logs, refusals and
summaries), read what other connections committed, and keep nothing of a failed transaction."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fed.cohort import Cohort
from fed.node import NodeHost
from fed.plan import PrivacyPlan
from fed.policy import DevicePolicy
from fed.privacy.ledger import Budget
from fed.privacy.store import LedgerStore
from fed.randomizers.gaussian import GaussianRandomizer
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.sampling import TrainSampling
from fed.user import UserRecords

DELTA = 1e-5
OWNER = staticmethod(lambda uid: f"user-{uid}")


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


def _hosts(
    folder: Path, labels: str, sampling: str = "all", epsilon_user: float = math.inf, max_events: int = 64
) -> tuple[NodeHost, NodeHost]:
    randomizer = GaussianRandomizer(1.0, 2.0)
    label_channel = PublicLabels(2) if labels == "public" else RandomizedResponse(float(labels[3:]), 2)
    plan = PrivacyPlan(
        randomizer, randomizer, label_channel, Budget(9.0, DELTA, epsilon_user), train_sampling=TrainSampling.parse(sampling)
    )
    policy = DevicePolicy(
        9.0, epsilon_user, DELTA, mechanisms=("gaussian",), labels=labels, memoize=False, max_events=max_events
    )
    records = _population()
    hosts = []
    for name, cohort in (("users", None), ("cohort", Cohort.build(records, OWNER))):
        store = LedgerStore(folder / f"{name}.sqlite", durable=False)
        hosts.append(NodeHost(records, plan, policy, store, OWNER, seed=0, simulation=True, cohort=cohort))
    return hosts[0], hosts[1]


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


@pytest.mark.parametrize("labels,epsilon_user", [("public", math.inf), ("rr:2.0", math.inf), ("public", 12.0)])
def test_a_cohort_step_takes_the_per_user_decisions(tmp_path: Path, labels: str, epsilon_user: float) -> None:
    users_path, cohort_path = _hosts(tmp_path, labels, epsilon_user=epsilon_user)
    ids = sorted(users_path.records)
    released = 0
    for step, (users, records) in enumerate([(ids, 0), (ids[::2], 0), (ids, 0), (ids[5:], 0), (ids, 0)]):
        a = users_path.release("train", _request(users_path, users, records))
        b = cohort_path.release("train", _request(cohort_path, users, records))
        assert b.refusals == a.refusals, step
        assert _counts_by_user(b) == _counts_by_user(a), step
        assert b.ledgers.keys() == a.ledgers.keys()
        for uid in a.ledgers:
            assert b.ledgers[uid] == pytest.approx(a.ledgers[uid], rel=1e-12), (step, uid)
        assert b.reports.shape == a.reports.shape and b.labels.shape == a.labels.shape
        assert (b.users == a.users).all()  # same order: by user as requested, records in order
        released += len(a.reports)
    assert cohort_path.ledgers() == users_path.ledgers()  # counts, user-level account, step log: all equal
    assert released and any(code == "budget" for code, _ in a.refusals.values())  # some released, all are out


@pytest.mark.parametrize("sampling,records", [("all", 1), ("all", 2), ("fixed:2", 0)])
def test_sampled_cohort_steps_release_what_the_per_user_path_releases(tmp_path: Path, sampling: str, records: int) -> None:
    """Which records a step picks is random; each user's total, and every record's spending once all
    budgets are spent, are not (nor, one record per step, how many each user releases per step)."""
    users_path, cohort_path = _hosts(tmp_path, "public", sampling)
    ids = sorted(users_path.records)
    totals: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for step in range(20):
        a = users_path.release("train", _request(users_path, ids, records))
        b = cohort_path.release("train", _request(cohort_path, ids, records))
        for total, reply in zip(totals, (a, b)):
            for uid, n in _counts_by_user(reply).items():
                total[uid] = total.get(uid, 0) + n
        if records == 1:
            assert b.refusals == a.refusals and _counts_by_user(b) == _counts_by_user(a), step
    assert b.refusals == a.refusals and len(a.refusals) == len(ids)  # all are out of budget
    assert totals[0] == totals[1]
    ledgers = cohort_path.ledgers()
    for ledger in ledgers.values():  # the step logs differ (users took different numbers of steps)
        ledger.pop("steps")
    expected = users_path.ledgers()
    for ledger in expected.values():
        ledger.pop("steps")
    assert ledgers == expected


def test_poisson_cohort_steps_charge_exactly_what_they_release(tmp_path: Path) -> None:
    _, cohort_path = _hosts(tmp_path, "public", "poisson:0.5")
    ids = sorted(cohort_path.records)
    released = {uid: 0 for uid in ids}
    for _ in range(8):
        reply = cohort_path.release("train", _request(cohort_path, ids, 0))
        for uid, n in _counts_by_user(reply).items():
            released[uid] += n
    ledgers = cohort_path.ledgers()
    for uid in ids:
        counts = np.asarray(ledgers[uid]["events"][0]["counts_per_record"]) if ledgers[uid]["events"] else np.zeros(0)
        columns = np.asarray(ledgers[uid]["columns"])
        _, first = np.unique(columns, return_index=True)
        assert counts[first].sum() == released[uid] if len(counts) else released[uid] == 0
        assert cohort_path.budget.epsilon_sentence >= reply.ledgers[uid]["epsilon_sentence"]
    total_records = sum(len(r.train) for r in cohort_path.records.values())
    assert 0.3 * total_records < sum(released.values())  # Poisson at 0.5 over 8 steps reaches most records


def test_the_event_cap_refuses_like_the_per_user_path(tmp_path: Path) -> None:
    users_path, cohort_path = _hosts(tmp_path, "rr:0.5", max_events=1)
    ids = sorted(users_path.records)
    a = users_path.release("train", _request(users_path, ids, 0))
    b = cohort_path.release("train", _request(cohort_path, ids, 0))
    assert b.refusals == a.refusals and len(b.reports) == len(a.reports) == 0
    assert {code for code, _ in b.refusals.values()} == {"policy", "budget"}  # cap, or no train records


def test_a_cohort_sees_what_another_connection_spent(tmp_path: Path) -> None:
    """The cohort's arrays kept between messages are used only if no other transaction committed since."""
    users_path, cohort_path = _hosts(tmp_path, "public")
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
    _, cohort_path = _hosts(tmp_path, "public")
    ids = sorted(cohort_path.records)
    cohort_path.release("train", _request(cohort_path, ids[:3], 0))  # the arrays are now kept in this process
    before = cohort_path.ledgers()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    from fed.privacy import store

    monkeypatch.setattr(store.LedgerTransaction, "save_cohort", fail)
    with pytest.raises(OSError):
        cohort_path.release("train", _request(cohort_path, ids, 0))
    monkeypatch.undo()
    assert cohort_path.ledgers() == before
    reply = cohort_path.release("train", _request(cohort_path, ids, 0))  # served from the store, not the failed arrays
    assert set(np.unique(reply.users).tolist()) >= {u for u in ids[3:] if len(cohort_path.records[u].train)}


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_a_release_in_blocks_is_the_release_of_all_rows_at_once(mechanism: str) -> None:
    """Blocks (fed.cohort.RELEASE_BLOCK rows per call, in chunks of GRAM_BLOCK rows) only bound memory
    traffic, and rows preprocessed once (fed.cohort.Cohort.rows_for) only save work: for a
    clip-and-noise randomizer they draw the same noise, in the same order, as one call on every
    selected row."""
    from fed.report_sums import GRAM_BLOCK
    from fed.runtime.release import RELEASE_BLOCK, release_blocks
    from fed.randomizers.base import make_randomizer

    scale = {"gaussian": {"sigma": 0.7}, "laplace": {"scale": 0.7}}[mechanism]
    randomizer = make_randomizer({"mechanism": mechanism, "clip": 1.0, **scale})
    rng = np.random.default_rng(3)
    rows = rng.normal(size=(2 * GRAM_BLOCK, 8))
    selected = rng.permutation(len(rows))[: GRAM_BLOCK + 2 * RELEASE_BLOCK + 17]
    labels = rng.integers(0, 2, len(selected))
    blocks = list(release_blocks(randomizer, randomizer.preprocess(rows), selected, labels, 2, np.random.default_rng(11)))
    assert [len(r) for r, _ in blocks] == [GRAM_BLOCK, 2 * RELEASE_BLOCK + 17]
    reports, released = np.concatenate([r for r, _ in blocks]), np.concatenate([y for _, y in blocks])
    whole = randomizer.release(rows[selected], np.random.default_rng(11))
    assert reports.dtype == np.float32 and reports.shape == whole.shape
    np.testing.assert_array_equal(reports, whole.astype(np.float32))
    np.testing.assert_array_equal(released, labels)


def test_a_cohort_keeps_an_owners_counts_of_records_it_does_not_hold(tmp_path: Path) -> None:
    """A stored owner row may count records outside the cohort (e.g. an earlier partition): a cohort
    step rewrites the row with them kept, in a fresh read and from the arrays kept in the process."""
    _, cohort_path = _hosts(tmp_path, "public")
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
    from fed.randomizers.base import make_randomizer

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
