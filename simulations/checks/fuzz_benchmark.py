"""Fuzz a node with hostile messages of every type (issue 9, item 4; design.md section 2b).

A seeded stream of malformed, mistyped, oversized and valid-but-hostile messages of every
message type a node accepts (and of types it does not) goes to the real ClientApp on one
in-process node. For every message it checks that the node answered (a reply or a structured
refusal, never a Flower error reply from an exception), that no record's ledger went past the
policy's budget, that a refusal left the ledger exactly as it was, and that a served message
charged exactly what it released.

``python -m ldpfed.simulations.checks.fuzz_benchmark --messages 10000 --seed 0`` prints one table per
node kind, after the finite extremes (:data:`FINITE_EXTREMES` in every number of every randomizer);
``tests/test_fuzz_node.py`` runs a slice in CI (1,000 messages of every type, summed over the node
kinds, and the extremes once).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from ldpfed.fed import protocol
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.privacy.ledger import Ledger

NODE = 1000
UNKNOWN_TYPES = ("query.nope", "train.x", "evaluate.other", "query")
MESSAGE_TYPES = (
    protocol.SETUP, protocol.TRAIN, protocol.RELEASE, protocol.ANSWER, protocol.SCORE,
    protocol.EVALUATE, protocol.LEDGER, *UNKNOWN_TYPES,
)
DATA = "generated:40"
"""The node's data: 40 training and 8 query records of the generated corpus."""
POLICY = {"epsilon_sentence": 3.0, "epsilon_user": "inf", "labels": "public", "evaluation": "rr:1.0"}
"""The device owner's policy: some releases fit, most hostile ones do not. Spending is checked against
it, never against the budget a node states about itself (a node may be wrong about that)."""
RUN = {"data": DATA, "public": "none", "dim": 0, "clip": 1.0, "users": 1, "nodes": 1, "rounds": 1, "epsilon": 3.0, "labels": "public"}
"""The run config the (hostile) server sends."""
FINITE_EXTREMES = (1e308, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, -0.0, 10**30, 2**63 - 1, 10**400)
"""Numbers JSON carries that a float holds or nearly does: each must get a refusal naming it, or be served."""
HOSTILE_NUMBERS = (0, -1, 1e-12, -1e308, math.nan, math.inf, -math.inf, -(2**63), 0.5, 3, True, False, *FINITE_EXTREMES)
HOSTILE_VALUES = (*HOSTILE_NUMBERS, "", "x" * 300, "nan", "1e308", "[]", "{}", [1, 2], [0.5], ["a"], [True], b"\x00\xff")


@dataclass
class TypeStats:
    """What happened to the messages of one type.

    ``generic``: refusals by the ClientApp's last-resort catch (``malformed request: <Error>``),
    which name the exception rather than the field; each is a crash the node code should refuse itself.
    """

    sent: int = 0
    served: int = 0
    refused: Counter = field(default_factory=Counter)
    uncaught: int = 0
    generic: int = 0
    overruns: int = 0
    spend_without_release: int = 0
    slowest: float = 0.0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        """Keep the first few problems for the report."""
        if len(self.problems) < 5:
            self.problems.append(text[:600])


