"""Where ledgers live between messages: one SQLite file per node (stdlib sqlite3).

design.md section 2b: a deployed user's spending lives on the device, keyed by a stable
record id, and survives new runs, re-setup, app updates, restarts and kill -9; the charge is
durable before the release leaves; concurrent messages are serialised.

- Every message is one ``BEGIN IMMEDIATE`` transaction (:meth:`LedgerStore.transaction`):
  it takes the database's write lock before any ledger is read, so two messages to one
  node (two threads, two Ray actors, two processes) check, charge and release one after
  the other, never on the same snapshot. All parts of a release message share it (fed.runtime.hosts):
  one that fails rolls back the charges of the others.
- The handler computes its releases inside the transaction, and the transaction commits
  (WAL, ``synchronous=FULL`` on devices) before the handler returns its reply: a crash
  before the commit loses the release with its charge; a crash after it can only waste
  budget.
- Spending is keyed by (owner, record id). On a device the owner is the device and the
  record id a keyed hash of the record's content (:mod:`fed.device.record_ids`), so a new run, a
  re-setup or a different partition of the device's data into users finds the same counts.
  One row per (owner, event) holds the counts of all the owner's records (JSON, record id ->
  count): a simulated node charges tens of thousands of records per message, and one row per
  user costs a sixteenth of one row per record there. A store written with one row per record
  (the ``spend`` table, before 2026-11-23) is converted in its first transaction.
- Memoized reports (RAPPOR's permanent randomized response) are stored beside the charge
  that paid for them, in the same transaction.
- A device's ledger is bound to its record-id key (``binding``: the key's fingerprint,
  :func:`fed.device.record_ids.key_fingerprint`), so that a node finds a deleted, emptied or swapped
  ledger or key instead of starting over (:mod:`fed.device.state`). A device's store is never
  created by opening it (``create=False``): ``ldpfed device init`` makes it.

Simulations keep the same file per node (``synchronous=OFF``: atomic across the engine's
processes, not crash-durable) in the run's cache folder.
"""

from __future__ import annotations

