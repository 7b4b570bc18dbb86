"""Durability of the ledger store (design.md section 2b): kill -9 at random points, faults before COMMIT."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fed.privacy.ledger import Budget
from fed.privacy.store import LedgerStore
from simulations.crash_test import CHECKS, EVENTS, CrashConfig, run_crash_test


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
            written = tx.db.execute("SELECT count FROM spend WHERE owner = 'device' AND record = 'b'").fetchone()
            assert written == (1,) and tx.memo("device", "b", "gaussian") is not None
            raise RuntimeError("injected fault")

        tx.flush = flush_then_fail
    with store.transaction() as tx:
        ledger = tx.ledger("device", keys, budget)
        assert ledger.record_counts().tolist() == [[1, 0, 0]]
        assert ledger.user_counts == Counter({event: 1})
        assert tx.memo("device", "b", "gaussian") is None