# -- the node ----------------------------------------------------------------------------------
def bundle(folder: Path) -> np.ndarray:
    """The setup bundle of a run without projection: the encoder name only."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "encoder.txt").write_text("minilm")
    return pack(folder)


def node(folder: Path, memoize: bool = True, engine: bool = False, cache: Path | None = None) -> Any:
    """A one-node, one-user federation (a device unless ``engine``), set up with the run's bundle.

    ``cache``: a device's cache folder (encodings, unpacked bundles), which devices may share;
    by default ``<folder>/state/cache``.
    """
    from ldpfed.clients.app import FLOWER, app
    from ldpfed.fed.device.state import init_state
    from ldpfed.simulations.local_grid import LocalGrid

    folder.mkdir(parents=True, exist_ok=True)
    policy = folder / "policy.toml"
    policy.write_text("".join(f"{k} = {json.dumps(v) if k != 'epsilon_user' else v}\n" for k, v in {**POLICY, "memoize": memoize}.items()))
    node_config = {"data": DATA, "state-dir": str(folder / "state" if engine else init_state(folder / "state")), "policy": str(policy)}
    if cache is not None:
        node_config["cache-dir"] = str(cache)
    grid = LocalGrid(app, 1, RunSpec.from_mapping(RUN).to_mapping(), engine=engine, node_configs=[node_config])
    (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(bundle(folder / "bundle"))), dst_node_id=NODE, message_type=protocol.SETUP)])
    if reply.has_error() or protocol.read_refusal(reply.content) is not None:
        raise RuntimeError(f"setup failed: {reply.error.reason if reply.has_error() else protocol.read_refusal(reply.content)}")
    return grid


# -- hostile messages ---------------------------------------------------------------------------
def base_randomizers(dim: int) -> list[dict[str, Any]]:
    """Valid randomizer parameters of every kind (before any mutation)."""
    sigma = 3.0  # a little more noise than one release at epsilon 3 needs (2.78): a valid request
    return [
        {"mechanism": "gaussian", "clip": 1.0, "sigma": sigma},
        {"mechanism": "gaussian", "clip": 1.0, "sigma": 2 * sigma},
        {"mechanism": "gaussian-analytic", "clip": 1.0, "sigma": sigma},
        {"mechanism": "laplace", "clip": 1.0, "scale": 500.0},
        {"mechanism": "dchi", "clip": 1.0, "eta": 1.0},
        {"mechanism": "sue", "epsilon": 1.0, "dim": dim},
        {"mechanism": "oue", "epsilon": 1.0, "dim": dim},
        {"mechanism": "ome", "epsilon": 1.0, "dim": dim, "lambda": 100.0},
        {"mechanism": "dpie-gaussian", "k": 4, "max_coefficient": 0.25, "masks": 16, "clip": 1.0, "sigma": 40.0},
        {"mechanism": "texthide", "k": 4, "masks": 16},
        {"mechanism": "laplace-seed002", "clip": 1.0, "stated_epsilon": 1.0, "dim": dim, "allow_invalid": True},
    ]


class Hostile:
    """Seeded hostile message contents for one node.

    Parameters
    ----------
    rng:
        The stream every choice is drawn from.
    setup:
        A valid setup bundle (re-sent, truncated, retyped).
    dim, num_labels:
        The node's dimension and number of labels (from its setup reply).
    run:
        The run config the server sent (its sampling specs are the valid ones); by default :data:`RUN`.
    one_at_a_time:
        Chance that a served query release's slots are then answered one per message.
    """

    def __init__(
        self, rng: np.random.Generator, setup: np.ndarray, dim: int, num_labels: int, run: dict[str, Any] | None = None, one_at_a_time: float = 0.5
    ) -> None:
        self.rng = rng
        self.setup = setup
        self.dim = dim
        self.num_labels = num_labels
        self.released = 0
        """Slots of the node's last query release (answered correctly or not)."""
        self.next_slot = 0
        """The slot that a one-slot-at-a-time answer names next."""
        self.sequential = False
        """Whether the answers to the last release name its slots one at a time."""
        self.one_at_a_time = one_at_a_time
        config = RunSpec.from_mapping(RUN if run is None else run)
        self.sampling = {"train": config.schedule.train_sampling.spec, "query": config.evaluation.upsampling.spec}

    def content(self, message_type: str) -> RecordDict:
        """A hostile content for ``message_type`` (retried until Flower's records accept it)."""
        make: Callable[[], RecordDict] = {
            protocol.SETUP: self._setup,
            protocol.TRAIN: lambda: self._release("train"),
            protocol.RELEASE: lambda: self._release("query"),
            protocol.ANSWER: self._answer,
            protocol.EVALUATE: self._evaluate,
        }.get(message_type, self._anything)
        while True:
            try:
                return make()
            except (TypeError, ValueError):  # Flower's records refuse it: the server cannot send it either
                continue

    def released_slots(self, count: int) -> None:
        """A query release was served with ``count`` slots: answer them next, one at a time or not (a coin)."""
        self.released, self.next_slot, self.sequential = count, 0, self._chance(self.one_at_a_time)

    def _pick(self, options: Any) -> Any:
        return options[int(self.rng.integers(len(options)))]

    def _chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # requests --------------------------------------------------------------------------------
    def _randomizer(self) -> dict[str, Any]:
        return self._mutate_dict(dict(self._pick(base_randomizers(self.dim))), self._chance(0.4))

    def extremes(self) -> list[tuple[str, RecordDict]]:
        """Every base randomizer with each of its numbers set to each finite extreme, as a training
        and a query release (in order, no chance involved)."""
        messages = []
        for base in base_randomizers(self.dim):
            for key in [k for k, v in base.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]:
                for value in FINITE_EXTREMES:
                    for message_type, kind in ((protocol.TRAIN, "train"), (protocol.RELEASE, "query")):
                        request = {"users": [0], "records": 0, "sampling": self.sampling[kind], "randomizer": json.dumps({**base, key: value})}
                        messages.append((message_type, RecordDict({"request": ConfigRecord(request)})))
        return messages

    def _mutate_dict(self, values: dict[str, Any], mutate: bool) -> dict[str, Any]:
        if not mutate:
            return values
        for _ in range(int(self.rng.integers(1, 4))):
            action = self._pick(["drop", "retype", "number", "extra", "nest", "list"])
            key = self._pick(sorted(values)) if values else "x"
            if action == "drop":
                values.pop(key, None)
            elif action == "retype":
                values[key] = self._pick(HOSTILE_VALUES)
            elif action == "number":
                values[key] = self._pick(HOSTILE_NUMBERS)
            elif action == "extra":
                values[self._pick(["extra", "post_clip", "true_epsilon", "mean", "std", "integer_bits", "lambda"])] = self._pick(HOSTILE_VALUES)
            elif action == "nest":
                depth = int(self._pick([2, 50, 5000, 100_000]))
                values[key] = _nested(depth)
            else:
                values[key] = [float(v) for v in self.rng.normal(size=int(self._pick([0, 1, 3, 10_000])))]
        return values

    def _release(self, kind: str) -> RecordDict:
        randomizer: Any = self._randomizer()
        if self._chance(0.05):
            randomizer = json.dumps(randomizer)[: int(self.rng.integers(0, 40))]  # truncated JSON
        elif self._chance(0.05):
            randomizer = "[" * int(self._pick([100, 5000, 9000])) + "]" * 10  # deeply nested JSON
        elif self._chance(0.02):
            randomizer = json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": 1e-12, "pad": "x" * 20_000})
        else:
            randomizer = json.dumps(randomizer, allow_nan=True)
        request = {
            "users": [0] if self._chance(0.7) else self._pick([[1], [0, 0], [0, 1], [-1], [], [2**62], list(range(2000))]),
            "randomizer": randomizer,
            "records": 0 if self._chance(0.7) else self._pick([1, 5, 100_000, 10**9, -1]),
            "sampling": self.sampling[kind] if not self._chance(0.1) else self._pick(["all", "poisson:0.5", "fixed:2", "upsample:1:1:1", ""]),
        }
        request = self._mutate_dict(request, self._chance(0.2))
        if self._chance(0.05):
            return self._anything()
        return RecordDict({"request": ConfigRecord(request)} if not self._chance(0.03) else {"req": ConfigRecord(request)})

    def _answer(self) -> RecordDict:
        if self.released and self.sequential:  # the release's slots one at a time (issue 39, finding 2)
            slot = np.array([self.next_slot % self.released], np.int64)
            self.next_slot += 1
            valid = {"users": np.zeros(1, np.int64), "slots": slot, "scores": self.rng.normal(size=(1, self.num_labels))}
            return RecordDict({"answers": ArrayRecord({k: self._array(v) for k, v in valid.items()})})
        n = self.released if self.released and self._chance(0.5) else int(self._pick([0, 1, 3, 8, 50]))
        slots = self.rng.permutation(max(n, 1))[:n].astype(np.int64)
        n = len(slots)
        arrays = {
            "users": np.zeros(n, np.int64),
            "slots": slots,
            "scores": self.rng.normal(size=(n, self.num_labels)),
        }
        if self._chance(0.5):
            name = self._pick(sorted(arrays))
            arrays[name] = self._bad_array(arrays[name])
        if self._chance(0.1):
            arrays.pop(self._pick(sorted(arrays)))
        return RecordDict({"answers": ArrayRecord({k: self._array(v) for k, v in arrays.items()})})

    def _evaluate(self) -> RecordDict:
        count = int(self._pick([0, 1, 1, 2, 4, 5, 50]))
        arrays: dict[str, Any] = {}
        for i in range(count):
            if self._chance(0.3):  # an MLP (--classifier mlp): its layers are as untrusted as a linear model
                widths = [self.dim, *[int(self._pick([1, 8, 64])) for _ in range(int(self._pick([1, 2])))], self.num_labels]
                for j, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
                    arrays[f"m{i}.layer{j}.weights"] = self.rng.normal(size=(a, b))
                    arrays[f"m{i}.layer{j}.bias"] = np.zeros(b)
                continue
            arrays[f"m{i}.weights"] = self.rng.normal(size=(self.dim, self.num_labels))
            arrays[f"m{i}.bias"] = np.zeros(self.num_labels)
        if arrays and self._chance(0.7):
            name = self._pick(sorted(arrays))
            if self._chance(0.2):
                arrays.pop(name)
            else:
                arrays[name] = self._bad_array(arrays[name])
        if self._chance(0.1):
            arrays[self._pick(["weights", ".bias", "m0", "a.b.weights", "", "m0.layer9.bias", "m0.layer0.code"])] = np.zeros(2)
        record = ArrayRecord({k: self._array(v) for k, v in arrays.items()})
        return RecordDict({"models": record} if not self._chance(0.05) else {"model": record})

    def _setup(self) -> RecordDict:
        data = self.setup
        action = self._pick(["valid", "truncate", "random", "retype", "reshape", "empty", "garbage"])
        if action == "truncate":
            data = data[: int(self.rng.integers(0, len(data)))]
        elif action == "random":
            data = self.rng.integers(0, 256, int(self._pick([0, 10, 512, 4096]))).astype(np.uint8)
        elif action == "retype":
            data = data.astype(self._pick([np.float32, np.int64, np.bool_, np.int8]))
        elif action == "reshape":
            data = data[: len(data) // 4 * 4].reshape(-1, 4)
        elif action == "empty":
            return RecordDict()
        elif action == "garbage":
            return RecordDict({"assets": ArrayRecord({"bundle": self._garbage_array()})})
        return RecordDict({"assets": ArrayRecord({"bundle": Array(np.ascontiguousarray(data))})})

    def _anything(self) -> RecordDict:
        """A content with nothing the node expects: empty, or records of any kind."""
        records: dict[str, Any] = {}
        for _ in range(int(self.rng.integers(0, 3))):
            name = self._pick(["request", "answers", "models", "assets", "meta", "x"])
            kind = self._pick(["config", "array", "metric"])
            if kind == "config":
                records[name] = ConfigRecord({self._pick(["users", "json", "a"]): self._pick(HOSTILE_VALUES)})
            elif kind == "array":
                records[name] = ArrayRecord({self._pick(["users", "bundle", "m.weights"]): self._array(self._bad_array(np.zeros(3)))})
            else:
                records[name] = MetricRecord({"x": float(self.rng.normal())})
        return RecordDict(records)

    # arrays ----------------------------------------------------------------------------------
    def _bad_array(self, good: np.ndarray) -> Any:
        action = self._pick(["nan", "inf", "shape", "ndim", "dtype", "huge", "negative", "empty", "garbage", "big"])
        value = np.array(good, dtype=np.float64 if good.dtype.kind == "f" else good.dtype)
        if action in ("nan", "inf") and value.size:
            value = value.astype(np.float64)
            value.reshape(-1)[int(self.rng.integers(value.size))] = math.nan if action == "nan" else math.inf
        elif action == "shape":
            value = self.rng.normal(size=tuple(int(self.rng.integers(0, 6)) for _ in range(max(value.ndim, 1))))
        elif action == "ndim":
            value = value.reshape(value.shape + (1,)) if self._chance(0.5) else np.asarray(value.reshape(-1)[:1].sum())
        elif action == "dtype":
            value = value.astype(self._pick([np.float32, np.int32, np.bool_, np.uint8, np.float16, np.complex64]))
        elif action == "huge":
            value = np.full(value.shape, self._pick([1e308, 2**62, -(2**62)]))
        elif action == "negative":
            value = -np.abs(value) - 1
        elif action == "empty":
            value = np.zeros((0,) * max(value.ndim, 1))
        elif action == "garbage":
            return self._garbage_array()
        else:
            value = np.zeros((int(self._pick([10_001, 100_000])), max(self.num_labels, 1)))
        return value

    def _garbage_array(self) -> Array:
        """An Array whose bytes are not a numpy file (a server can send any bytes)."""
        data = self._pick([b"", b"\x93NUMPY", b"garbage" * 10, _npy_header("|O", "(1,)"), _npy_header("<f8", "(1000000000000,)")])
        return Array(dtype="float64", shape=(3,), stype=self._pick(["numpy.ndarray", "torch"]), data=data)

    @staticmethod
    def _array(value: Any) -> Array:
        return value if isinstance(value, Array) else Array(np.ascontiguousarray(value))


def _nested(depth: int) -> Any:
    """A JSON value nested ``depth`` lists deep (built iteratively: the encoder must not recurse)."""
    return json.loads("[" * min(depth, 900) + "]" * min(depth, 900)) if depth <= 900 else "[" * depth + "]" * depth


def _npy_header(descr: str, shape: str) -> bytes:
    """A numpy file header with a few bytes of data: an object array, or one too large to exist."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}".ljust(117) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"\x00" * 8


# -- the loop -------------------------------------------------------------------------------------
def ledger(grid: Any) -> Ledger:
    """User 0's full ledger, read on the node as its owner would (a device sends only aggregates)."""
    from contextlib import nullcontext

    from ldpfed.clients.app import owner_ledgers
    from ldpfed.fed.device.entropy import simulation_engine

    with simulation_engine() if grid.engine else nullcontext():
        return owner_ledgers(grid.node_ctx[NODE])[0]


def fuzz(grid: Any, per_type: int | dict[str, int], seed: int, exact: bool = False, extremes: bool = False) -> dict[str, TypeStats]:
    """Send ``per_type`` hostile messages of every type (or ``per_type[type]`` of each) in a seeded
    order; check every reply.

    After each message the node's ledger database is compared with its state before (every
    table, memos included): a refusal must leave it untouched. Whenever it changed, the ledger
    is read as the owner reads it and checked against the owner's :data:`POLICY` and against what
    the reply released; a served message that left the database as it was charged nothing.
    ``exact``: the node runs in the simulation engine (evaluation outcomes are exact and free).
    ``extremes``: first send :meth:`Hostile.extremes` (counted under their types as well).
    """
    from ldpfed.clients.app import FLOWER

    counts = per_type if isinstance(per_type, dict) else dict.fromkeys(MESSAGE_TYPES, per_type)
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="ldpfed-fuzz-bundle-") as folder:
        setup = bundle(Path(folder))
    (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(setup)), dst_node_id=NODE, message_type=protocol.SETUP)])
    info = protocol.read_setup_reply(reply.content)
    hostile = Hostile(rng, setup, dim=info.dim, num_labels=info.num_labels)
    order = np.repeat(np.arange(len(MESSAGE_TYPES)), [counts.get(t, 0) for t in MESSAGE_TYPES])
    rng.shuffle(order)
    stream = ((MESSAGE_TYPES[i], hostile.content(MESSAGE_TYPES[i])) for i in order.tolist())
    return check_messages(grid, hostile, [*hostile.extremes(), *stream] if extremes else stream, exact)