import json
import sqlite3
import time
import weakref
from collections.abc import Iterator, Sequence, Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ldpfed.fed.privacy.cohort_ledger import CohortKeys, CohortLedger
from ldpfed.fed.privacy.events import PrivacyEvent, event_from_json
from ldpfed.fed.privacy.ledger import Budget, Ledger

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, json TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS owner_spend (
    owner TEXT NOT NULL, event INTEGER NOT NULL, counts TEXT NOT NULL, PRIMARY KEY (owner, event)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS user_spend (
    owner TEXT NOT NULL, event INTEGER NOT NULL, reports INTEGER NOT NULL, PRIMARY KEY (owner, event)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    owner TEXT NOT NULL, kind TEXT NOT NULL, sampling TEXT NOT NULL, event INTEGER NOT NULL, steps INTEGER NOT NULL,
    PRIMARY KEY (owner, kind, sampling, event)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS binding (key TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS placement (inode INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memo (
    owner TEXT NOT NULL, record TEXT NOT NULL, randomizer TEXT NOT NULL, report BLOB NOT NULL, label INTEGER,
    PRIMARY KEY (owner, record, randomizer)) WITHOUT ROWID;
"""


UPSERT_SPEND = "INSERT INTO owner_spend VALUES (?, ?, ?) ON CONFLICT (owner, event) DO UPDATE SET counts = excluded.counts"
UPSERT_USER_SPEND = "INSERT INTO user_spend VALUES (?, ?, ?) ON CONFLICT (owner, event) DO UPDATE SET reports = excluded.reports"
UPSERT_STEPS = (
    "INSERT INTO steps VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, kind, sampling, event) DO UPDATE SET steps = excluded.steps"
)

Extras = dict[tuple[str, int], dict[str, int]]
"""(owner, event id) -> counts of that owner's records that are not columns of a cohort (kept as stored)."""

_COHORT_CACHE: dict[tuple[str, CohortKeys], tuple[int, CohortLedger, Extras]] = {}
"""Per process: (database file, cohort) -> (the store's generation after the transaction that last
wrote it here, its ledger, its extras). A cohort read at that same generation (no other connection
has committed since) is taken from here instead of re-read row by row, unless its transaction has
already written rows of its owners; a cohort whose owners another ledger of its transaction wrote
after it was read is not kept (:meth:`LedgerTransaction.cacheable`)."""


def dump_counts(counts: dict[str, int]) -> str:
    """The stored form of one owner's counts under one event."""
    return json.dumps(counts, separators=(",", ":"))


_QUOTED: "weakref.WeakKeyDictionary[CohortKeys, list[str]]" = weakref.WeakKeyDictionary()
"""A cohort's record ids as JSON strings, in :meth:`CohortKeys.by_user` order (quoted once, not at every save)."""


def _quoted(keys: CohortKeys) -> list[str]:
    if keys not in _QUOTED:
        _QUOTED[keys] = [json.dumps(key) for key in keys.by_user()[2]]
    return _QUOTED[keys]


def _parse_counts(texts: list[str]) -> list[dict[str, int]]:
    """``json.loads`` of each stored counts text, parsed as one JSON array (one call for a cohort's thousands of
    rows); each text on its own where they do not make exactly that many values (a damaged row fails as it would alone)."""
    if texts:
        try:
            parsed = json.loads("[" + ",".join(texts) + "]")
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and len(parsed) == len(texts) and all(type(value) is dict for value in parsed):
            return parsed
    return [json.loads(text) for text in texts]


def upgrade_spend_rows(connection: sqlite3.Connection) -> None:
    """Convert a store's per-record ``spend`` rows (before 2026-11-23) into ``owner_spend`` rows, in the caller's transaction."""
    if connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'spend'").fetchone() is None:
        return
    rows: dict[tuple[str, int], dict[str, int]] = {}
    for owner, record, event_id, count in connection.execute("SELECT owner, record, event, count FROM spend"):
        rows.setdefault((owner, event_id), {})[record] = int(count)
    connection.executemany(UPSERT_SPEND, [(owner, event_id, dump_counts(c)) for (owner, event_id), c in rows.items()])
    connection.execute("DROP TABLE spend")


@dataclass(frozen=True)
class Memo:
    """A stored report of one record under one randomizer, and the label released with it."""

    report: np.ndarray
    label: int | None


class LedgerStore:
    """The ledgers of one node in a SQLite file.

    Parameters
    ----------
    path:
        The database file.
    durable:
        ``synchronous=FULL`` (a device: every commit reaches the disk) or ``OFF`` (a simulation).
    timeout:
        Seconds a message waits for another message's transaction before failing.
    create:
        Create a missing file (and its folder); otherwise opening a missing file fails
        (sqlite3.OperationalError), as a device's must.
    """

    def __init__(self, path: str | Path, durable: bool, timeout: float = 120.0, create: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self.timeout = timeout
        self.create = create
        if create and not self.path.is_file():  # an existing file gets any missing table in its next transaction
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = self._connect()
            try:
                connection.executescript(SCHEMA)
            finally:
                connection.close()

    def _connect(self) -> sqlite3.Connection:
        target = self.path if self.create else f"file:{quote(str(self.path.absolute()))}?mode=rw"
        connection = sqlite3.connect(target, timeout=self.timeout, isolation_level=None, uri=not self.create)
        try:
            _switch_to_wal(connection, time.monotonic() + self.timeout)
        except BaseException:
            connection.close()
            raise
        connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
        connection.execute("PRAGMA cache_size=-65536")  # 64 MiB: a node's spend B-tree stays in memory
        return connection

    def bound_key(self) -> str | None:
        """The fingerprint of the record-id key this ledger is bound to (None: unbound, e.g. an empty
        database); ValueError if the file is missing or not a ledger database."""
        try:
            connection = self._connect()
        except sqlite3.Error as error:
            raise ValueError(f"{self.path} cannot be opened as a ledger: {error}") from None
        try:
            if connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'binding'").fetchone() is None:
                return None
            row = connection.execute("SELECT key FROM binding").fetchone()
            return None if row is None else str(row[0])
        except sqlite3.DatabaseError as error:
            raise ValueError(f"{self.path} is not a ledger database: {error}") from None
        finally:
            connection.close()

    def placement(self) -> int | None:
        """The file identity (inode) this ledger recorded of itself (fed.device.state), None when it recorded none."""
        connection = self._connect()
        try:
            if connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'placement'").fetchone() is None:
                return None
            row = connection.execute("SELECT inode FROM placement").fetchone()
            return None if row is None else int(row[0])
        finally:
            connection.close()

    def place(self, inode: int) -> None:
        """Record ``inode`` as this ledger's file identity (replacing any recorded before)."""
        with self.transaction() as tx:
            tx.db.execute("DELETE FROM placement")
            tx.db.execute("INSERT INTO placement VALUES (?)", (int(inode),))

    def bind(self, fingerprint: str) -> None:
        """Bind an unbound ledger to the record-id key of this fingerprint; ValueError if bound to another."""
        with self.transaction() as tx:
            row = tx.db.execute("SELECT key FROM binding").fetchone()
            if row is not None and row[0] != fingerprint:
                raise ValueError(f"{self.path} is bound to another record-id key")
            if row is None:
                tx.db.execute("INSERT INTO binding VALUES (?)", (fingerprint,))

    @contextmanager
    def transaction(self) -> Iterator["LedgerTransaction"]:
        """One serialised read-check-charge-write: committed on normal exit, rolled back on error."""
        connection = self._connect()
        try:
            # The schema on this connection (no-ops once the tables exist): one connection per
            # message, where a separate schema connection in __init__ cost a second open and close.
            connection.executescript(SCHEMA)
            connection.execute("BEGIN IMMEDIATE")
            upgrade_spend_rows(connection)
            tx = LedgerTransaction(connection, str(self.path))
            try:
                yield tx
                generation = tx.flush()
            except BaseException:
                if connection.in_transaction:  # SQLite may have rolled back by itself (e.g. disk full)
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            for key, ledger, extras in tx.cacheable():
                _COHORT_CACHE[key] = (generation, ledger, extras)
        finally:
            connection.close()


class LedgerTransaction:
    """The ledgers and memos read within one transaction; :meth:`flush` writes what changed."""

    def __init__(self, connection: sqlite3.Connection, path: str = "") -> None:
        self.db = connection
        self.path = path
        self.cohorts_read: list[tuple[tuple[str, CohortKeys], CohortLedger, Extras, int]] = []
        """Each cohort ledger read: its cache key, the ledger, its extras, and how many saves came before the read."""
        self._saves: list[tuple[int, AbstractSet[str]]] = []
        """Each save in order: the id of the ledger saved and the owners whose rows it wrote."""
        self._event_ids: dict[PrivacyEvent, int] = {}
        self._events: dict[int, PrivacyEvent] = {}
        for event_id, text in self.db.execute("SELECT id, json FROM events"):
            event = event_from_json(json.loads(text))
            self._events[event_id], self._event_ids[event] = event, event_id
        self._open: dict[int, tuple[Ledger, str, tuple[str, ...], np.ndarray, list[PrivacyEvent], np.ndarray, dict, dict]] = {}
        self._cohorts: dict[int, tuple[CohortLedger, CohortKeys, CohortLedger, Extras]] = {}

    def ledger(self, owner: str, keys: Sequence[str], budget: Budget, max_events: int | None = None) -> Ledger:
        """The ledger of ``owner``'s records ``keys`` (record i has id ``keys[i]``), as stored so far.

        Several users of one owner (a device hosting a cohort) share its user-level account and
        any record they hold in common: :meth:`save` one ledger before reading the next.
        """
        if any(owner == entry[1] for entry in self._open.values()):
            raise RuntimeError(f"a ledger of {owner!r} is open in this transaction: save it first")
        unique, columns = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
        ledger = Ledger(len(keys), budget, columns.reshape(-1), max_events)
        position = {key: j for j, key in enumerate(unique.tolist())}
        rows: dict[int, np.ndarray] = {}
        stored: dict[int, dict[str, int]] = {}  # all the owner's counts, this ledger's records or not
        for event_id, text in self.db.execute("SELECT event, counts FROM owner_spend WHERE owner = ?", (owner,)):
            stored[event_id] = json.loads(text)
            for record, count in stored[event_id].items():
                j = position.get(record)
                if j is not None:
                    rows.setdefault(event_id, np.zeros(len(unique), np.int64))[j] = count
        reports = dict(self.db.execute("SELECT event, reports FROM user_spend WHERE owner = ?", (owner,)).fetchall())
        for event_id in sorted({*rows, *reports}):  # rows in event-id order, as to_json lists them
            row = ledger.row(self._events[event_id])
            if event_id in rows:
                ledger.counts[row] = rows[event_id]
            ledger.user_counts[row, 0] = reports.get(event_id, 0)
        for kind, sampling, event_id, steps in self.db.execute(
            "SELECT kind, sampling, event, steps FROM steps WHERE owner = ?", (owner,)
        ):
            ledger.steps[(kind, sampling, self._events[event_id])] = np.array([steps], dtype=np.int64)
        self._open[id(ledger)] = (
            ledger, owner, tuple(unique.tolist()), ledger.counts.copy(), list(ledger.events), ledger.user_counts[:, 0].copy(),
            {step: int(n[0]) for step, n in ledger.steps.items()}, stored,
        )
        return ledger

    def cohort_ledger(self, keys: CohortKeys, budget: Budget, max_events: int | None = None) -> CohortLedger:
        """The ledgers of a whole cohort (user i owned by ``keys.owners[i]``), as stored so far.

        The same rows :meth:`ledger` reads one owner at a time, read in one pass; or, when no
        other connection has committed since this process last wrote them, kept from then.
        """
        if self._open or self._cohorts:
            raise RuntimeError("a cohort ledger is read with no other ledger open in its transaction: save them first")
        key = (self.path, keys)
        cached = _COHORT_CACHE.pop(key, None)  # out while in use: a failed transaction leaves none
        fresh = cached is not None and cached[0] == self._generation() and not self._overwritten(keys, 0)
        if fresh and (cached[1].budget, cached[1].max_events) == (budget, max_events):
            ledger, extras = cached[1], cached[2]
        else:
            ledger, extras = self._read_cohort(keys, budget, max_events)
        self.cohorts_read.append((key, ledger, extras, len(self._saves)))
        before = CohortLedger(keys.column_user, len(keys.owners), budget, max_events)
        before.events, before.counts, before.user_counts = list(ledger.events), ledger.counts.copy(), ledger.user_counts.copy()
        before.steps = {step: log.copy() for step, log in ledger.steps.items()}
        self._cohorts[id(ledger)] = (ledger, keys, before, extras)
        return ledger

    def _overwritten(self, keys: CohortKeys, since: int, ledger: CohortLedger | None = None) -> bool:
        """Whether a save after the first ``since`` ones, other than of ``ledger``, wrote rows of an owner in ``keys``."""
        return any(
            saved != id(ledger) and not keys.user_of.keys().isdisjoint(owners) for saved, owners in self._saves[since:]
        )

    def cacheable(self) -> list[tuple[tuple[str, CohortKeys], CohortLedger, Extras]]:
        """The cohort ledgers read here that still hold every row of their owners (none written since by another ledger):
        what a later transaction at the generation this one commits may take instead of re-reading."""
        return [
            (key, ledger, extras)
            for key, ledger, extras, since in self.cohorts_read
            if not self._overwritten(key[1], since, ledger)
        ]

    def _read_cohort(self, keys: CohortKeys, budget: Budget, max_events: int | None) -> tuple[CohortLedger, Extras]:
        ledger = CohortLedger(keys.column_user, len(keys.owners), budget, max_events)
        order, bounds, ordered_keys = keys.by_user()
        found: dict[int, list[int]] = {}  # event id -> counts of every column, grouped by user
        extras: Extras = {}
        rows = [(owner, u, event_id, text) for owner, event_id, text in self.db.execute("SELECT owner, event, counts FROM owner_spend")
                if (u := keys.user_of.get(owner)) is not None]
        for (owner, u, event_id, _), stored in zip(rows, _parse_counts([text for *_, text in rows])):
            start, end = bounds[u], bounds[u + 1]
            if event_id not in found:
                found[event_id] = [0] * len(order)
            held = ordered_keys[start:end]
            if len(stored) == len(held) and list(stored) == held:  # the row counts exactly the cohort's records, in order
                found[event_id][start:end] = list(stored.values())
                continue
            found[event_id][start:end] = [stored.pop(key, 0) for key in held]
            if stored:  # what is left counts records the cohort does not hold
                extras[(owner, event_id)] = stored
        for event_id, counts in found.items():
            row = ledger.row(self._events[event_id])  # before indexing: a new row replaces the array
            ledger.counts[row, order] = counts
        for owner, event_id, reports in self.db.execute("SELECT owner, event, reports FROM user_spend"):
            u = keys.user_of.get(owner)
            if u is not None:
                row = ledger.row(self._events[event_id])
                ledger.user_counts[row, u] = reports
        for owner, kind, sampling, event_id, steps in self.db.execute("SELECT owner, kind, sampling, event, steps FROM steps"):
            u = keys.user_of.get(owner)
            if u is not None:
                step = (kind, sampling, self._events[event_id])
                log = ledger.steps.get(step)
                if log is None:  # not setdefault: that would build a zero log for every row
                    log = ledger.steps[step] = np.zeros(len(keys.owners), np.int64)
                log[u] = steps
        return ledger, extras

    def save_cohort(self, ledger: CohortLedger) -> None:
        """Write what changed in a cohort's ledger since it was read (inside this transaction)."""
        _, keys, before, extras = self._cohorts.pop(id(ledger))
        self._saves.append((id(ledger), keys.user_of.keys()))

        def changed(now: np.ndarray, then: np.ndarray | int) -> list[int]:
            return np.flatnonzero(now != then).tolist()

        order, bounds, ordered_keys = keys.by_user()
        for i, event in enumerate(ledger.events):
            j = before.events.index(event) if event in before.events else None
            spent = ledger.counts[i] != (0 if j is None else before.counts[j])
            reports = changed(ledger.user_counts[i], 0 if j is None else before.user_counts[j])
            if spent.any() or reports:
                event_id = self._event_id(event)
                counts, user_counts = ledger.counts[i][order].tolist(), ledger.user_counts[i].tolist()
                quoted = _quoted(keys)
                rows = []
                for u in np.unique(keys.column_user[spent]).tolist():
                    start, end = bounds[u], bounds[u + 1]
                    extra = extras.get((keys.owners[u], event_id))
                    if extra:
                        owned = {key: n for key, n in zip(ordered_keys[start:end], counts[start:end]) if n}
                        text = dump_counts({**owned, **extra})
                    else:  # dump_counts of the same dict, from keys quoted once per cohort
                        text = "{" + ",".join(f"{q}:{n}" for q, n in zip(quoted[start:end], counts[start:end]) if n) + "}"
                    rows.append((keys.owners[u], event_id, text))
                self.db.executemany(UPSERT_SPEND, rows)
                self.db.executemany(UPSERT_USER_SPEND, [(keys.owners[u], event_id, user_counts[u]) for u in reports])
        for (kind, sampling, event), log in ledger.steps.items():
            users = changed(log, before.steps.get((kind, sampling, event), 0))
            if users:
                event_id, steps = self._event_id(event), log.tolist()
                self.db.executemany(UPSERT_STEPS, [(keys.owners[u], kind, sampling, event_id, steps[u]) for u in users])

    def next_count(self, name: str) -> int:
        """The next value (0, 1, ...) of the node's counter ``name``, committed with this transaction."""
        (value,) = self.db.execute(
            "INSERT INTO counters VALUES (?, 0) ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value", (name,)
        ).fetchone()
        return int(value)

    def memo(self, owner: str, key: str, randomizer: str) -> Memo | None:
        """The stored report of record ``key`` under ``randomizer`` (canonical params JSON), if any."""
        row = self.db.execute(
            "SELECT report, label FROM memo WHERE owner = ? AND record = ? AND randomizer = ?", (owner, key, randomizer)
        ).fetchone()
        if row is None:
            return None
        return Memo(np.frombuffer(row[0], dtype=np.float32).copy(), row[1])

    def remember(self, owner: str, key: str, randomizer: str, report: np.ndarray, label: int | None) -> None:
        """Store a released report for later repeats (in this transaction: committed with the charge)."""
        self.db.execute(
            "INSERT OR REPLACE INTO memo VALUES (?, ?, ?, ?, ?)",
            (owner, key, randomizer, np.asarray(report, np.float32).tobytes(), label),
        )

    def save(self, ledger: Ledger) -> None:
        """Write what changed in ``ledger`` since it was read (inside this transaction)."""
        _, owner, keys, counts_before, events_before, user_before, steps_before, stored = self._open.pop(id(ledger))
        self._saves.append((id(ledger), frozenset((owner,))))
        before = {e: i for i, e in enumerate(events_before)}
        for i, event in enumerate(ledger.events):
            old = before.get(event)
            changed = np.flatnonzero(ledger.counts[i] != (0 if old is None else counts_before[old]))
            if changed.size:
                event_id = self._event_id(event)
                counts = stored.setdefault(event_id, {})
                counts.update({keys[j]: int(ledger.counts[i, j]) for j in changed.tolist()})
                self.db.execute(UPSERT_SPEND, (owner, event_id, dump_counts(counts)))
        for i, event in enumerate(ledger.events):
            reports = int(ledger.user_counts[i, 0])
            if reports != (0 if before.get(event) is None else int(user_before[before[event]])):
                self.db.execute(UPSERT_USER_SPEND, (owner, self._event_id(event), reports))
        for (kind, sampling, event), steps in ledger.steps.items():
            if int(steps[0]) != steps_before.get((kind, sampling, event), 0):
                self.db.execute(UPSERT_STEPS, (owner, kind, sampling, self._event_id(event), int(steps[0])))

    def flush(self) -> int:
        """Save every ledger still open (before the commit); the store's generation after this transaction."""
        for ledger, *_ in list(self._open.values()):
            self.save(ledger)
        for cohort, *_ in list(self._cohorts.values()):
            self.save_cohort(cohort)
        return self.next_count("generation")

    def _generation(self) -> int:
        """How many transactions have committed in this store (-1: none yet)."""
        row = self.db.execute("SELECT value FROM counters WHERE name = 'generation'").fetchone()
        return -1 if row is None else int(row[0])

    def _event_id(self, event: PrivacyEvent) -> int:
        if event not in self._event_ids:
            text = json.dumps(event.to_json(), sort_keys=True)
            self.db.execute("INSERT OR IGNORE INTO events (json) VALUES (?)", (text,))
            (event_id,) = self.db.execute("SELECT id FROM events WHERE json = ?", (text,)).fetchone()
            self._event_ids[event], self._events[event_id] = event_id, event
        return self._event_ids[event]


def _switch_to_wal(connection: sqlite3.Connection, deadline: float) -> None:
    """Put the file in WAL mode (kept in the file: later connections find it so).

    Several processes opening a new store at once race to switch it, and SQLite answers the
    losers "database is locked" at once, without waiting out the busy timeout (sqlite3 offers
    no retry of its own): wait and retry until ``deadline``.
    """
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
