"""Non-interference of a device: private content reaches the server only through charged releases (issue 39, item 10).

design.md section 2b, as one property instead of one attack at a time. Device nodes (the real
ClientApp, ``engine=False``, node configs as ``flower-supernode`` passes them) hold data that differ
from a base device's in one private respect (:data:`PAIRS`). Every node gets the same seeded stream
of hostile messages (the fuzz's generator, fed.checks.fuzz_benchmark.Hostile: every message type,
hostile values included), in a test mode where every node draws the same coins (the OS keys of
fed.privacy.noise.SecureGenerator come from a counter per message, the same for every node; one more
variant, :data:`COINS`, holds the base's data and draws its own coins). Then
every reply field outside the charged release payloads (:data:`PAYLOAD_ARRAYS`, :data:`PAYLOAD_METRICS`)
must be identical to the base device's, and a payload may differ only in its values (same records,
dtypes and shapes). Every reply must also carry only the fields a device may send (:data:`OUTBOUND`):
a figure the property cannot see (the same on both nodes but computed per record) is refused by name.

``python -m ldpfed.simulations.checks.noninterference --messages 5000`` runs a long campaign with a progress
bar; ``tests/test_noninterference.py`` runs a seeded slice (200 messages per pair) in CI, and
simulations/checks/mutations.py puts findings 1 and 2 back to prove it catches them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.simulations.checks import fuzz_benchmark
from ldpfed.simulations.checks.fuzz_benchmark import MESSAGE_TYPES, NODE

TRAIN = [
    ("the film was great and the cast was lovely", 0),
    ("a dull plot and terrible acting throughout", 1),
    ("i loved every minute of this wonderful story", 0),
    ("boring from start to finish, avoid it", 1),
    ("a warm and funny film for the whole family", 0),
    ("the worst script i have read in years", 1),
    ("beautiful music and a moving ending", 0),
    ("awful pacing and a silly twist", 1),
    ("great fun, i would watch it again", 0),
    ("a tedious mess that goes nowhere", 1),
]
DEV = [("a lovely little film", 0), ("a terrible waste of time", 1)]
LABELS = "0\tpositive\n1\tnegative\n"


def _label(rows: list[tuple[str, int]], i: int) -> list[tuple[str, int]]:
    rows = list(rows)
    rows[i] = (rows[i][0], 1 - rows[i][1])
    return rows


def _copy(rows: list[tuple[str, int]], pairs: dict[int, int]) -> list[tuple[str, int]]:
    rows = list(rows)
    for target, source in pairs.items():
        rows[target] = rows[source]
    return rows


PAIRS: dict[str, Callable[[list[tuple[str, int]]], list[tuple[str, int]]]] = {
    "label": lambda rows: _label(rows, 2),
    "duplicate": lambda rows: _copy(rows, {5: 4}),
    "text": lambda rows: [*rows[:3], ("an entirely different sentence about a film", rows[3][1]), *rows[4:]],
    "histogram": lambda rows: _label(_label(_label(rows, 1), 3), 5),
    "distinct": lambda rows: _copy(rows, {6: 0, 7: 1, 8: 2, 9: 3}),
}
"""How each variant's training data differ from the base's (record count equal): one label; one record
duplicated in place of another; one sentence's text; the label histogram; the number of distinct sentences."""
COINS = "coins"
"""A variant with the base's data and its own secret coins. With the run's sampling (every training
record, every query item each step) no field outside a payload may depend on them: which slot holds a
true query, for one, is what up-sampling hides."""
COIN_OFFSET = 500_000
"""Where the :data:`COINS` variant's keys start, apart from the others' within a message."""

RUN = {**fuzz_benchmark.RUN, "users": 2, "partition": "dirichlet:0.001", "seed": 5, "train_limit": 7, "upsampling_q": 0.25, "p_query": 1.0, "answers": 1}
"""The server's run config: the fuzz's, with population options that would split a device's records by label
(issue 39, finding 1) and up-sampling with fictitious queries (finding 2)."""

POLICY = {"epsilon_sentence": 30.0, "epsilon_user": "inf", "labels": "rr:1.0", "evaluation": "rr:1.0"}
"""The owner's policy on every node: labels and evaluation outcomes leave only through randomized response; a
budget that lets a run's worth of hostile releases through (a refused release shows less)."""
NEW_RUN = 0.06
"""Chance that the server starts a new run before a message: the nodes keep their state folders (ledgers,
record stores) and start new sessions, as a SuperNode does for a new run id."""