def check_messages(grid: Any, hostile: "Hostile", messages: Any, exact: bool) -> dict[str, TypeStats]:
    """Send each ``(message type, content)`` of ``messages`` and check what it did (see :func:`fuzz`)."""
    from ldpfed.fed.device.policy import DevicePolicy

    policy = DevicePolicy.from_mapping(POLICY)
    stats = {t: TypeStats() for t in MESSAGE_TYPES}
    seen: set[bytes] = set()
    current = ledger(grid)
    queries = true_queries_released(grid)
    with LedgerWatch(ledger_file(grid)) as watch:
        for message_type, content in messages:
            entry = stats[message_type]
            started = time.perf_counter()
            (reply,) = grid.send_and_receive([Message(content, dst_node_id=NODE, message_type=message_type)])
            entry.slowest = max(entry.slowest, time.perf_counter() - started)
            entry.sent += 1
            refused = None if reply.has_error() else protocol.read_refusal(reply.content)
            changed = watch.changed()
            released = 0
            if reply.has_error():
                entry.uncaught += 1
                entry.problem(reply.error.reason.splitlines()[0])
            elif refused is not None:
                entry.refused[refused[0]] += 1
                if refused[1].startswith("malformed request:"):
                    entry.generic += 1
                    entry.problem(f"generic refusal: {refused[1]}")
                if changed:
                    entry.spend_without_release += 1
                    entry.problem(f"refused {refused} but the ledger database changed")
            else:
                entry.served += 1
                released = _released(message_type, reply.content, seen, exact)
                if message_type == protocol.RELEASE:
                    hostile.released_slots(len(protocol.read_release_reply(reply.content).slots))
            served = refused is None and not reply.has_error()
            after = ledger(grid) if changed else current  # an unchanged database holds the same ledger
            if changed and (
                after.sentence_epsilon() > policy.epsilon_sentence * (1 + 1e-9) or after.user_epsilon() > policy.epsilon_user * (1 + 1e-9)
            ):
                entry.overruns += 1
                entry.problem(
                    f"overrun after {message_type}: epsilon {after.sentence_epsilon():.4g} (user {after.user_epsilon():.4g}) "
                    f"> the owner's {policy.epsilon_sentence} ({policy.epsilon_user})"
                )
            spent = after.releases() - current.releases()
            if message_type == protocol.RELEASE:
                now = true_queries_released(grid)
                released, queries = now - queries, now
            if served and not _charged_as_released(message_type, spent, released, content):
                entry.spend_without_release += 1
                entry.problem(f"{message_type}: {spent} record releases charged for {released} released")
            current = after
    return stats


