"""Crash test of the durable ledger store (design.md section 2b; issue 8 item 3).

A parent process starts a worker process again and again and kills it with SIGKILL (kill -9)
at a random time. The worker is a node in miniature: it opens one durable
:class:`~fed.privacy.store.LedgerStore` file and serves messages in a loop. Each message is one
transaction: it reads the ledgers of one to three owners, keeps the asked records that
``Ledger.remaining`` allows (all of them or, where the owner's user-level budget cannot afford
them by ``Ledger.user_can_afford``, none), draws their Gaussian reports, charges and saves;
only after the transaction has committed does it write the releases to its reply file (the
reply leaving the node). Each worker continues from the durable state its predecessors left,
so records run out of budget as the run goes on.

After each kill the parent reads the database read-only, with its own SQL rather than
store.py's read path, and checks

(a) spending never decreases: no (owner, record, event) count, no user-level count and not
    the total falls;
(b) no release without a durable charge: for every (owner, record, event) the releases
    received so far are at most the durable count;
(c) no overrun: every record's sentence-level epsilon and every owner's user-level epsilon,
    composed by :class:`~fed.privacy.ledger.Ledger` from the durable counts, is within its
    budget; and SQLite's integrity_check is ok;
(b) also: no release of a transaction that did not commit, and none that was not charged;
(d) every durable count is its releases received plus its charges in committed transactions
    whose reply the kill cut off, every user-level count is the sum of its records' counts,
    and the durable count of committed transactions is one the worker's markers allow.

Where each kill landed comes from markers the worker writes to its reply file, each with one
write(2), which the kill cannot undo: ``B`` before a message's transaction opens, ``P seq`` with
one ``Q`` line per charge once its handler has charged and saved (the transaction's flush
follows), ``S`` as the COMMIT statement starts and ``T`` when it has returned (the connection
then closes, checkpointing the WAL), and ``C seq`` with one ``R`` line per release once the
transaction is over. A kill after ``B`` or ``P`` must leave the transaction uncommitted, one
after ``T`` must leave it committed; after ``S`` either may happen. The ``Q`` lines make (d)
exact: a committed transaction's charges whose ``R`` lines never arrived are the budget the
kill wasted.

Workers are forked (os.fork) by a zygote process (``python -c``) that has imported this module
once: importing fed.privacy (dp_accounting, scipy) takes about 2 s, which would otherwise be
most of each worker's life. The parent kills the worker's pid itself. A kill -9 leaves the
kernel's page cache intact, so this tests process crashes, not power loss (against which the
store's ``synchronous=FULL`` is meant).

Run (about 3 minutes on 2 cores):

    python -m ldpfed.simulations.checks.crash_test --kills 1000 --seed 0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, event_from_json
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.privacy.store import LedgerStore, LedgerTransaction
from ldpfed.simulations.report_file import write_report

DELTA = 1e-5
EPSILON_SENTENCE = 8.0
EPSILON_USER = 64.0
"""The user-level budget of every third owner (the others have none)."""
DIM = 4
SENSITIVITY = 2.0
"""Reports are unit vectors plus noise: L2 diameter 2."""
_MU_BUDGET = gdp.mu_for_epsilon(EPSILON_SENTENCE, DELTA)
EVENTS = (
    GaussianEvent(SENSITIVITY, SENSITIVITY * math.sqrt(4.5) / _MU_BUDGET),
    GaussianEvent(SENSITIVITY, SENSITIVITY * math.sqrt(2.5) / _MU_BUDGET),
)
"""A record's sentence budget affords 4 releases of the first event alone, 2 of the second."""

LANDED = {
    None: "before the worker's first message",
    "B": "in a transaction, before its handler had charged",
    "P": "in the transaction's flush, before COMMIT",
    "S rolled back": "in COMMIT (its fsync): rolled back",
    "S committed": "in COMMIT (its fsync): committed, reply lost",
    "T": "after COMMIT, closing the connection: reply lost",
    "C": "after a transaction, replying or between messages",
}
CHECKS = (
    "(a) spending decreased",
    "(b) release without a durable charge",
    "(b) release of an uncommitted or uncharged transaction",
    "(c) overrun",
    "(c) integrity_check not ok",
    "(d) durable count != received + lost",
    "(d) user-level count != sum of record counts",
    "(d) transaction count",
    "worker exited before the kill",
)