PAYLOAD_ARRAYS = {"reports": {"reports", "labels", "class-sums", "label-counts", "second-moment"}}
"""Array fields that are a charged release's output (record name -> keys): their values may differ."""
PAYLOAD_METRICS = re.compile(r"correct\..*")
"""Metric keys that are a charged release's output (randomized-response sums of correct bits)."""

_WEIGHT = {protocol.TRAIN: 3.0, protocol.RELEASE: 3.0, protocol.ANSWER: 4.0}
WEIGHTS = np.array([_WEIGHT.get(t, 1.0 if t in protocol.MESSAGE_TYPES else 0.25) for t in MESSAGE_TYPES]) / sum(
    _WEIGHT.get(t, 1.0 if t in protocol.MESSAGE_TYPES else 0.25) for t in MESSAGE_TYPES
)
"""How often each message type is drawn: releases and answers most (where a reply can depend on content
or on secret coins), unknown types least (each is refused before anything is read)."""

SERVED_FIGURES = {"epsilon_sentence", "epsilon_user"}
"""A device's figures in a release reply (fed.privacy.ledger.Ledger.served_figures): nothing per record."""
OUTBOUND: dict[str, set[str]] = {
    "node": {"users", "dim", "num-labels", "train-counts", "query-counts", "sampler"},
    "meta": {"status", "code", "reason", "randomizer", "label-channel", "refusals", "ledgers", "host", "ledger-seconds", "summed-reports"},
    "reports": {"reports", "labels", "users", "slots", "class-sums", "label-counts", "second-moment"},
    "answered": {"finished"},
    "ledgers": {"json"},
    "metrics": {"exact", "keep"},
}
"""Every record a device's reply may hold (release parts' "-<i>" suffixes removed) and its keys (metrics
also "correct.<model>" and "total.<model>"): the fields of fed.protocol's device replies."""


@dataclass
class Finding:
    """One reply that broke the property."""

    pair: str
    index: int
    message_type: str
    what: str

    def __str__(self) -> str:
        return f"message {self.index} ({self.message_type}), {self.pair}: {self.what}"


@dataclass
class Campaign:
    """What a campaign saw: messages sent per pair, replies served, and the findings (first few kept)."""

    sent: dict[str, int] = field(default_factory=dict)
    served: int = 0
    findings: list[Finding] = field(default_factory=list)
    count: int = 0

    def add(self, finding: Finding) -> None:
        self.count += 1
        if len(self.findings) < 20:
            self.findings.append(finding)


