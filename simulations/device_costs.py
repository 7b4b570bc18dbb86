"""What it costs a device (issue 9 item 7): latency per release, SuperNode memory, bytes per report,
time to first report.

Everything runs the real device code path on this machine, outside the simulation engine
(``fed.entropy.in_simulation_engine()`` is false, so noise comes from the OS through the
device sampler and the ledger is the durable on-disk store, ``synchronous=FULL``):

1. **Latency per release** (median and p95 over ``--releases`` fresh releases), for the
   default device mechanism (Gaussian, the run's defaults: clip 3, epsilon 8, MiniLM projected
   to 16 dimensions) and for a full-dimension release (no projection: 384 dimensions):

   - *encode*: MiniLM (and the shipped projection) on one sentence of the device's data;
   - *clip + noise*: the randomizer's release of one record, with the fresh OS-keyed generator
     a release draws from (``fed.entropy.generator``);
   - *durable charge*: one ledger transaction of the node's store as a release message makes it
     (read the device's ledger, check, charge, log the step, store the memo, commit with fsync),
     and the commit alone;
   - *train message*: the whole ``train`` message for one record as the ClientApp serves it
     (device node config: the owner's policy, state folder and data), in a warm process;
   - *encode + message*: what a fresh sentence costs end to end (the ClientApp encodes a
     device's data once, at setup; a release reads the stored encoding).

   Token-level DP is not served by devices (it is a simulation study,
   ``simulations.token_vs_latent``); the noise for a 16 x 384 block of token vectors is timed
   as a pointer to what it would cost.
2. **Bytes per report**: the reply carrying one report, as Flower 1.41 sends it: the raw arrays,
   the serialized Flower objects (Message, RecordDict, records, arrays), and the protobuf
   bodies of the HTTP requests a SuperNode makes to push it (PushMessages and one PushObject
   per object); HTTP headers and TLS framing are not counted.
3. **With ``--supernode``**: a real SuperLink (``simulations.flower_runner``; by default the
   documented deployment: TLS, SuperNode authentication, a signed app from the registry) starts
   a run and waits; then one ``flower-supernode`` hosting one user with MiniLM is launched, with
   the Flower settings a device runs with (``simulations.commands.device.SUPERNODE_ENV``), and
   measured. Before the launch the owner encodes the device's data once, as the documented
   procedure does (``ldpfed device encode``, timed on its own; ``--no-device-encode`` leaves it
   to setup). Then: the peak memory (VmHWM, VmRSS and PSS from /proc) of the SuperNode process and of
   every process it spawns (Flower 1.41 starts ``flower-superexec``, which starts a new
   ``flwr-clientapp`` process for every message), the time from launch to the first report the
   SuperLink holds (its stages read from the SuperNode's log), and each train message's wall
   time on the SuperNode.

Run (about 1 minute without ``--supernode``, 5 with it, on 2 cores; the README's figures come
from this command, ``--torch-threads 1`` because another job held one of the two cores)::

    python -m simulations.device_costs --supernode --torch-threads 1 --out simulations/reports/device_costs/after_perf.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = "generated:200"
DEFAULT_PUBLIC = "generated:200"
TOKEN_BLOCK = (16, 384)
POLICY = 'epsilon_sentence = 8.0\nepsilon_user = inf\nlabels = "public"\n'
"""The owner's policy the benchmark device runs under: the README's example policy (epsilon 8 per
sentence, public labels) without a user-level cap, so that every release of the benchmark is
granted; every other key keeps its strict default (memoize on, evaluation none)."""
NODE_ID = 1000  # simulations.local_grid numbers its nodes from 1000
MB = 2**20


# -- progress ------------------------------------------------------------------------------------
class Progress:
    """Stage lines on stderr (and a counter on a terminal); silent when ``quiet``."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(f"device-costs [{time.monotonic() - self.started:6.1f}s] {text}", file=sys.stderr, flush=True)

    def count(self, text: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.tty:
            end = "\n" if done == total else ""
            print(f"\rdevice-costs [{time.monotonic() - self.started:6.1f}s] {text}: {done}/{total}", end=end, file=sys.stderr, flush=True)
        elif done == total or done % max(1, total // 5) == 0:
            self.say(f"{text}: {done}/{total}")


def stats(seconds: list[float]) -> dict[str, Any]:
    """Median, p95, mean, min and max in milliseconds, and the number of samples."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if not len(ms):
        return {"n": 0}
    return {
        "n": int(len(ms)),
        "median_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
        "mean_ms": float(ms.mean()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
    }


# -- an in-process device ----------------------------------------------------------------------------
@dataclass
class Device:
    """The ClientApp running as a device (node config: policy, state folder, data), set up."""

    label: str
    config: Any  # fed.config.RunConfig, the server's run options
    grid: Any  # simulations.local_grid.LocalGrid with engine=False
    plan: Any  # the server's fed.plan.PrivacyPlan
    assets: Any  # fed.assets.Assets: the device's encoder and projection
    texts: list[str]
    state_dir: Path
    setup_seconds: float
    num_labels: int
    durable: bool
    sampler: str


def make_device(work: Path, label: str, data: str, public: str, dim: int, labels: str = "public") -> Device:
    """Build the server's bundle and a one-user device that has answered its setup (``labels``: the
    run's and the owner's policy's label channel)."""
    from flwr.app import Message

    from clients import protocol
    from clients.app import app as client_app
    from fed.assets import build_bundle, load_assets, load_public, unpack
    from fed.config import RunConfig
    from fed.device_state import init_state
    from fed.loaders import load_dataset
    from fed.plan import make_plan
    from fed.site import Site
    from simulations.local_grid import LocalGrid

    server_cache = work / "server-cache"
    config = RunConfig(
        data=data, public=public if dim else "none", users=1, nodes=1, dim=dim,
        cache_dir=str(server_cache), nonprivate_baseline=False, labels=labels,
    )
    bundle = build_bundle(config, None if config.public == "none" else load_public(config), server_cache)
    folder = work / label
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.toml").write_text(POLICY.replace('labels = "public"', f"labels = {json.dumps(labels)}"))
    # One encoding cache for the benchmark's devices (the second setting's setup reads the first's encodings).
    node_config = {
        "data": data, "state-dir": str(init_state(folder / "state")), "policy": str(folder / "policy.toml"), "cache-dir": str(work / "device-cache"),
    }
    grid = LocalGrid(client_app, 1, config.to_mapping(), engine=False, node_configs=[node_config])
    started = time.perf_counter()
    reply = _send(grid, Message(protocol.setup_request(bundle), dst_node_id=NODE_ID, message_type=protocol.SETUP))
    setup_seconds = time.perf_counter() - started
    info = protocol.read_setup_reply(reply.content)
    plan = make_plan(config, info.num_labels, max(max(info.query_counts, default=1), 1))  # as the server plans
    context = grid.node_ctx[NODE_ID]
    site = Site.resolve(context.node_config, RunConfig.from_mapping(context.run_config), context.run_id, NODE_ID)
    if site.simulation or not site.store().durable:
        raise RuntimeError("the benchmark device runs as the simulation engine; it must run as a device")
    assets = load_assets(unpack(bundle, work / label / "bench-cache"))
    return Device(
        label, config, grid, plan, assets, list(load_dataset(data, "train").texts), folder / "state",
        setup_seconds, info.num_labels, True, str(getattr(info, "sampler", "") or _sampler_name()),
    )


def _send(grid: Any, message: Any) -> Any:
    from clients import protocol

    (reply,) = grid.send_and_receive([message])
    if reply.has_error():
        raise RuntimeError(f"the ClientApp failed: {reply.error.reason[-2000:]}")
    refused = protocol.read_refusal(reply.content)
    if refused is not None:
        raise RuntimeError(f"the device refused {message.metadata.message_type}: {refused}")
    return reply


def _sampler_name() -> str:
    """The sampler a device release draws its noise from (fed.noise when present)."""
    from fed.entropy import generator

    rng = generator(None, (0,))
    try:
        from fed.noise import sampler
    except ImportError:
        return f"numpy {type(rng.bit_generator).__name__} (OS-seeded)"
    return sampler(rng)


# -- 1. latency -------------------------------------------------------------------------------------
def time_encode(device: Device, n: int, progress: Progress) -> dict[str, Any]:
    """One sentence at a time through the device's encoder (and projection); the first call loads MiniLM."""
    encoder, projection = device.assets.encoder, device.assets.projection

    def encode(text: str) -> np.ndarray:
        x = encoder.encode([text])
        return projection.apply(x) if projection is not None else x

    started = time.perf_counter()
    encode("a warm-up sentence loads the model")
    first = time.perf_counter() - started
    seconds = []
    texts = [device.texts[i % len(device.texts)] for i in range(n)]
    for i, text in enumerate(texts):
        started = time.perf_counter()
        encode(text)
        seconds.append(time.perf_counter() - started)
        progress.count(f"{device.label}: encode one sentence", i + 1, n)
    tokens = _mean_tokens(encoder, texts)
    return {"seconds": seconds, "first_call_s": first, "mean_word_pieces": tokens}


def _mean_tokens(encoder: Any, texts: list[str]) -> float | None:
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(encoder._source, local_files_only=True)
    except Exception:  # noqa: BLE001 - only a description of the sentences
        return None
    return float(np.mean([len(tokenizer(text)["input_ids"]) for text in texts]))


def time_clip_noise(randomizer: Any, x: np.ndarray, num_labels: int, n: int) -> list[float]:
    """The randomizer's release of one record, with the fresh generator each release draws (device: OS-keyed)."""
    from fed.entropy import generator

    labels = np.zeros(len(x), dtype=np.int64)
    randomizer.release_with_labels(x, labels, num_labels, generator(None, (0, -1)))  # warm-up: one-time set-up of the sampler
    seconds = []
    for i in range(n):
        started = time.perf_counter()
        rng = generator(None, (0, i))
        randomizer.release_with_labels(x, labels, num_labels, rng)
        seconds.append(time.perf_counter() - started)
    return seconds


class _TimedConnection:
    """A sqlite3 connection that times its COMMIT statements."""

    def __init__(self, connection: Any, commits: list[float]) -> None:
        self._connection, self._commits = connection, commits

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.strip().upper() != "COMMIT":
            return self._connection.execute(sql, *args)
        started = time.perf_counter()
        try:
            return self._connection.execute(sql, *args)
        finally:
            self._commits.append(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def time_charge(device: Device, randomizer: Any, n: int, report_dim: int) -> dict[str, list[float]]:
    """Ledger transactions as a one-record release makes them, on a durable store of the same size.

    Each: read the device's ledger (one owner, the device's record count), find a record with
    budget left, check the user-level budget, charge, log the step, store the memoized report,
    commit (WAL, synchronous=FULL: fsync before the reply may leave).
    """
    from fed.policy import DevicePolicy
    from fed.privacy.ledger import Budget
    from fed.privacy.store import LedgerStore

    commits: list[float] = []

    class TimedStore(LedgerStore):
        def _connect(self) -> Any:  # noqa: ANN401 - a connection proxy
            return _TimedConnection(super()._connect(), commits)

    policy = DevicePolicy.load(device.state_dir.parent / "policy.toml")
    budget = Budget(policy.epsilon_sentence, policy.delta, policy.epsilon_user)
    n_train = len(device.texts)
    dev_records = max(1, n_train // 10)
    keys = [hashlib.sha256(f"record {i}".encode()).hexdigest() for i in range(n_train + dev_records)]
    store = TimedStore(device.state_dir.parent / "charge-bench" / "ledger.sqlite", durable=True)
    commits.clear()
    events = [randomizer.event]
    memo_key = json.dumps({"randomizer": randomizer.params(), "labels": {"kind": "public"}}, sort_keys=True)
    report = np.zeros(report_dim, dtype=np.float32)
    seconds = []
    for _ in range(n):
        started = time.perf_counter()
        with store.transaction() as tx:
            ledger = tx.ledger("device", keys, budget, policy.max_events)
            left = ledger.remaining(events, np.arange(n_train))
            if not len(left):
                raise RuntimeError("the charge benchmark ran out of records; give a larger --data")
            record = left[:1]
            user_events = {randomizer.user_event: 1}
            if not ledger.user_can_afford(user_events):
                raise RuntimeError("the benchmark policy's user-level budget is spent")
            ledger.admits([*events, *user_events])
            ledger.charge(events, record, user_events)
            ledger.log_step("train", "all", randomizer.event)
            tx.remember("device", keys[int(record[0])], memo_key, report, None)
        seconds.append(time.perf_counter() - started)
    if len(commits) != n:
        raise RuntimeError(f"timed {len(commits)} commits for {n} transactions")
    return {"transaction": seconds, "commit": commits}


def time_messages(device: Device, n: int, progress: Progress) -> dict[str, Any]:
    """Whole train messages asking the device's user for one record, until ``n`` fresh releases.

    A record already released under the same randomizer is answered from its memo (free, no
    release): such messages are counted, not timed as releases. The first message after setup
    (cold caches in this process) is reported on its own.
    """
    from flwr.app import Message

    from clients import protocol

    request = protocol.release_request([0], device.plan.train.params(), 1, device.plan.train_sampling.spec)

    def message() -> tuple[float, Any, Any]:
        started = time.perf_counter()
        reply = _send(device.grid, Message(request, dst_node_id=NODE_ID, message_type=protocol.TRAIN))
        elapsed = time.perf_counter() - started
        return elapsed, reply, protocol.read_release_reply(reply.content)

    def released() -> int:  # read on the device by its owner: the server cannot tell a memoized repeat
        from clients.app import owner_ledgers

        return owner_ledgers(device.grid.node_ctx[NODE_ID])[0].releases()

    first, _, data = message()
    releases = released()
    seconds, memo_hits, last = [], 0, None
    for _ in range(4 * n):
        if len(seconds) == n:
            break
        elapsed, reply, data = message()
        if data.refusals:
            raise RuntimeError(f"the device refused the release: {data.refusals}")
        now = released()
        if now == releases:
            memo_hits += 1
        else:
            seconds.append(elapsed)
            last = (reply, data)
            progress.count(f"{device.label}: train messages", len(seconds), n)
        releases = now
    if len(seconds) < n:
        raise RuntimeError(f"only {len(seconds)} fresh releases in {4 * n} messages; give a larger --data")
    return {"seconds": seconds, "first_s": first, "memo_hits": memo_hits, "reply": last[0], "data": last[1]}


def measure_latency(device: Device, n: int, progress: Progress) -> dict[str, Any]:
    """Every latency figure of one device setting."""
    from fed.randomizers import make_randomizer

    randomizer = make_randomizer(device.plan.train.params())
    progress.say(f"{device.label}: encoding {n} sentences one at a time")
    encode = time_encode(device, n, progress)
    x = _one_record(device)
    progress.say(f"{device.label}: clip + noise, durable charge")
    clip_noise = time_clip_noise(randomizer, x, device.num_labels, n)
    charge = time_charge(device, randomizer, n, randomizer.preprocess(x).shape[1])
    progress.say(f"{device.label}: {n} train messages through the ClientApp")
    messages = time_messages(device, n, progress)
    per_release = [a + b for a, b in zip(encode["seconds"], messages["seconds"])]
    return {
        "label": device.label,
        "mechanism": randomizer.params(),
        "report_dim": int(messages["data"].reports.shape[1]),
        "device_sampler": device.sampler,
        "setup_message_s": device.setup_seconds,
        "encoder_first_call_s": encode["first_call_s"],
        "mean_word_pieces": encode["mean_word_pieces"],
        "first_train_message_s": messages["first_s"],
        "memo_hits_skipped": messages["memo_hits"],
        "parts": {
            "encode": stats(encode["seconds"]),
            "clip_noise": stats(clip_noise),
            "charge": stats(charge["transaction"]),
            "commit": stats(charge["commit"]),
            "message": stats(messages["seconds"]),
            "encode_plus_message": stats(per_release),
        },
        "_reply": messages["reply"],
    }


def _one_record(device: Device) -> np.ndarray:
    """One clean record as the device holds it (encoding, then the shipped projection)."""
    x = device.assets.encoder.encode([device.texts[0]])
    return (device.assets.projection.apply(x) if device.assets.projection is not None else x).astype(np.float32)


def measure_token_block(randomizer_params: dict[str, Any], n: int) -> dict[str, Any]:
    """clip + noise of a 16 x 384 block (each row clipped, noise on every coordinate): the token-level shape."""
    from fed.randomizers import make_randomizer

    randomizer = make_randomizer(randomizer_params)
    x = np.random.default_rng(0).normal(size=TOKEN_BLOCK).astype(np.float32)
    return {"shape": list(TOKEN_BLOCK), "mechanism": randomizer.params(), "clip_noise": stats(time_clip_noise(randomizer, x, 2, n))}


# -- 2. bytes per report -------------------------------------------------------------------------------
def measure_bytes(reply: Any) -> dict[str, Any]:
    """Sizes of a release reply carrying one report, as a Flower 1.41 SuperNode pushes it."""
    from flwr.app.message.message import remove_content_from_message
    from flwr.common.serde import message_to_proto
    from flwr.proto.fleet_pb2 import PushMessagesRequest  # pylint: disable=no-name-in-module
    from flwr.proto.message_pb2 import PushObjectRequest  # pylint: disable=no-name-in-module
    from flwr.proto.node_pb2 import Node  # pylint: disable=no-name-in-module
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree

    record = reply.content.array_records["reports"]
    arrays = {}
    for name, array in record.items():
        values = array.numpy()
        arrays[name] = {"dtype": str(values.dtype), "shape": list(values.shape), "raw_bytes": int(values.nbytes)}
    objects = get_all_nested_objects(reply)
    kinds: dict[str, dict[str, int]] = {}
    for obj in objects.values():
        entry = kinds.setdefault(type(obj).__name__, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += len(obj.deflate())
    node = Node(node_id=2**63 - 1)
    session = "0" * 36
    push_messages = PushMessagesRequest(
        node=node, messages_list=[message_to_proto(remove_content_from_message(reply))],
        message_object_trees=[get_object_tree(reply)], clientapp_runtime_list=[0.5],
    ).ByteSize()
    push_objects = [
        PushObjectRequest(node=node, run_id=2**63 - 1, object_id=object_id, object_content=obj.deflate(), session_id=session).ByteSize()
        for object_id, obj in objects.items()
    ]
    report = record["reports"].numpy()
    return {
        "reports_per_message": int(len(report)),
        "report_raw_bytes": int(report[0].nbytes) if len(report) else 0,
        "arrays": arrays,
        "arrays_raw_bytes": int(sum(a["raw_bytes"] for a in arrays.values())),
        "flower_objects": kinds,
        "flower_objects_bytes": int(sum(k["bytes"] for k in kinds.values())),
        "protobuf_push_messages_bytes": int(push_messages),
        "protobuf_push_object_bytes": int(sum(push_objects)),
        "protobuf_total_bytes": int(push_messages + sum(push_objects)),
        "http_requests": 1 + len(push_objects),
        "meta_json_bytes": int(sum(len(str(v)) for v in reply.content.config_records["meta"].values())),
    }


# -- 3. a real SuperNode ---------------------------------------------------------------------------------
def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(tree.get(current, []))
    return out


def _status_kb(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            values[key] = int(rest.split()[0])
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                values["Pss"] = int(line.split()[1])
    except OSError:
        pass
    return values


def _kind(pid: int) -> str:
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    for name in ("flwr-clientapp", "flower-superexec", "flower-supernode"):
        if name in cmd:
            return name
    return cmd.split(" ", 1)[0][-40:] or "?"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class NodeWatch:
    """Samples the memory of a SuperNode's process tree and timestamps the lines of its log."""

    STAGES = {
        "connected": "SuperNode ID:",
        "setup_received": "Receiving: query.setup message",
        "setup_answered": "Sending: query.setup message",
        "train_received": "Receiving: train message",
    }

    def __init__(self, pid: int, log: Path, started: float) -> None:
        self.pid, self.log, self.started = pid, log, started
        self.offset = 0
        self.partial = b""
        self.lines: list[tuple[float, str]] = []
        self.processes: dict[int, dict[str, Any]] = {}
        self.peak_rss_kb = self.peak_pss_kb = 0
        self.last_received = "start"

    def poll(self) -> None:
        now = time.perf_counter() - self.started
        self._read_log(now)
        rss = pss = 0
        for pid in descendants(self.pid):
            try:
                values = _status_kb(pid)
                if "VmHWM" not in values:  # a zombie or kernel thread: no memory of its own
                    continue
                if pid not in self.processes:
                    self.processes[pid] = {"kind": _kind(pid), "first_seen_s": now, "message": self.last_received}
            except (OSError, ValueError):
                continue
            entry = self.processes[pid]
            entry["VmHWM_kB"] = max(entry.get("VmHWM_kB", 0), values.get("VmHWM", 0))
            entry["Pss_peak_kB"] = max(entry.get("Pss_peak_kB", 0), values.get("Pss", 0))
            entry["last_seen_s"] = now
            rss += values.get("VmRSS", 0)
            pss += values.get("Pss", 0)
        self.peak_rss_kb, self.peak_pss_kb = max(self.peak_rss_kb, rss), max(self.peak_pss_kb, pss)

    def _read_log(self, now: float) -> None:
        try:
            with open(self.log, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        self.offset += len(chunk)
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            self.lines.append((now, line))
            if "Receiving:" in line:
                self.last_received = line.split("Receiving:", 1)[1].split("(")[0].strip()

    def stage_times(self) -> dict[str, float | None]:
        """When each stage's log line appeared (seconds after launch), and the first report sent."""
        found: dict[str, float | None] = {}
        for stage, marker in self.STAGES.items():
            found[stage] = next((t for t, line in self.lines if marker in line), None)
        found["first_report_sent"] = self._sent_after("Sending: train message")
        return found

    def _sent_after(self, marker: str, start: int = 0) -> float | None:
        sending = False
        for t, line in self.lines[start:]:
            if marker in line:
                sending = True
            elif sending and "Sent successfully" in line:
                return t
        return None

    def message_walls(self, message_type: str) -> list[float]:
        """Seconds from 'Received successfully' of each ``message_type`` message to its reply being sent."""
        walls, received = [], None
        current = None
        for t, line in self.lines:
            if "Receiving:" in line:
                current = line.split("Receiving:", 1)[1].split("(")[0].strip()
            elif "Received successfully" in line and current == f"{message_type} message":
                received = t
            elif f"Sending: {message_type} message" in line and received is not None:
                walls.append(t - received)
                received = None
        return walls


def measure_supernode(
    work: Path, data: str, public: str, rounds: int, secure: bool, timeout: float, progress: Progress, encode: bool = True
) -> dict[str, Any]:
    """Launch one flower-supernode against a run that waits for it; measure memory and time to first report.

    With ``encode`` the owner first encodes the device's data, as the documented procedure does before
    any run (``ldpfed device encode``, timed on its own): setup then runs no encoder.
    """
    from fed.config import RunConfig
    from simulations.commands.device import SUPERNODE_ENV, build_fab, init_device, node_config_string, sign_fab, supernode_command
    from simulations.commands.superlink import init_superlink, publish_app
    from simulations.flower_runner import APP_DIR, BIN, Secure, cluster, free_port, run_status, start_run

    work.mkdir(parents=True, exist_ok=True)
    device = init_device(work / "device")
    device.policy.write_text(POLICY)
    node_config = node_config_string(device, data)
    app, secure_cluster = str(APP_DIR), None
    if secure:
        link = init_superlink(work / "superlink", node_keys=[device.node_public_key])
        fab = build_fab(APP_DIR)
        app = publish_app(link, fab, [sign_fab(fab, device.signing_key)])
        secure_cluster = Secure(link, [])
    config = RunConfig(
        data=data, public=public, users=1, nodes=1, rounds=rounds, users_per_round=0, records_per_user_round=1,
        nonprivate_baseline=False, cache_dir=str(work / "server-cache"), out=str(work / "run"),
    )
    result: dict[str, Any] = {"secure": secure, "rounds": rounds, "data": data, "device_encode_s": None}
    if encode:
        progress.say("the owner encodes the device's data once, before the run (ldpfed device encode)")
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "simulations.cli", "device", "encode", str(device.root), "--data", data],
            cwd=REPO, check=True, capture_output=True, timeout=timeout,
        )
        result["device_encode_s"] = time.perf_counter() - started
    progress.say("importing the ClientApp in fresh interpreters (what every flwr-clientapp process pays first)")
    result["fresh_process_import_s"] = [_time_fresh_import() for _ in range(3)]
    with cluster(work / "flower", simulation=False, node_configs=[], secure=secure_cluster) as running:
        address = _superlink_address(running.env)
        log = work / "flwr-run.log"
        progress.say("SuperLink up; starting a run and waiting for its ServerApp to wait for nodes")
        run = start_run(running, config.to_mapping(), None, log, app=app)
        _wait_for_idle_serverapp(running.processes[0].pid, run, timeout)
        if secure:
            command = supernode_command(device, address, link.ca_cert, node_config)
            command[0] = str(BIN / command[0])
        else:
            command = [str(BIN / "flower-supernode"), "--insecure", "--superlink", address, "--node-config", node_config]
        node_log = running.logs / "supernode-bench.log"
        progress.say("launching flower-supernode (MiniLM, one user)")
        started = time.perf_counter()
        process = subprocess.Popen(
            command + ["--port", str(free_port())], env={**running.env, **SUPERNODE_ENV}, cwd=work, stdout=open(node_log, "wb"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        running.processes.append(process)  # stopped with the cluster
        watch = NodeWatch(process.pid, node_log, started)
        deadline = time.monotonic() + timeout
        first_report = None
        while run.poll() is None and time.monotonic() < deadline:
            watch.poll()
            if first_report is None and watch.stage_times()["first_report_sent"] is not None:
                first_report = watch.stage_times()["first_report_sent"]
                progress.say(f"first report after {first_report:.1f}s; the run goes on ({rounds} rounds)")
            if process.poll() is not None:
                raise RuntimeError(f"flower-supernode exited with {process.returncode}: {node_log.read_text()[-3000:]}")
            time.sleep(0.05)
        watch.poll()
        if run.poll() is None:
            raise TimeoutError(f"the run did not finish within {timeout}s; see {log}")
        status = run_status(running, log)
        result["run_status"] = status
        if status != "finished:completed":
            raise RuntimeError(f"the run ended {status}: {log.read_text(errors='replace')[-3000:]}")
    result["time_to_first_report"] = watch.stage_times()
    result["train_message_walls_s"] = watch.message_walls("train")
    result["train_message_wall"] = stats(result["train_message_walls_s"])
    result["memory"] = _memory_summary(watch)
    metrics = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    result["reports_received"] = [m.get("reports_received") for m in metrics]
    return result


def _time_fresh_import() -> float:
    """Seconds a new Python process takes to import the ClientApp module (flwr, torch, the app)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import clients.app"], cwd=REPO, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - started


def _memory_summary(watch: NodeWatch) -> dict[str, Any]:
    processes = [
        {"pid": pid, **{k: v for k, v in entry.items()}} for pid, entry in sorted(watch.processes.items(), key=lambda e: e[1]["first_seen_s"])
    ]
    peak = {}
    for entry in processes:
        kind = entry["kind"]
        if entry.get("VmHWM_kB", 0) > peak.get(kind, {}).get("VmHWM_kB", -1):
            peak[kind] = {"VmHWM_kB": entry.get("VmHWM_kB", 0), "message": entry["message"], "pid": entry["pid"]}
    return {
        "processes": processes,
        "peak_by_kind": peak,
        "sum_of_peaks_kB": int(sum(p["VmHWM_kB"] for p in peak.values())),
        "peak_concurrent_rss_kB": int(watch.peak_rss_kb),
        "peak_concurrent_pss_kB": int(watch.peak_pss_kb),
        "clientapp_processes": sum(p["kind"] == "flwr-clientapp" for p in processes),
    }


def _superlink_address(env: dict[str, str]) -> str:
    config = tomllib.loads((Path(env["FLWR_HOME"]) / "config.toml").read_text())
    return str(config["superlink"]["ldpfed"]["address"])


def _wait_for_idle_serverapp(superlink_pid: int, run: subprocess.Popen, timeout: float, quiet_for: float = 3.0) -> None:
    """Until the run's flwr-serverapp has built its bundle and only polls for nodes (CPU-idle for ``quiet_for`` s)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise RuntimeError("the run ended before any node connected")
        apps = [pid for pid in descendants(superlink_pid) if _safe_kind(pid) == "flwr-serverapp"]
        cpu = sum(_safe_cpu(pid) for pid in apps) if apps else None
        now = time.monotonic()
        if cpu is None or last is None or cpu - last > 0.05 * (now - since):
            last, since = cpu, now
        elif now - since >= quiet_for:
            return
        time.sleep(0.5)
    raise TimeoutError("the ServerApp did not start waiting for nodes in time")


def _safe_kind(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
    return "flwr-serverapp" if "flwr-serverapp" in cmd else ""


def _safe_cpu(pid: int) -> float:
    try:
        return _cpu_seconds(pid)
    except (OSError, ValueError, IndexError):
        return 0.0


# -- the whole benchmark ------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import flwr
    import torch

    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        platform.processor(),
    )
    mem = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), 0)
    return {
        "cpus": os.cpu_count(),
        "load_average_at_start": Path("/proc/loadavg").read_text().split()[:3],
        "cpu_pressure_at_start": _cpu_pressure(),
        "cpu_model": model,
        "memory_gib": round(mem / 2**20, 1),
        "gpu": bool(torch.cuda.is_available()),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "flwr": flwr.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "git": _git_state(),
    }


def _cpu_pressure() -> str:
    """The kernel's CPU pressure line ('some avg10=...'): how often tasks waited for a CPU (other load)."""
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def _git_state() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' (uncommitted changes)' if dirty else ''}"


def _filesystem(path: Path) -> str:
    """The file system type holding ``path`` (the ledger's fsync depends on it)."""
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and str(path.resolve()).startswith(parts[1]) and len(parts[1]) > len(best):
            best, kind = parts[1], parts[2]
    return kind


def run_benchmark(
    work: Path, data: str = DEFAULT_DATA, public: str = DEFAULT_PUBLIC, releases: int = 50, full_dim: bool = True,
    supernode: bool = False, rounds: int = 5, secure: bool = True, timeout: float = 900.0, progress: Progress | None = None,
    token_block_releases: int | None = None, device_encode: bool = True,
) -> dict[str, Any]:
    """Every figure, as a JSON-ready dict (see the module docstring); the token block is timed
    ``token_block_releases`` times (default: ``releases``, at most 10)."""
    progress = progress or Progress(quiet=True)
    from fed.entropy import in_simulation_engine
    from fed.threads import limit_blas_threads

    limit_blas_threads()  # as in the ClientApp's process
    if in_simulation_engine():
        raise RuntimeError("the benchmark must run outside the simulation engine (a device)")
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": {
            "data": data, "public": public, "releases": releases, "policy": POLICY,
            "state_filesystem": _filesystem(work), "in_simulation_engine": False,
        },
        "latency": {},
    }
    settings = [("default", 16)] + ([("full-dimension", 0)] if full_dim else [])
    for label, dim in settings:
        progress.say(f"{label}: building the server's bundle and setting up the device")
        device = make_device(work / "in-process", label, data, public, dim)
        results["latency"][label] = measure_latency(device, releases, progress)
    results["settings"]["durable_ledger"] = True
    full = results["latency"].get("full-dimension", results["latency"]["default"])
    progress.say(f"clip + noise of a {TOKEN_BLOCK[0]} x {TOKEN_BLOCK[1]} block")
    results["token_block"] = measure_token_block(full["mechanism"], token_block_releases or min(releases, 10))
    results["bytes"] = {label: measure_bytes(entry.pop("_reply")) for label, entry in results["latency"].items()}
    if supernode:
        results["supernode"] = measure_supernode(work / "supernode", data, public, rounds, secure, timeout, progress, device_encode)
    results["machine"]["load_average_at_end"] = Path("/proc/loadavg").read_text().split()[:3]
    results["machine"]["cpu_pressure_at_end"] = _cpu_pressure()
    return results


def table(results: dict[str, Any]) -> str:
    """The figures as a plain-text table."""
    m = results["machine"]
    latency = results["latency"]
    labels = list(latency)
    lines = [
        f"What it costs a device: {m['cpus']} CPUs ({m['cpu_model']}), {'GPU' if m['gpu'] else 'CPU only'}, "
        f"torch threads {m['torch_threads']}, flwr {m['flwr']}, tree {m['git']}",
        f"device data {results['settings']['data']}, ledger on {results['settings']['state_filesystem']} (synchronous=FULL), "
        f"noise sampler {latency[labels[0]]['device_sampler']}",
        f"load average {' '.join(m['load_average_at_start'])} at start, {' '.join(m.get('load_average_at_end', ['?']))} at end",
        "",
        "per release, median / p95 ms over {} fresh releases".format(latency[labels[0]]["parts"]["message"]["n"]),
    ]
    heads = [f"{name} ({latency[name]['report_dim']} dims)" for name in labels]
    rows = [
        ("encode one sentence (MiniLM{})".format(" + projection" if latency[labels[0]]["report_dim"] != 384 else ""), "encode"),
        ("clip + noise (randomizer release)", "clip_noise"),
        ("durable charge (ledger transaction)", "charge"),
        ("  of which the commit (fsync)", "commit"),
        ("train message, ClientApp in a warm process", "message"),
        ("encode + train message", "encode_plus_message"),
    ]
    width = 46
    lines.append(" " * width + "".join(f"{h:>28}" for h in heads))
    for text, key in rows:
        cells = [latency[name]["parts"][key] for name in labels]
        lines.append(f"{text:<{width}}" + "".join(f"{_ms(c['median_ms'])} / {_ms(c['p95_ms'])}".rjust(28) for c in cells))
    lines.append(f"{'first train message in this process':<{width}}" + "".join(f"{latency[n]['first_train_message_s'] * 1000:>25.0f} ms" for n in labels))
    lines.append(f"{'first encode (loads MiniLM)':<{width}}" + "".join(f"{latency[n]['encoder_first_call_s']:>26.2f} s" for n in labels))
    block = results["token_block"]
    lines.append(
        f"clip + noise of a {block['shape'][0]} x {block['shape'][1]} block (token-level shape; not served by devices): "
        f"{_ms(block['clip_noise']['median_ms'])} / {_ms(block['clip_noise']['p95_ms'])} ms"
    )
    lines.append("")
    for label, b in results["bytes"].items():
        lines.append(
            f"bytes per report ({label}): report {b['report_raw_bytes']} B raw, reply arrays {b['arrays_raw_bytes']} B raw, "
            f"Flower objects {b['flower_objects_bytes']} B, protobuf bodies {b['protobuf_total_bytes']} B in {b['http_requests']} HTTP requests"
        )
    node = results.get("supernode")
    if node:
        mem, ttfr = node["memory"], node["time_to_first_report"]
        peaks = ", ".join(f"{kind} {p['VmHWM_kB'] / 1024:.0f} MiB" for kind, p in mem["peak_by_kind"].items())
        lines += [
            "",
            f"SuperNode hosting one user ({'TLS, authenticated, signed app' if node['secure'] else 'insecure'} loopback, {node['rounds']} round{'s' if node['rounds'] > 1 else ''}):",
            f"  peak RSS (VmHWM): {peaks}; sum {mem['sum_of_peaks_kB'] / 1024:.0f} MiB; "
            f"peak concurrent RSS {mem['peak_concurrent_rss_kB'] / 1024:.0f} MiB, PSS {mem['peak_concurrent_pss_kB'] / 1024:.0f} MiB "
            f"({mem['clientapp_processes']} flwr-clientapp processes, one per message)",
            "  time to first report: {} s after launch (connected {}, setup received {}, setup answered {}, train received {})".format(
                *(_s(ttfr.get(k)) for k in ("first_report_sent", "connected", "setup_received", "setup_answered", "train_received"))
            )
            + (
                f"; before launch the owner encoded the data in {node['device_encode_s']:.1f} s (ldpfed device encode)"
                if node.get("device_encode_s") is not None else "; data not encoded before launch (setup encodes it)"
            ),
            f"  train message on the SuperNode (a new flwr-clientapp process each): "
            f"median {node['train_message_wall'].get('median_ms', float('nan')) / 1000:.2f} s over {node['train_message_wall']['n']}; "
            f"importing the ClientApp in a fresh interpreter: median {float(np.median(node['fresh_process_import_s'])):.1f} s",
        ]
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


@contextmanager
def _workdir(path: str | None) -> Iterator[Path]:
    if path:
        folder = Path(path).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="ldpfed-device-costs-") as temp:
        yield Path(temp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.device_costs",
        description="Measure what a device pays, on this machine, through the real device code path: latency per "
        "release (encode, clip + noise, durable charge, whole message), bytes per report, and with --supernode the "
        "memory of a real SuperNode hosting one user with MiniLM and its time to first report.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--releases", type=int, default=50, help="fresh releases timed per setting (median and p95)")
    parser.add_argument("--data", default=DEFAULT_DATA, help="the device's data (node config): generated:N or a folder of train.tsv/dev.tsv")
    parser.add_argument("--public", default=DEFAULT_PUBLIC, help="the server's public data for the 16-dim projection (server side)")
    parser.add_argument("--no-full-dim", action="store_true", help="skip the full-dimension (384, no projection) setting")
    parser.add_argument("--supernode", action="store_true", help="also start a SuperLink and a real flower-supernode: memory and time to first report")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the SuperNode run (one train message of one record each)")
    parser.add_argument("--insecure", action="store_true", help="SuperNode part without TLS, authentication and app signing")
    parser.add_argument(
        "--no-device-encode", action="store_true",
        help="SuperNode part without the owner's `ldpfed device encode` before the run (setup then encodes the data)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds the SuperNode run may take")
    parser.add_argument("--workdir", default=None, help="keep every file here (none: a temporary folder, removed at the end)")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    parser.add_argument(
        "--torch-threads", type=int, default=None,
        help="torch threads for every encoder here and in the SuperNode's processes (none: torch's own, as on a device)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.releases < 1 or args.rounds < 1:
        parser.error("--releases and --rounds must be at least 1")
    progress = Progress(args.quiet)
    if args.torch_threads is not None:
        if args.torch_threads < 1:
            parser.error("--torch-threads must be at least 1")
        import torch

        os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)  # inherited by the SuperNode and its processes
        torch.set_num_threads(args.torch_threads)
    with _workdir(args.workdir) as work:
        results = run_benchmark(
            work, args.data, args.public, args.releases, not args.no_full_dim, args.supernode, args.rounds,
            not args.insecure, args.timeout, progress, device_encode=not args.no_device_encode,
        )
    results["command"] = "python -m simulations.device_costs " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(results))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1, default=_json_default) + "\n")
        progress.say(f"figures written to {out}")
    return 0


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


if __name__ == "__main__":
    raise SystemExit(main())