def true_queries_released(grid: Any) -> int:
    """True queries the node's users have released so far, from the users' own sessions (which the
    node keeps apart from the ledger; the server never sees which query slots are true)."""
    node = grid.node_ctx[NODE].state.config_records.get("node")
    sessions = json.loads(str(node["users"])) if node is not None else {}
    return sum(int(s.get("extra", {}).get("queries", {}).get("released_true", 0)) for s in sessions.values())


class LedgerWatch:
    """Whether the ledger database's content changed since the last look.

    A read-only connection held open for the whole fuzz asks SQLite's ``data_version``, which
    moves whenever another connection commits; only then are all the rows read and compared
    with the last content (a commit may rewrite rows as they were). Holding a reader open means
    the node's connection is no longer the file's last one on close, so SQLite does not
    checkpoint the WAL on every message; each commit is as durable as before (WAL,
    ``synchronous=FULL`` on devices).
    """

    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        self.version = self._version()
        self.content = self._content()

    def __enter__(self) -> "LedgerWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.connection.close()

    def changed(self) -> bool:
        """Whether the content differs from the last look (and remember the new content)."""
        version = self._version()
        if version == self.version:
            return False
        self.version, before, self.content = version, self.content, self._content()
        return self.content != before

    def _version(self) -> int:
        return int(self.connection.execute("PRAGMA data_version").fetchone()[0])

    def _content(self) -> tuple:
        """Every row of the ledger database (spending, user-level spending, steps, memos)."""
        tables = ("events", "owner_spend", "user_spend", "steps", "memo")
        return tuple(tuple(sorted(self.connection.execute(f"SELECT * FROM {table}"))) for table in tables)