# -- the nodes ------------------------------------------------------------------------------------
def write_data(folder: Path, train: list[tuple[str, int]]) -> Path:
    """A device's data folder: ``train`` rows, the shared :data:`DEV` rows and the label set."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("dev", DEV)):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    (folder / "labels.txt").write_text(LABELS)
    return folder


def devices(folder: Path, memoize: bool, cache: Path, pairs: tuple[str, ...] = (*PAIRS, COINS)) -> dict[str, Any]:
    """The base device and one per pair, each in its own folder (data, state, policy), set up with one bundle."""
    from ldpfed.clients.app import FLOWER, app
    from ldpfed.fed.device.state import init_state
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.simulations.local_grid import LocalGrid

    setup = fuzz_benchmark.bundle(folder / "bundle")
    grids = {}
    for name in ("base", *pairs):
        root = folder / name
        data = write_data(root / "data", PAIRS[name](TRAIN) if name in PAIRS else TRAIN)
        policy = root / "policy.toml"
        values = {**POLICY, "memoize": memoize}
        policy.write_text("".join(f"{k} = {v if k == 'epsilon_user' else json.dumps(v)}\n" for k, v in values.items()))
        node_config = {"data": str(data), "state-dir": str(init_state(root / "state")), "policy": str(policy), "cache-dir": str(cache)}
        grid = LocalGrid(app, 1, RunSpec.from_mapping(RUN).to_mapping(), engine=False, node_configs=[node_config])
        grid.root = str(root)  # type: ignore[attr-defined]
        (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(setup)), dst_node_id=NODE, message_type=protocol.SETUP)])
        refused = protocol.read_refusal(reply.content) if not reply.has_error() else ("error", reply.error.reason)
        if refused is not None:
            raise RuntimeError(f"setup of {name} failed: {refused}")
        grids[name] = grid
    return grids


@contextmanager
def same_coins() -> Iterator[Callable[..., None]]:
    """Test mode: every SecureGenerator keyed from a counter instead of the OS. ``start(i)`` rewinds the
    counter to message ``i``'s first key, so two nodes that draw alike draw the same coins (``start(i, offset)``:
    other keys)."""
    from ldpfed.fed.privacy.noise import SecureGenerator

    keys: list[Iterator[int]] = [itertools.count()]
    original = SecureGenerator.__dict__["from_os"]

    def start(index: int, offset: int = 0) -> None:
        keys[0] = itertools.count(index * 1_000_003 + 1 + offset)

    SecureGenerator.from_os = classmethod(lambda cls: cls.keyed(next(keys[0])))  # type: ignore[method-assign]
    try:
        yield start
    finally:
        SecureGenerator.from_os = original  # type: ignore[method-assign]


# -- what a reply shows -------------------------------------------------------------------------
def observe(reply: Message, root: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A reply as (public view, payload view). The node's own folder is written ``<node>`` in every text
    (each node of a pair has its own folders; which folder is the owner's configuration, not content)."""
    if reply.has_error():
        return {"error": reply.error.reason.replace(root, "<node>").splitlines()[0]}, {}
    public: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    content = reply.content
    for name, record in content.array_records.items():
        for key, value in record.items():
            array = value.numpy()
            where = f"{name}.{key}"
            if key in PAYLOAD_ARRAYS.get(_base(name), set()):
                public[f"{where}:form"] = (array.dtype.str, array.shape)
                payload[where] = array
            else:
                public[where] = (array.dtype.str, array.shape, array.tobytes())
    for name, record in content.config_records.items():
        for key, value in record.items():
            public[f"{name}.{key}"] = value.replace(root, "<node>") if isinstance(value, str) else value
    for name, record in content.metric_records.items():
        for key, value in record.items():
            (payload if PAYLOAD_METRICS.fullmatch(key) else public)[f"{name}.{key}"] = value
    return public, payload


def outbound_problems(reply: Message) -> list[str]:
    """Fields of a device's reply outside :data:`OUTBOUND`, and figures a device must not send."""
    if reply.has_error():
        return []
    problems = []
    content = reply.content
    for name, record in content.items():
        allowed = OUTBOUND.get(_base(name))
        if allowed is None:
            problems.append(f"record {name!r} is not one a device sends")
            continue
        extra = sorted(k for k in record if k not in allowed and not (name == "metrics" and re.fullmatch(r"(correct|total)\..+", k)))
        if extra:
            problems.append(f"record {name!r} carries {extra}")
    for name, record in content.config_records.items():
        if _base(name) == "meta" and "ledgers" in record:
            for user, figures in json.loads(str(record["ledgers"])).items():
                if set(figures) != SERVED_FIGURES:
                    problems.append(f"{name}.ledgers of user {user} carries {sorted(figures)}, not the served figures {sorted(SERVED_FIGURES)}")
        if _base(name) == "meta" and str(record.get("host", "")):
            problems.append(f"{name}.host names the serving host")
    if "metrics" in content.metric_records and int(content.metric_records["metrics"].get("exact", 0)):
        problems.append("outcomes marked exact")
    return problems


def _base(name: str) -> str:
    return re.sub(r"-\d+$", "", name)


def _differences(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    keys = sorted(set(base) | set(other))
    return [f"{k}: {_short(base.get(k, '<absent>'))} vs {_short(other.get(k, '<absent>'))}" for k in keys if not _equal(base.get(k), other.get(k))]


def _equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b if not isinstance(a, float) or a == a else b != b)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:150] + "..."


