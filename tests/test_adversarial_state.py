"""Issue 24, findings 7-9: a device's files, its policy values and its local state, tried against the
real ClientApp running as a device (an in-process LocalGrid with ``engine=False``, node config as
``flower-supernode --node-config`` gives it).

- File modes: under umask 000 everything in the device folder is still the owner's only.
- Policy values: each bad value is refused with its key named, and nothing is released.
- Tampering: a deleted, emptied or swapped ledger or key makes the node refuse, never start over.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from flwr.app import RecordDict

from ldpfed.fed import protocol
from ldpfed.fed.device.state import init_state
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.simulations.commands.device import init_device
from tests.test_adversarial_server import NODE, SIGMA_AT_3, TRAIN, _device, _gaussian, _policy, _send, _train
from tests.test_adversarial_server import bundle, data  # noqa: F401 - the module's fixtures

PERMISSIVE = {"epsilon_sentence": 3.0, "labels": "public"}
"""A policy under which one Gaussian training release at epsilon 3 is served."""


@pytest.fixture()
def umask_000() -> Iterator[None]:
    """The owner's shell runs with umask 000; the test process gets its own umask back afterwards."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


def _refused_with_nothing(reply_content: RecordDict, code: str, *words: str) -> str:
    """The refusal's reason, after checking its code, that it names ``words``, and that it carries no report."""
    refused = protocol.read_refusal(reply_content)
    assert refused is not None, "served"
    assert refused[0] == code, refused
    for word in words:
        assert word in refused[1], refused
    assert not reply_content.array_records, "a refusal carried arrays"
    return refused[1]


# -- 7. file modes ----------------------------------------------------------------------------
def test_everything_in_the_device_folder_is_the_owners_only_whatever_the_umask(
    data: Path, bundle: np.ndarray, tmp_path: Path, umask_000: None
) -> None:
    files = init_device(tmp_path / "device")  # as `ldpfed device init` does, under umask 000
    made = {files.policy, files.trusted_entities, files.state}
    grid = _device(data, bundle, files.state, _policy(tmp_path / "p.toml", **PERMISSIVE))
    os.umask(0)  # each message's process starts with the owner's umask again
    reader = sqlite3.connect(files.state / "ledger.sqlite")  # held open: the ledger's -wal and -shm stay
    try:
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        os.umask(0)
        assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content).reports) == TRAIN
        found = {path: stat.S_IMODE(path.lstat().st_mode) for path in [files.root, *files.root.rglob("*")]}
    finally:
        reader.close()
    loose = {str(path): oct(mode) for path, mode in found.items() if mode != (0o700 if path.is_dir() else 0o600)}
    assert not loose, loose
    wanted = {
        files.state / "ledger.sqlite", files.state / "ledger.sqlite-wal", files.state / "ledger.sqlite-shm",
        files.state / "record-id.key", files.state / "cache", *made,
    }
    assert wanted <= set(found), sorted(map(str, wanted - set(found)))
    assert any(path.is_file() and "cache" in path.parts for path in found), "the test made no cache file"


# -- 8. policy values -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key,value",
    [
        ("epsilon_sentence", True),  # a boolean was taken as the number 1
        ("max_release_epsilon", True),
        ("epsilon_user", 10**399),  # a 400-digit integer: OverflowError, answered as malformed
        ("delta", 0.999),
        ("labels", "rr:1e308"),
        ("evaluation", "rr:1e300"),
    ],
)
def test_a_bad_policy_value_is_refused_naming_its_key(
    data: Path, bundle: np.ndarray, tmp_path: Path, key: str, value: object
) -> None:
    policy = _policy(tmp_path / "p.toml", **PERMISSIVE)
    grid = _device(data, bundle, tmp_path / "state", policy)
    _policy(policy, **{**PERMISSIVE, key: value})  # the owner edits the policy file
    for message_type, content in ((protocol.TRAIN, _train(grid, _gaussian(SIGMA_AT_3)).content),
                                  (protocol.SETUP, _send(grid, protocol.SETUP, protocol.setup_request(bundle)).content)):
        reason = _refused_with_nothing(content, Refusal.NOT_SET_UP, f"policy: {key} ")
        assert len(reason) < 400, f"{message_type}: {reason}"


# -- 9. tampering -----------------------------------------------------------------------------
def _delete_ledger(state: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (state / f"ledger.sqlite{suffix}").unlink(missing_ok=True)


def _empty_ledger(state: Path) -> None:
    _delete_ledger(state)
    empty = sqlite3.connect(state / "ledger.sqlite")
    empty.execute("PRAGMA journal_mode=WAL").fetchone()  # a valid database, with no table
    empty.close()


def _foreign_key(state: Path) -> None:
    shutil.copyfile(state.parent / "other-device" / "record-id.key", state / "record-id.key")


TAMPERING = {
    "state-dir-deleted": (lambda state: shutil.rmtree(state), "state folder"),
    "ledger-deleted": (_delete_ledger, "ledger"),
    "ledger-emptied": (_empty_ledger, "bound to no record-id key"),
    "key-deleted": (lambda state: (state / "record-id.key").unlink(), "record-id key"),
    "key-of-another-device": (_foreign_key, "another record-id key"),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERING))
def test_a_node_whose_state_was_tampered_with_refuses_instead_of_starting_over(
    data: Path, bundle: np.ndarray, tmp_path: Path, tamper: str
) -> None:
    action, named = TAMPERING[tamper]
    state, policy = tmp_path / "state", _policy(tmp_path / "p.toml", **PERMISSIVE, memoize=False)
    if tamper == "key-of-another-device":
        _device(data, bundle, tmp_path / "other-device", policy)
    grid = _device(data, bundle, state, policy)
    assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content).reports) == TRAIN  # all spent
    action(state)
    for content in (_train(grid, _gaussian(SIGMA_AT_3)).content, _send(grid, protocol.SETUP, protocol.setup_request(bundle)).content):
        reason = _refused_with_nothing(content, Refusal.NOT_SET_UP, named, "ldpfed device init")
        assert "start over" in reason or "does not exist" in reason, reason
    if tamper == "state-dir-deleted":
        assert not state.exists(), "the node made a state folder by itself"
        init_state(state)  # the owner starts over, explicitly: the node serves again, from a fresh budget
        _send(grid, protocol.SETUP, protocol.setup_request(bundle))
        assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content).reports) == TRAIN


@pytest.mark.parametrize("key", ["data", "cache-dir"])
def test_data_or_cache_inside_the_state_folder_is_refused(data: Path, bundle: np.ndarray, tmp_path: Path, key: str) -> None:
    state = tmp_path / "state"
    grid = _device(data, bundle, state, _policy(tmp_path / "p.toml", **PERMISSIVE))
    inside = shutil.copytree(data, state / "mine") if key == "data" else state / "mine"
    grid.node_ctx[NODE].node_config[key] = str(inside)
    for content in (_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content, _train(grid, _gaussian(SIGMA_AT_3)).content):
        _refused_with_nothing(content, Refusal.NOT_SET_UP, f"{key}=", "inside the state folder")