def ledger_file(grid: Any) -> Path:
    """The node's ledger database, where the node's site puts it."""
    from contextlib import nullcontext

    from ldpfed.fed.device.entropy import simulation_engine
    from ldpfed.fed.device.site import Site

    context = grid.node_ctx[NODE]
    with simulation_engine() if grid.engine else nullcontext():
        site = Site.resolve(context.node_config, RunSpec.from_mapping(context.run_config), context.run_id, NODE)
    return Path(site.ledger_file)


def _released(message_type: str, content: RecordDict, seen: set[bytes], exact: bool) -> int:
    """What a served reply released: new training reports, noisy outcomes of an evaluation (query
    releases: :func:`true_queries_released`)."""
    if message_type == protocol.TRAIN:
        fresh = 0
        for row in protocol.read_release_reply(content).reports:
            key = (message_type + ":").encode() + row.tobytes()
            fresh += key not in seen
            seen.add(key)
        return fresh
    if message_type in (protocol.EVALUATE, protocol.SCORE) and not exact:
        return sum(protocol.read_outcomes_reply(content).total.values())
    return 0


def _charged_as_released(message_type: str, spent: int, released: int, content: RecordDict) -> bool:
    """Whether a served message's charge matches what it released.

    A training report of a one-record randomizer costs its record one release (labels are
    public here) and a mixup report several records; a query release charges each true query it
    released once (``released``: from the users' sessions; fictitious ones are free); an evaluation
    charges one release per noisy outcome.
    """
    if message_type == protocol.TRAIN:
        params = json.loads(str(content["request"]["randomizer"]))
        return spent == released if params["mechanism"] not in ("dpie-gaussian", "dpie-laplace", "texthide") else (spent > 0) == (released > 0)
    return spent == released