# -- the campaign ---------------------------------------------------------------------------------
def campaign(grids: dict[str, Any], messages: int, seed: int, progress: Callable[[int], None] | None = None) -> Campaign:
    """Send ``messages`` hostile messages (types in seeded random order) to every node; compare each pair's replies."""
    from ldpfed.clients.app import FLOWER

    rng = np.random.default_rng(seed)
    base = grids["base"]
    setup = fuzz_benchmark.bundle(Path(base.root) / "bundle")
    (reply,) = base.send_and_receive([Message(FLOWER(protocol.setup_request(setup)), dst_node_id=NODE, message_type=protocol.SETUP)])
    info = protocol.read_setup_reply(reply.content)
    hostile = fuzz_benchmark.Hostile(rng, setup, dim=info.dim, num_labels=info.num_labels, run=RUN, one_at_a_time=0.8)
    result = Campaign(sent=dict.fromkeys([name for name in grids if name != "base"], 0))
    with same_coins() as start:
        for index in range(messages):
            if rng.random() < NEW_RUN:
                run_id = int(rng.integers(2**62))
                for name, grid in grids.items():
                    new_run(grid, run_id)
                    start(index, COIN_OFFSET if name == COINS else 0)
                    (reply,) = grid.send_and_receive([Message(FLOWER(protocol.setup_request(setup)), dst_node_id=NODE, message_type=protocol.SETUP)])
                    if name != "base":
                        _compare(result, name, index, protocol.SETUP, observe(reply, grid.root), seen_setup)
                    else:
                        seen_setup = observe(reply, grid.root)
                hostile.released = 0
            message_type = MESSAGE_TYPES[int(rng.choice(len(MESSAGE_TYPES), p=WEIGHTS))]
            if hostile.sequential and hostile.next_slot < hostile.released and rng.random() < 0.9:
                message_type = protocol.ANSWER  # mostly a run of one-slot answers after such a release
            content = hostile.content(message_type)
            seen = {}
            for name, grid in grids.items():
                start(index, COIN_OFFSET if name == COINS else 0)
                (reply,) = grid.send_and_receive([Message(_copy_content(content), dst_node_id=NODE, message_type=message_type)])
                seen[name] = observe(reply, grid.root)
                for problem in outbound_problems(reply):
                    result.add(Finding(name, index, message_type, problem))
                if name == "base" and message_type == protocol.RELEASE and not reply.has_error() and protocol.read_refusal(reply.content) is None:
                    hostile.released_slots(len(protocol.read_release_reply(reply.content).slots))
            base_view = seen.pop("base")
            result.served += base_view[0].get("meta.status") != "refused"
            for name, view in seen.items():
                result.sent[name] += 1
                _compare(result, name, index, message_type, view, base_view)
            if progress is not None:
                progress(1)
    return result


def _compare(result: Campaign, name: str, index: int, message_type: str, view: tuple[dict, dict], base: tuple[dict, dict]) -> None:
    """Add a finding for each public field that differs from the base device's, and for payloads of other fields."""
    for difference in _differences(base[0], view[0]):
        result.add(Finding(name, index, message_type, difference))
    if sorted(base[1]) != sorted(view[1]):
        result.add(Finding(name, index, message_type, f"payload fields {sorted(base[1])} vs {sorted(view[1])}"))


def new_run(grid: Any, run_id: int) -> None:
    """Start run ``run_id`` on ``grid``'s node: a fresh Flower context (no session), the same node config."""
    from flwr.app import Context

    old = grid.node_ctx[NODE]
    grid.node_ctx[NODE] = Context(run_id=run_id, node_id=NODE, node_config=old.node_config, state=RecordDict(), run_config=old.run_config)


def _copy_content(content: RecordDict) -> RecordDict:
    import copy

    return copy.deepcopy(content)


def report(result: Campaign) -> str:
    """The campaign in a few lines: messages per pair, findings (the first few named)."""
    lines = [f"pairs: {', '.join(f'{k} {v}' for k, v in result.sent.items())} messages; {result.served} served on the base device"]
    lines.append(f"findings: {result.count}")
    lines += [f"  {finding}" for finding in result.findings]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run a campaign per memoize setting; exit 1 on any finding."""
    from rich.progress import Progress

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="hostile messages per campaign (each goes to every pair)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memoize", choices=["on", "off", "both"], default="both")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="ldpfed-noninterference-") as work:
        for memoize in {"on": [True], "off": [False], "both": [True, False]}[args.memoize]:
            started = time.perf_counter()
            grids = devices(Path(work) / f"memoize-{memoize}", memoize, Path(work) / "cache")
            with Progress(transient=True) as bar:
                task = bar.add_task(f"memoize {'on' if memoize else 'off'}", total=args.messages)
                result = campaign(grids, args.messages, args.seed, lambda n: bar.advance(task, n))
            print(f"\nmemoize {'on' if memoize else 'off'}: {args.messages} messages to {len(grids)} devices in {time.perf_counter() - started:.0f} s")
            print(report(result))
            failed |= result.count > 0
    return int(failed)


if __name__ == "__main__":
    raise SystemExit(main())
