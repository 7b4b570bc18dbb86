"""Issue 24, finding 1: no uncharged oracle on record content.

A device keys spending by a hash of each record's content, so equal records share a ledger
column. The server tries to read which records are equal (within a user, between training
and query rows) from what a device returns outside a
charged release: ledger answers, the per-user figures of release replies, refusal texts.
Each test runs two devices (the real ClientApp, ``engine=False``) whose data differ only in
which records are equal, sends both the same requests and compares what comes back.

Since stop 23 record ids are per copy (fed.device.record_ids), so equal records no longer share
spending; these tests check that the answers carry nothing per record either (docs/device.md,
"What a device reveals").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.state import init_state
from ldpfed.fed.privacy.ledger import DEVICE_VIEW
from ldpfed.simulations.local_grid import LocalGrid, run_local
from ldpfed.strategies.app import app as server_app
from tests.conftest import DEVICE_POLICY
from tests.test_adversarial_server import bundle  # noqa: F401  (a fixture)
from tests.test_adversarial_server import SIGMA_AT_3, _device, _gaussian, _ledger, _policy, _send

TRAIN_LABELS = [0, 1, 0, 1, 1, 0]
DEV_LABELS = [1, 0]


def _folder(folder: Path, train: list[tuple[str, int]], dev: list[tuple[str, int]]) -> Path:
    """A device's data folder of (sentence, label) rows."""
    folder.mkdir(parents=True)
    for split, rows in (("train", train), ("dev", dev)):
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    (folder / "labels.txt").write_text("0\tbad\n1\tgood\n")
    return folder


def _distinct(prefix: str, labels: list[int]) -> list[tuple[str, int]]:
    return [(f"{prefix} {i}: the film was {'good' if y else 'bad'} indeed", y) for i, y in enumerate(labels)]


@pytest.fixture
def datasets(tmp_path: Path) -> tuple[Path, Path]:
    """One user's data with equal records (training rows 1 and 3; training row 4 is query row 0),
    and data of the same sizes and labels with none."""
    train, dev = _distinct("train", TRAIN_LABELS), _distinct("dev", DEV_LABELS)
    duplicated = list(train)
    duplicated[3] = train[1]
    queries = [train[4], dev[1]]
    assert train[4][1] == DEV_LABELS[0]
    return _folder(tmp_path / "equal", duplicated, queries), _folder(tmp_path / "distinct", train, dev)


def _ledger_answer(grid: LocalGrid) -> str:
    """The ledger message's whole answer, as the server receives it."""
    return str(_send(grid, protocol.LEDGER, RecordDict()).content["ledgers"]["json"])


def _release(grid: LocalGrid, users: list[int], randomizer: dict, records: int = 0) -> Message:
    return _send(grid, protocol.TRAIN, protocol.release_request(users, randomizer, records, "all"))


def _figures(reply: Message) -> tuple[dict, dict, int]:
    """What a release reply says beside its reports: per-user figures, refusals, and how many reports."""
    data = protocol.read_release_reply(reply.content)
    return data.ledgers, data.refusals, len(data.reports)


def _devices(folders: tuple[Path, ...], bundle: np.ndarray, tmp_path: Path, **run: object) -> list[LocalGrid]:
    policy = _policy(tmp_path / "policy.toml", epsilon_sentence=6.0, labels="public")
    return [_device(folder, bundle, tmp_path / f"state-{folder.name}", policy, **run) for folder in folders]


def test_before_any_release_the_ledger_answer_does_not_tell_which_records_are_equal(
    datasets: tuple[Path, Path], bundle: np.ndarray, tmp_path: Path
) -> None:
    """Attack: read the ledger before releasing anything. Its column layout named equal records
    (issue 24: columns [0, 1, 2, 1, 3, 4, 3, 5], training rows 1 and 3 alike, training row 4 is
    query row 0); with ids per copy it is still the order of the records' keyed hashes."""
    equal, distinct = _devices(datasets, bundle, tmp_path)
    answer = _ledger_answer(equal)
    assert answer == _ledger_answer(distinct)
    (entry,) = json.loads(answer).values()
    assert entry["view"] == DEVICE_VIEW and entry["num_records"] == len(TRAIN_LABELS) + len(DEV_LABELS)


def test_after_the_same_requests_reply_figures_and_ledger_answers_do_not_tell_records_apart(
    datasets: tuple[Path, Path], bundle: np.ndarray, tmp_path: Path
) -> None:
    """Attack: release two records, then read the reply's per-user figures (records with budget
    left, releases) and the ledger answer, whose counts per record named the two records the
    device's secret sampling picked (and, in issue 24, which records were equal)."""
    equal, distinct = _devices(datasets, bundle, tmp_path)
    replies = [_figures(_release(grid, [0], _gaussian(SIGMA_AT_3), records=2)) for grid in (equal, distinct)]
    assert replies[0][2] == replies[1][2] == 2  # the release itself is alike: two reports each
    assert replies[0] == replies[1]
    assert _ledger_answer(equal) == _ledger_answer(distinct)


def test_the_device_answer_bounds_what_the_owner_sees_with_no_record_index(
    datasets: tuple[Path, Path], bundle: np.ndarray, tmp_path: Path
) -> None:
    """What a device answers instead: its budget, bounds from the steps it served (at least the
    owner's own figures, at most the budget) and its step log; nothing per record."""
    equal, _ = _devices(datasets, bundle, tmp_path)
    for _ in range(3):
        _release(equal, [0], _gaussian(SIGMA_AT_3), records=2)
    (entry,) = json.loads(_ledger_answer(equal)).values()
    assert not {"columns", "events", "user_events"} & set(entry)
    owner = _ledger(equal)  # the full ledger, read on the device
    assert 0 < owner.sentence_epsilon() <= entry["epsilon_sentence"] <= 6.0
    assert owner.user_epsilon() <= entry["epsilon_user"]
    assert sum(s["steps"] for s in entry["steps"] if s["kind"] == "train") == 3


def test_a_run_on_devices_writes_what_the_devices_reported(tmp_path: Path) -> None:
    """The server's side: on devices the run directory holds each device's aggregates as it sent
    them (no record index or count), and the summary and report take the devices' own figures."""
    (tmp_path / "policy.toml").write_text(DEVICE_POLICY)
    nodes = [
        {"data": "generated:60", "state-dir": str(init_state(tmp_path / f"state-{i}")), "policy": str(tmp_path / "policy.toml")}
        for i in range(2)
    ]  # two devices, hosting users 0 and 1 (their partition-ids)
    config = RunSpec.of(
        data="generated:60", public="none", dim=0, users=2, nodes=2, rounds=1, epsilon=8.0, labels="public", out=str(tmp_path / "run")
    )
    run_local(server_app, client_app, 2, config.to_mapping(), engine=False, node_configs=nodes)
    out = tmp_path / "run"
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    assert sorted(ledgers) == ["0", "1"]
    for entry in ledgers.values():
        assert entry.get("view") == DEVICE_VIEW and not {"columns", "events", "user_events"} & set(entry), entry
        assert 0 < float(entry["epsilon_sentence"]) <= 8.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["users_with_device_ledgers"] == 2
    assert summary["epsilon_sentence_max"] == max(float(e["epsilon_sentence"]) for e in ledgers.values())
    assert "users whose ledger came from a device" in (out / "privacy_report.md").read_text()
