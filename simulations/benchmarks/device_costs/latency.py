"""Job 1 of the device-cost benchmark: latency per release (encode, clip + noise, durable charge, whole message)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import numpy as np

from ldpfed.simulations.benchmarks.device_costs.device import NODE_ID, Device, send
from ldpfed.simulations.benchmarks.device_costs.progress import Progress, stats

TOKEN_BLOCK = (16, 384)


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
    from ldpfed.fed.device.entropy import generator

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
    from ldpfed.fed.device.policy import DevicePolicy
    from ldpfed.fed.privacy.ledger import Budget
    from ldpfed.fed.privacy.store import LedgerStore

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
            ledger.charge(events, record, user_events)  # checks the policy's event cap
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

    from ldpfed.clients.app import FLOWER
    from ldpfed.fed import protocol

    request = FLOWER(protocol.release_request([0], device.plan.train.params(), 1, device.plan.train_sampling.spec))

    def message() -> tuple[float, Any, Any]:
        started = time.perf_counter()
        reply = send(device.grid, Message(request, dst_node_id=NODE_ID, message_type=protocol.TRAIN))
        elapsed = time.perf_counter() - started
        return elapsed, reply, protocol.read_release_reply(reply.content)

    def released() -> int:  # read on the device by its owner: the server cannot tell a memoized repeat
        from ldpfed.clients.app import owner_ledgers

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
    from ldpfed.fed.randomizers import make_randomizer

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
    from ldpfed.fed.randomizers import make_randomizer

    randomizer = make_randomizer(randomizer_params)
    x = np.random.default_rng(0).normal(size=TOKEN_BLOCK).astype(np.float32)
    return {"shape": list(TOKEN_BLOCK), "mechanism": randomizer.params(), "clip_noise": stats(time_clip_noise(randomizer, x, 2, n))}