# -- report ---------------------------------------------------------------------------------
def table(stats: dict[str, TypeStats]) -> str:
    """One row per message type."""
    codes = sorted({code for entry in stats.values() for code in entry.refused})
    head = ["type", "sent", *[f"refused:{c}" for c in codes], "served", "uncaught", "generic", "overruns", "spend-w/o-release", "slowest ms"]
    rows = [
        [t, e.sent, *[e.refused.get(c, 0) for c in codes], e.served, e.uncaught, e.generic, e.overruns, e.spend_without_release, f"{1e3 * e.slowest:.1f}"]
        for t, e in stats.items()
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(head, *rows)]
    lines = ["  ".join(str(x).rjust(w) for x, w in zip(line, widths)) for line in [head, *rows]]
    problems = [f"  {t}: {p}" for t, e in stats.items() for p in e.problems]
    return "\n".join(lines + (["problems:", *problems] if problems else []))


def main(argv: list[str] | None = None) -> int:
    """Fuzz a device node (memoize on and off) and a simulation-engine node; exit 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="hostile messages per message type and node")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extremes", action=argparse.BooleanOptionalAction, default=True, help="first send the finite extremes")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="ldpfed-fuzz-") as work:
        for name, memoize, engine in (("device, memoize on", True, False), ("device, memoize off", False, False), ("simulation engine", False, True)):
            started = time.perf_counter()
            grid = node(Path(work) / name.replace(" ", "-").replace(",", ""), memoize=memoize, engine=engine, cache=Path(work) / "cache")
            stats = fuzz(grid, args.messages, args.seed, exact=engine, extremes=args.extremes)
            print(f"\n{name}: {sum(e.sent for e in stats.values())} messages in {time.perf_counter() - started:.1f} s")
            print(table(stats))
            failed |= any(e.uncaught or e.generic or e.overruns or e.spend_without_release for e in stats.values())
    return int(failed)


if __name__ == "__main__":
    raise SystemExit(main())
