"""Durability of the ledger store (design.md section 2b): kill -9 at random points, faults before COMMIT."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.simulations.checks.crash_test import CHECKS, EVENTS, CrashConfig, run_crash_test


def test_kill_9_at_random_points_never_loses_a_charge_nor_overruns(tmp_path: Path) -> None:
    figures = run_crash_test(kills=25, seed=0, window_ms=200, workdir=tmp_path, config=CrashConfig(owners=3, records=10))
    assert {check: figures.violations[check] for check in CHECKS} == dict.fromkeys(CHECKS, 0)
    assert figures.releases > 0, "no release reached the parent: the checks were not exercised"
    assert figures.refused_sentence + figures.refused_user > 0, "no budget ran out: the overrun check was not exercised"
    assert figures.charges >= figures.releases


@pytest.mark.parametrize("where", ["in the handler", "after the flush, before COMMIT"])
def test_a_fault_before_the_commit_writes_nothing(tmp_path: Path, where: str) -> None:
    store = LedgerStore(tmp_path / "ledger.db", durable=True)
    keys, budget, event = ["a", "b", "c"], Budget(8.0, 1e-5), EVENTS[0]
    with store.transaction() as tx:
        ledger = tx.ledger("device", keys, budget)
        ledger.charge([event], np.array([0]))
    with pytest.raises(RuntimeError, match="injected"), store.transaction() as tx:
        ledger = tx.ledger("device", keys, budget)
        ledger.charge([event], np.array([0, 1]))
        tx.remember("device", "b", "gaussian", np.ones(4), 1)
        if where == "in the handler":
            raise RuntimeError("injected fault")
        flush = tx.flush

        def flush_then_fail() -> None:
            flush()
            (written,) = tx.db.execute("SELECT counts FROM owner_spend WHERE owner = 'device'").fetchone()
            assert json.loads(written) == {"a": 2, "b": 1} and tx.memo("device", "b", "gaussian") is not None
            raise RuntimeError("injected fault")

        tx.flush = flush_then_fail
    with store.transaction() as tx:
        ledger = tx.ledger("device", keys, budget)
        assert ledger.record_counts().tolist() == [[1, 0, 0]]
        assert ledger.user_reports() == {event: 1}
        assert tx.memo("device", "b", "gaussian") is None


def test_a_store_of_per_record_rows_keeps_its_spending_after_the_upgrade(tmp_path: Path) -> None:
    """A device's ledger written before 2026-11-23 (one ``spend`` row per record) must survive the app
    update: its first transaction converts the rows, and the same counts are read and charged on."""
    import sqlite3

    path, event = tmp_path / "ledger.db", EVENTS[0]
    with sqlite3.connect(path) as old:
        old.executescript(
            """
            CREATE TABLE events (id INTEGER PRIMARY KEY, json TEXT NOT NULL UNIQUE);
            CREATE TABLE spend (owner TEXT NOT NULL, record TEXT NOT NULL, event INTEGER NOT NULL, count INTEGER NOT NULL,
                PRIMARY KEY (owner, record, event)) WITHOUT ROWID;
            """
        )
        old.execute("INSERT INTO events VALUES (7, ?)", (json.dumps(event.to_json(), sort_keys=True),))
        old.executemany("INSERT INTO spend VALUES (?, ?, 7, ?)", [("device", "a", 3), ("device", "c", 1), ("other", "a", 5)])
    store = LedgerStore(path, durable=True)
    with store.transaction() as tx:
        ledger = tx.ledger("device", ["a", "b", "c"], Budget(8.0, 1e-5))
        assert ledger.record_counts().tolist() == [[3, 0, 1]]
        ledger.charge([event], np.array([1]))
    with store.transaction() as tx:
        assert tx.ledger("device", ["c", "b", "a"], Budget(8.0, 1e-5)).record_counts().tolist() == [[1, 1, 3]]
        assert tx.ledger("other", ["a"], Budget(8.0, 1e-5)).record_counts().tolist() == [[5]]
        assert tx.db.execute("SELECT name FROM sqlite_master WHERE name = 'spend'").fetchone() is None


def test_a_ledger_of_some_records_keeps_the_owners_other_counts(tmp_path: Path) -> None:
    """Users of one device share its owner row: saving one user's records leaves the others' counts."""
    store, event, budget = LedgerStore(tmp_path / "ledger.db", durable=True), EVENTS[0], Budget(8.0, 1e-5)
    with store.transaction() as tx:
        tx.ledger("device", ["a", "b"], budget).charge([event], np.array([0, 1]))
    with store.transaction() as tx:
        tx.ledger("device", ["c"], budget).charge([event], np.array([0]))
    with store.transaction() as tx:
        assert tx.ledger("device", ["a", "b", "c"], budget).record_counts().tolist() == [[1, 1, 1]]


def _open_and_count(path: Path, start: multiprocessing.synchronize.Barrier) -> None:
    start.wait()
    with LedgerStore(path, durable=False).transaction() as tx:
        tx.next_count("messages")


def test_processes_opening_a_new_store_at_once_all_get_through(tmp_path: Path) -> None:
    """Ray actors, or a node's first messages, may create the same store together: none may fail.

    Switching a new file to WAL answered all but one "database is locked" without waiting
    (before the retry: 6 of 30 such races on this machine).
    """
    context = multiprocessing.get_context("fork")
    for trial in range(20):
        path, start = tmp_path / f"ledger-{trial}.db", context.Barrier(8)
        processes = [context.Process(target=_open_and_count, args=(path, start)) for _ in range(8)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=60)
        assert [p.exitcode for p in processes] == [0] * 8, f"trial {trial}"
        with LedgerStore(path, durable=False).transaction() as tx:
            assert tx.next_count("messages") == 8  # every process committed its count (0..7)