@dataclass(frozen=True)
class CrashConfig:
    """The simulated node: ``owners`` owners of ``records`` records each."""

    owners: int = 40
    records: int = 50


@dataclass
class Figures:
    """What a crash test counted."""

    kills: int = 0
    landed: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    releases: int = 0
    charges: int = 0
    refused_sentence: int = 0
    refused_user: int = 0
    exhausted: int = 0
    records: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0


@dataclass
class Durable:
    """The durable state read after a kill."""

    spend: dict[tuple[int, int, int], int]
    user_spend: dict[tuple[int, int], int]
    commits: int
    integrity: str


@dataclass
class Reply:
    """What one worker wrote before its kill; charges and releases are (owner, record, event) counts per transaction."""

    charged: dict[int, Counter[tuple[int, int, int]]] = field(default_factory=dict)
    released: dict[int, Counter[tuple[int, int, int]]] = field(default_factory=dict)
    refused: tuple[int, int] = (0, 0)
    last: str | None = None
    """The last marker: B, P, S, T, C, or None."""
    replied: int | None = None
    """The last transaction whose ``C`` line was received."""


def owner_budget(owner: int) -> Budget:
    """The budget of owner ``owner``: a user-level budget for every third owner."""
    return Budget(EPSILON_SENTENCE, DELTA, EPSILON_USER if owner % 3 == 0 else math.inf)


def record_keys(records: int) -> list[str]:
    """The stable record ids of an owner's records."""
    return [f"r{j:03d}" for j in range(records)]


# -- the zygote and its workers --------------------------------------------------------


