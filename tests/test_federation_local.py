"""The real ClientApp and ServerApp on an in-process Grid: a whole run, the run directory,
hostile server messages, and a canary check of every byte a client sends."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.serde import recorddict_to_proto

from ldpfed.fed import protocol
from ldpfed.clients.app import app as client_app
from ldpfed.fed.runtime.assets import default_cache_dir
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.encoders.cache import encode_cached
from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.data.population import Population
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.strategies.app import app as server_app
from tests.conftest import write_review_folder
from tests.local_grid import LocalGrid, run_local

CANARY = "zqxcanary"


@pytest.fixture(scope="module")
def canary_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small labelled folder dataset in which every sentence carries a canary word."""
    return write_review_folder(tmp_path_factory.mktemp("canary"), {"train": 120, "dev": 40}, CANARY, seed=0)


def _config(data: Path, out: Path, **extra: object) -> dict:
    values = dict(
        data=str(data), public="none", dim=0, clip=1.0, users=4, nodes=2, rounds=2, users_per_round=2,
        epsilon=8.0, out=str(out), inference="remote", save_reports=True,
    )
    values.update(extra)
    return RunSpec.from_mapping(values).to_mapping()


class RecordingGrid(LocalGrid):
    """A LocalGrid that keeps the serialized bytes of every client reply."""

    sent: list[bytes] = []

    def push_messages(self, messages):  # type: ignore[override]
        ids = list(super().push_messages(messages))
        for mid in ids:
            reply = self._replies[mid]
            if not reply.has_error():
                self.sent.append(recorddict_to_proto(reply.content).SerializeToString())
        return ids


def test_whole_run_writes_the_run_directory(canary_data: Path, tmp_path: Path) -> None:
    config = _config(canary_data, tmp_path / "run")
    run_local(server_app, client_app, 2, config)
    out = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "ledgers.json", "summary.json", "privacy_report.md",
                 "accuracy.png", "epsilon.png", "reports.npz"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == []
    assert summary["epsilon_sentence_max"] <= 8.0 + 1e-9
    assert summary["accuracy_nonprivate"] > 0.8
    assert summary["accuracy_remote"] is not None
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    assert sorted(ledgers) == ["0", "1", "2", "3"]
    counts = [np.array(e["counts_per_record"]) for u in ledgers.values() for e in u["events"]]
    assert max(c.max() for c in counts) == 1  # every record released at most once (budget 8, planned once)
    # 2 rounds x 2 users per round reach all 4 users: users without budget are not resampled,
    # so every training record (120) and, with remote inference, every query (40) is released.
    assert summary["releases"] == 160
    report = (out / "privacy_report.md").read_text()
    assert "replace one record" in report and "estimate" in report
    # per-user results (simulation only): one row per user, summing to the pooled counts
    for name in ("users.csv", "groups.md", "accuracy_users.png", "accuracy_epsilon.png"):
        assert (out / name).is_file(), name
    with open(out / "users.csv") as handle:
        users = list(csv.DictReader(handle))
    assert [int(u["user"]) for u in users] == [0, 1, 2, 3]
    correct, queries = (sum(int(u[k]) for u in users) for k in ("correct_private", "queries_evaluated"))
    assert queries == 40 and correct / queries == pytest.approx(summary["accuracy_local"])
    assert sum(int(u["releases"]) for u in users) == summary["releases"]
    assert max(float(u["epsilon_sentence"]) for u in users) == pytest.approx(summary["epsilon_sentence_max"])
    for axis, groups in summary["groups"]["axes"].items():
        assert sum(g["users"] for g in groups.values()) == 4, axis
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["users_evaluated"] == 4 and last["accuracy_user_p10"] <= last["accuracy_user_p50"] <= last["accuracy_user_p90"]
    assert "Per-user and per-group results" in report


