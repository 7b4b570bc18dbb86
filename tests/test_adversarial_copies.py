"""The server is the adversary: which of a device's records are copies of each other is record
content, so nothing a device sends may depend on it outside a charged release (issue 24, finding 1).

Record ids are per copy (fed.device.record_ids): each copy of a sentence is its own record with its own
ledger column, so the number of reports in every reply, and when each record runs out of budget,
are the same as for a dataset of the same sizes without copies.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed import protocol
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.device.record_ids import record_ids
from tests.test_adversarial_server import SIGMA_AT_3, _device, _gaussian, _policy, _send

DISTINCT = [f"copies record {i} the film was {'awful' if i % 2 else 'great'} indeed\t{i % 2}" for i in range(8)]
WITH_COPIES = DISTINCT[:4] + DISTINCT[:2] + DISTINCT[2:4]  # four sentences, each twice
EVERY_ROUND = _gaussian(2 * SIGMA_AT_3)  # four releases of one record fit its budget of 3


def _folder(root: Path, name: str, train: list[str]) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(train) + "\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join([train[0], DISTINCT[7]]) + "\n")
    (folder / "labels.txt").write_text("0\tgreat\n1\tawful\n")
    return folder


def _counts(root: Path, name: str, train: list[str], bundle: np.ndarray) -> list[tuple[int, str]]:
    """Reports per training reply (or the refusal code) until the device refuses, from a fresh device."""
    grid = _device(_folder(root, name, train), bundle, root / f"state-{name}", _policy(root / f"{name}.toml", epsilon_sentence=3.0, labels="public"))
    seen = []
    for _ in range(12):
        reply = _send(grid, protocol.TRAIN, protocol.release_request([0], EVERY_ROUND, 0, "all"))
        refused = protocol.read_refusal(reply.content)
        if refused:
            seen.append((0, refused[0]))
            break
        part = protocol.read_release_reply(reply.content)
        seen.append((len(part.reports), ",".join(code for code, _ in part.refusals.values())))
        assert len({bytes(r) for r in part.reports}) == len(part.reports)  # no two copies leave as one report
    return seen


def test_replies_do_not_depend_on_which_records_are_copies(tmp_path: Path) -> None:
    """Before per-copy ids, copies shared a column: 4 reports per reply instead of 8 (the copies revealed)."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "encoder.txt").write_text("minilm")
    bundle = pack(folder)
    with_copies = _counts(tmp_path, "copies", WITH_COPIES, bundle)
    distinct = _counts(tmp_path, "distinct", DISTINCT, bundle)
    assert with_copies == distinct
    assert with_copies[0][0] == len(WITH_COPIES)


@pytest.mark.parametrize("second", [None, "other"])
def test_record_ids_are_per_copy_and_the_first_copy_keeps_its_old_id(second: str | None) -> None:
    """Every record has its own id; a sentence's first copy keeps the id a ledger from before stored."""
    texts = ["a", "b", "a", "a"]
    train = TextDataset("train", tuple(texts), (second,) * 4 if second else None, np.array([0, 1, 0, 0]), ("x", "y"))
    dev = TextDataset("dev", ("a", "c"), (second,) * 2 if second else None, np.array([0, 1]), ("x", "y"))
    secret = bytes(range(32))
    train_ids, dev_ids = record_ids([train, dev], secret)
    ids = list(train_ids) + list(dev_ids)
    assert len(set(ids)) == len(ids)
    old = hmac.new(secret, json.dumps(["a", second, 0]).encode(), hashlib.sha256).hexdigest()[:32]
    assert train_ids[0] == old