def _zygote() -> None:
    """Fork one worker per ``fork`` request on stdin and answer its pid; answer ``reap``'s exit code.

    Every sentence-level figure a record can reach is composed first, so that workers start
    with the composition cache of a node that has served a while.
    """
    for counts in np.ndindex(6, 4):
        compose_epsilon(dict(zip(EVENTS, counts)), DELTA)
    print("ready", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "reap":
            _, status = os.waitpid(int(args[0]), 0)
            print(os.waitstatus_to_exitcode(status), flush=True)
            continue
        db, reply, owners, records, seed, kill = args
        pid = os.fork()
        if pid == 0:
            try:
                _worker(db, reply, CrashConfig(int(owners), int(records)), (int(seed), int(kill)))
            except BaseException:
                traceback.print_exc()
            os._exit(1)
        print(pid, flush=True)


def _worker(db: str, reply: str, config: CrashConfig, seed: Sequence[int]) -> None:
    """Serve messages until killed, writing markers and releases to ``reply``."""
    rng = np.random.default_rng(seed)
    out = os.open(reply, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _mark_commits(out)
    store = LedgerStore(db, durable=True)
    weights = 1 / np.arange(1, config.owners + 1)
    weights /= weights.sum()
    while True:
        owners = rng.choice(config.owners, size=min(config.owners, int(rng.integers(1, 4))), replace=False, p=weights)
        os.write(out, b"B\n")
        with store.transaction() as tx:
            (seq,) = tx.db.execute("UPDATE crash_test SET commits = commits + 1 RETURNING commits").fetchone()
            releases, refused = _serve(tx, owners.tolist(), rng, config)
            os.write(out, (f"P {seq}\n" + "".join(f"Q {seq} {o} {j} {e}\n" for o, j, e, _ in releases)).encode())
        lines = [f"R {seq} {o} {j} {e} {' '.join(f'{v:.3f}' for v in report)}\n" for o, j, e, report in releases]
        os.write(out, (f"C {seq} {refused[0]} {refused[1]}\n" + "".join(lines)).encode())


def _mark_commits(out: int) -> None:
    """Make this process's SQLite connections write ``S`` to ``out`` as a COMMIT starts and ``T`` once it returns."""
    connect = sqlite3.connect

    class MarkedConnection(sqlite3.Connection):
        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql == "COMMIT":
                os.write(out, b"S\n")
            cursor = super().execute(sql, *args)
            if sql == "COMMIT":
                os.write(out, b"T\n")
            return cursor

    sqlite3.connect = lambda *args, **kwargs: connect(*args, factory=MarkedConnection, **kwargs)


def _serve(
    tx: LedgerTransaction, owners: list[int], rng: np.random.Generator, config: CrashConfig
) -> tuple[list[tuple[int, int, int, np.ndarray]], list[int]]:
    """Check, randomize and charge one message's asks.

    Returns its releases (owner, record, event, report) and its refusals (sentence, user budget).
    """
    releases: list[tuple[int, int, int, np.ndarray]] = []
    refused = [0, 0]
    for owner in owners:
        ledger = tx.ledger(f"u{owner:03d}", record_keys(config.records), owner_budget(owner))
        for _ in range(int(rng.integers(1, 3))):
            e = int(rng.integers(len(EVENTS)))
            asked = rng.choice(config.records, size=int(rng.integers(1, config.records // 5 + 2)), replace=False)
            allowed = ledger.remaining([EVENTS[e]], asked)
            granted = allowed if ledger.user_can_afford({EVENTS[e]: allowed.size}) else allowed[:0]
            refused[0] += asked.size - allowed.size
            refused[1] += allowed.size - granted.size
            reports = _randomize(rng, granted.size, EVENTS[e].sigma)
            ledger.charge([EVENTS[e]], granted)
            releases += [(owner, j, e, report) for j, report in zip(granted.tolist(), reports)]
        tx.save(ledger)
    return releases, refused


def _randomize(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    """Gaussian reports of ``n`` random unit vectors."""
    x = rng.normal(size=(n, DIM))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x + rng.normal(scale=sigma, size=x.shape)


# -- the parent ------------------------------------------------------------------------


def read_durable(db: Path) -> Durable:
    """The spend, user-level spend and transaction count on disk, read-only."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
        events = {
            i: EVENTS.index(event_from_json(json.loads(text))) for i, text in connection.execute("SELECT id, json FROM events")
        }
        spend = {
            (int(owner[1:]), int(record[1:]), events[event]): count
            for owner, event, text in connection.execute("SELECT owner, event, counts FROM owner_spend")
            for record, count in json.loads(text).items()
        }
        user_spend = {
            (int(owner[1:]), events[event]): n
            for owner, event, n in connection.execute("SELECT owner, event, reports FROM user_spend")
        }
        (commits,) = connection.execute("SELECT commits FROM crash_test").fetchone()
    return Durable(spend, user_spend, commits, integrity)


def durable_ledgers(durable: Durable, config: CrashConfig) -> list[Ledger]:
    """Every owner's ledger rebuilt from the durable counts (through ``Ledger.from_json``)."""
    counts = np.zeros((config.owners, len(EVENTS), config.records), np.int64)
    for (owner, record, event), n in durable.spend.items():
        counts[owner, event, record] = n
    return [
        Ledger.from_json(
            {
                "num_records": config.records,
                "budget": asdict(owner_budget(owner)),
                "events": [
                    {"event": event.to_json(), "counts_per_record": counts[owner, e].tolist()} for e, event in enumerate(EVENTS)
                ],
                "user_events": [
                    {"event": EVENTS[e].to_json(), "reports": n} for (o, e), n in durable.user_spend.items() if o == owner
                ],
            }
        )
        for owner in range(config.owners)
    ]


def parse_reply(text: str) -> Reply:
    """The charges, releases, refusals and last marker in a worker's reply file (complete lines only)."""
    reply = Reply()
    for fields in (line.split() for line in text.splitlines(keepends=True) if line.endswith("\n")):
        if fields[0] in "QR":
            log = reply.charged if fields[0] == "Q" else reply.released
            log.setdefault(int(fields[1]), Counter())[(int(fields[2]), int(fields[3]), int(fields[4]))] += 1
            continue
        reply.last = fields[0]
        if fields[0] == "P":
            reply.charged.setdefault(int(fields[1]), Counter())
        elif fields[0] == "C":
            reply.replied = int(fields[1])
            reply.refused = (reply.refused[0] + int(fields[2]), reply.refused[1] + int(fields[3]))
    return reply


def landing(reply: Reply, before: int, after: int) -> tuple[str, set[int]]:
    """Where the kill landed, and the durable transaction counts its markers allow."""
    committed = before if reply.replied is None else reply.replied
    pending = max(reply.charged, default=committed)
    if reply.last == "T":
        return "T", {pending}
    if reply.last == "S":
        return ("S committed" if after == pending else "S rolled back"), {committed, pending}
    return reply.last, {committed}


def _overruns(ledgers: list[Ledger]) -> int:
    """Records over their sentence budget plus owners over their user-level budget."""
    return sum(
        int((ledger.record_epsilons() > ledger.budget.epsilon_sentence).sum())
        + int(ledger.user_epsilon() > ledger.budget.epsilon_user)
        for ledger in ledgers
    )


def _exhausted(ledger: Ledger) -> int:
    """How many of the ledger's records cannot afford one more release of the cheaper event."""
    if not ledger.user_can_afford({EVENTS[0]: 1}):
        return ledger.num_records
    return ledger.num_records - ledger.remaining([EVENTS[0]], np.arange(ledger.num_records)).size


def run_crash_test(
    kills: int, seed: int, window_ms: float, workdir: Path, config: CrashConfig = CrashConfig(), progress: bool = False
) -> Figures:
    """Start and SIGKILL ``kills`` workers, each at a uniform random time in [0, window_ms) after its start.

    The database and reply files live in ``workdir``; every check runs after every kill.
    """
    db = workdir / "ledger.db"
    LedgerStore(db, durable=True)
    with closing(sqlite3.connect(db, isolation_level=None)) as connection:
        connection.executescript("CREATE TABLE crash_test (commits INTEGER NOT NULL); INSERT INTO crash_test VALUES (0);")
    root = str(Path(__file__).resolve().parents[2])
    zygote = subprocess.Popen(
        [sys.executable, "-c", "from ldpfed.simulations.checks.crash_test import _zygote; _zygote()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )
    try:
        if zygote.stdout.readline().strip() != "ready":
            raise RuntimeError("the crash test's zygote process failed to start")
        return _kill_and_check(zygote, db, kills, seed, window_ms, config, progress)
    finally:
        zygote.stdin.close()
        zygote.wait()


def _ask(zygote: subprocess.Popen, request: str) -> str:
    """Send ``request`` to the zygote and read its answer."""
    zygote.stdin.write(request + "\n")
    zygote.stdin.flush()
    return zygote.stdout.readline().strip()


def _kill_and_check(
    zygote: subprocess.Popen, db: Path, kills: int, seed: int, window_ms: float, config: CrashConfig, progress: bool
) -> Figures:
    """The crash test's loop, with workers forked by ``zygote``."""
    rng = np.random.default_rng(seed)
    figures = Figures(kills=kills, records=config.owners * config.records)
    received: Counter[tuple[int, int, int]] = Counter()
    lost: Counter[tuple[int, int, int]] = Counter()
    before = read_durable(db)
    start = time.perf_counter()
    bar = tqdm(range(kills), disable=not progress, unit="kill")
    for kill in bar:
        path = db.parent / f"reply-{kill}"
        delay = rng.uniform(0, window_ms / 1000)
        pid = _ask(zygote, f"fork {db} {path} {config.owners} {config.records} {seed} {kill}")
        try:
            time.sleep(delay)
        finally:
            os.kill(int(pid), signal.SIGKILL)
        figures.violations["worker exited before the kill"] += int(_ask(zygote, f"reap {pid}")) != -signal.SIGKILL
        reply = parse_reply(path.read_text() if path.exists() else "")
        path.unlink(missing_ok=True)
        after = read_durable(db)

        where, allowed = landing(reply, before.commits, after.commits)
        figures.landed[LANDED[where]] += 1
        for seq, releases in reply.released.items():
            received.update(releases)
            figures.releases += releases.total()
            figures.violations["(b) release of an uncommitted or uncharged transaction"] += (
                releases.total() if seq > after.commits else (releases - reply.charged.get(seq, Counter())).total()
            )
        for seq, charges in reply.charged.items():
            if seq <= after.commits:
                lost.update(charges - reply.released.get(seq, Counter()))
        figures.refused_sentence += reply.refused[0]
        figures.refused_user += reply.refused[1]

        figures.violations["(a) spending decreased"] += (
            sum(after.spend.get(key, 0) < n for key, n in before.spend.items())
            + sum(after.user_spend.get(key, 0) < n for key, n in before.user_spend.items())
            + int(sum(after.spend.values()) < sum(before.spend.values()))
        )
        figures.violations["(b) release without a durable charge"] += sum(
            n > after.spend.get(key, 0) for key, n in received.items()
        )
        figures.violations["(c) overrun"] += _overruns(durable_ledgers(after, config))
        figures.violations["(c) integrity_check not ok"] += int(after.integrity != "ok")
        figures.violations["(d) durable count != received + lost"] += sum(
            after.spend.get(key, 0) != received[key] + lost[key] for key in {*after.spend, *received, *lost}
        )
        by_user: Counter[tuple[int, int]] = Counter()
        for (owner, _, event), n in after.spend.items():
            by_user[owner, event] += n
        figures.violations["(d) user-level count != sum of record counts"] += sum(
            after.user_spend.get(key, 0) != by_user[key] for key in {*after.user_spend, *by_user}
        )
        figures.violations["(d) transaction count"] += int(after.commits not in allowed)
        before = after
        bar.set_postfix(releases=figures.releases, violations=sum(figures.violations.values()))
    figures.seconds = time.perf_counter() - start
    figures.commits = before.commits
    figures.charges = sum(before.spend.values())
    figures.exhausted = sum(_exhausted(ledger) for ledger in durable_ledgers(before, config))
    return figures


def report_lines(figures: Figures, command: str, window_ms: float, config: CrashConfig) -> list[str]:
    """The markdown report of a crash test."""
    wasted = figures.charges - figures.releases
    return [
        "# Crash test of the durable ledger store",
        "",
        f"`{command}`: {config.owners} owners x {config.records} records in one durable SQLite file (WAL, synchronous=FULL);",
        f"each worker process is killed with SIGKILL at a uniform random time in [0, {window_ms:g} ms) after its fork.",
        f"Budgets: sentence epsilon {EPSILON_SENTENCE:g} at delta {DELTA:g}; "
        f"user epsilon {EPSILON_USER:g} for every third owner.",
        f"Gaussian events sigma {EVENTS[0].sigma:.3f} and {EVENTS[1].sigma:.3f} (sensitivity {SENSITIVITY:g}): "
        "a record affords 4 releases of the first alone, 2 of the second.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| kills | {figures.kills} |",
        *(f"| - {where} | {figures.landed[where]} |" for where in LANDED.values()),
        f"| transactions committed | {figures.commits} |",
        f"| releases received (record x event) | {figures.releases} |",
        f"| durable charges (record x event) | {figures.charges} |",
        f"| wasted budget: durable charges never received | {wasted} ({wasted / max(figures.charges, 1):.1%}) |",
        f"| refusals in received replies: sentence budget / user budget | {figures.refused_sentence} / {figures.refused_user} |",
        f"| records that cannot afford one more release at the end | {figures.exhausted} of {figures.records} |",
        *(f"| {check} | {figures.violations[check]} |" for check in CHECKS),
        f"| time | {figures.seconds:.0f} s |",
        "",
        "Each violation row counts failed checks, summed over kills (every check runs on every key after every kill).",
        "A kill inside COMMIT mostly finds the transaction committed: its WAL frames are in the kernel's page cache",
        "before the fsync, the slow part, and a kill -9 does not undo them; the reply is lost and its charges wasted.",
        "Each worker lives for only a few transactions, so the wasted share reflects the kill rate.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--window-ms", type=float, default=80.0, help="kill times are uniform in [0, window) after a worker's fork"
    )
    parser.add_argument("--owners", type=int, default=CrashConfig.owners)
    parser.add_argument("--records", type=int, default=CrashConfig.records, help="records per owner")
    parser.add_argument("--report", default="runs/reports/crash_test.md")
    args = parser.parse_args(argv)
    config = CrashConfig(args.owners, args.records)
    with tempfile.TemporaryDirectory(prefix="crash_test-") as workdir:
        figures = run_crash_test(args.kills, args.seed, args.window_ms, Path(workdir), config, progress=True)
    command = " ".join(["python -m ldpfed.simulations.checks.crash_test", *(sys.argv[1:] if argv is None else argv)])
    write_report(args.report, report_lines(figures, command, args.window_ms, config))
    return 1 if sum(figures.violations.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