def test_no_raw_text_or_clean_vector_leaves_a_client(canary_data: Path, tmp_path: Path) -> None:
    config = _config(canary_data, tmp_path / "run")
    grid = RecordingGrid(client_app, 2, config)
    RecordingGrid.sent = []
    server_app(grid, grid.node_ctx[1000].__class__(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    assert RecordingGrid.sent
    blob = b"".join(RecordingGrid.sent)
    assert CANARY.encode() not in blob and b"terrible" not in blob
    cache = default_cache_dir(RunSpec.from_mapping(config))
    encoder = make_encoder("minilm")
    for split in ("train", "dev"):
        clean = encode_cached(encoder, load_dataset(str(canary_data), split), cache)
        for row in clean[:40]:
            for dtype in (np.float32, np.float64):
                assert row.astype(dtype).tobytes()[:32] not in blob


def _node(canary_data: Path, tmp_path: Path) -> tuple[LocalGrid, dict]:
    config = _config(canary_data, tmp_path / "run")
    grid = LocalGrid(client_app, 1, {**config, "nodes": 1})
    from ldpfed.fed.runtime.assets import build_bundle

    bundle = build_bundle(RunSpec.from_mapping(config), None, Path(tmp_path))
    setup = Message(RecordDict({"assets": ArrayRecord({"bundle": Array(bundle)})}), dst_node_id=1000, message_type="query.setup")
    (reply,) = grid.send_and_receive([setup])
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    return grid, config


@pytest.mark.parametrize(
    "randomizer,records,reason",
    [
        ('{"mechanism": "gaussian", "clip": 1.0, "sigma": NaN}', 1, "not an accepted number"),
        ('{"mechanism": "gaussian", "clip": 1.0, "sigma": 0.01}', 1, "floor"),
        ('{"mechanism": "gaussian", "clip": 1.0, "sigma": 5.0}', 10**9, "records"),
        ("[1, 2]", 1, "JSON object"),
    ],
)
def test_hostile_requests_are_refused_and_nothing_is_spent(
    canary_data: Path, tmp_path: Path, randomizer: str, records: int, reason: str
) -> None:
    grid, _ = _node(canary_data, tmp_path)
    request = ConfigRecord({"users": [0], "randomizer": randomizer, "records": records})
    (reply,) = grid.send_and_receive([Message(RecordDict({"request": request}), dst_node_id=1000, message_type="train")])
    assert str(reply.content["meta"]["status"]) == "refused"
    assert reason in str(reply.content["meta"]["reason"])
    assert _ledger(grid).releases() == 0  # nothing released, nothing spent


def test_exhausted_user_refuses_instead_of_crashing(canary_data: Path, tmp_path: Path) -> None:
    grid, config = _node(canary_data, tmp_path)
    sigma = 5.0  # mu = 0.4 per release: about 17 releases exhaust a budget of 8
    request = ConfigRecord({"users": [0], "randomizer": json.dumps({"mechanism": "gaussian", "clip": 1.0, "sigma": sigma}), "records": 0})
    replies = [grid.send_and_receive([Message(RecordDict({"request": request}), dst_node_id=1000, message_type="train")])[0] for _ in range(40)]
    assert all(not r.has_error() for r in replies)
    last = protocol.read_release_reply(replies[-1].content).refusals
    assert last[0][0] == Refusal.BUDGET
    ledger = _ledger(grid)
    assert 0 < ledger.sentence_epsilon() <= 8.0 and ledger.releases() > 0


def _ledger(grid: LocalGrid) -> Ledger:
    (reply,) = grid.send_and_receive([Message(RecordDict(), dst_node_id=1000, message_type=protocol.LEDGER)])
    return Ledger.from_json(protocol.read_ledger_reply(reply.content)[0])


def test_server_pretrained_bilstm_is_shipped_and_used(tmp_path: Path) -> None:
    config = RunSpec.of(
        data="generated:600", public="generated:600", encoder="bilstm", users=6, nodes=2, rounds=2,
        users_per_round=3, out=str(tmp_path / "run"),
    ).to_mapping()
    run_local(server_app, client_app, 2, config)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    spec = RunSpec.from_mapping(config)
    population = Population.build(spec.data, spec.seed)
    records = sum(len(part) for part in population.train_parts)  # each copy of a sentence is a record (fed.device.record_ids)
    assert summary["errors"] == [] and summary["releases"] == records > 500
    assert summary["accuracy_nonprivate"] > 0.5  # four topics: the shipped encoder carries signal
