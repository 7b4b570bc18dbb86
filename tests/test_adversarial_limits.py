"""The server is the adversary (issue 24, findings 5 and 6): a message is all or nothing, and sizes are
checked before a device allocates, builds or writes anything.

Every node is the real ClientApp as a device (tests.test_adversarial_server's ``_device``), asked
with the protocol's own encoders, as a hostile ServerApp would.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import RecordDict

from ldpfed.fed import protocol
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.runtime.requests import Refusal
from tests.test_adversarial_server import SIGMA_AT_3, TRAIN, _device, _gaussian, _policy, _send, _train
from tests.test_adversarial_server import bundle, data  # noqa: F401 - the fixtures

SUE_DIM_5 = {"mechanism": "sue", "epsilon": 1.0, "dim": 5}
"""A bit encoding set up for 5 dimensions: the device's records have 384."""


def _ledgers(grid) -> dict:  # noqa: ANN001 - a LocalGrid
    """What the node says about every hosted user's spending (equal before and after: nothing spent)."""
    return protocol.read_ledger_reply(_send(grid, protocol.LEDGER, RecordDict()).content)


def _two_parts(first: dict, second: dict, records: int = 6) -> protocol.Content:
    """One release message of two parts for user 0."""
    return protocol.release_parts([protocol.release_request([0], r, records, "all") for r in (first, second)])


def _listing(folder: Path) -> dict[str, int]:
    """Every path under ``folder`` and its size (-1: a folder)."""
    return {p.relative_to(folder).as_posix(): p.stat().st_size if p.is_file() else -1 for p in sorted(folder.rglob("*"))}


# -- 5. a message is all or nothing ------------------------------------------------------------
def test_a_later_part_the_node_cannot_serve_spends_nothing(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Part 1 a valid gaussian release, part 2 sue for 5 dims: refused whole, nothing spent, the next train served."""
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy)
    before = _ledgers(grid)
    refused = protocol.read_refusal(_send(grid, protocol.TRAIN, _two_parts(_gaussian(SIGMA_AT_3), SUE_DIM_5)).content)
    assert refused is not None and refused[0] == Refusal.MALFORMED and "dim 5" in refused[1], refused
    assert _ledgers(grid) == before
    honest = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(honest.reports) == TRAIN and not honest.refusals  # every record still had its budget


@pytest.mark.parametrize("engine", [False, True], ids=["device", "simulation-engine"])
def test_a_part_that_fails_while_served_rolls_back_the_parts_before_it(
    data: Path, bundle: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: bool
) -> None:
    """Whatever makes a later part fail while it is served (here injected), the earlier parts' charges
    are not kept: on a device (one user at a time) and in the engine (a cohort step, fed.runtime.cohort)."""
    policy = None if engine else _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy, engine=engine, labels="public")
    before = _ledgers(grid)
    serve, served = NodeHost.serve, []

    def failing(host: NodeHost, *args: object) -> object:
        served.append(host)
        if len(served) == 2:
            raise ValueError("injected: the second part fails while it is served")
        return serve(host, *args)

    monkeypatch.setattr(NodeHost, "serve", failing)
    message = _two_parts(_gaussian(SIGMA_AT_3), _gaussian(SIGMA_AT_3), records=0)
    refused = protocol.read_refusal(_send(grid, protocol.TRAIN, message).content)
    assert refused is not None and "injected" in refused[1], refused
    monkeypatch.setattr(NodeHost, "serve", serve)
    assert _ledgers(grid) == before
    honest = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(honest.reports) == TRAIN and not honest.refusals


def test_parts_of_one_message_see_each_others_charges(
    data: Path, bundle: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the engine one message's parts may take both paths over the same user: one user at a time and the
    cohort step, whose ledger a process keeps between messages. Each part reads what the parts before it
    charged, and so does the next message: no record is released twice. (A part names each user once,
    issue 39 finding 5, so the path of each part is set here.)"""
    grid = _device(data, bundle, tmp_path / "state", engine=True, labels="public")  # one release per record
    assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3), records=2).content).reports) == 2
    for order in ((False, True), (True, False)):  # per user then the cohort step; the cohort step then per user
        paths = iter(order)
        monkeypatch.setattr(NodeHost, "_batched", lambda host, request: next(paths))
        parts = [protocol.release_request([0], _gaussian(SIGMA_AT_3), 2, "all") for _ in order]
        replies = protocol.read_release_replies(_send(grid, protocol.TRAIN, protocol.release_parts(parts)).content)
        assert [len(r.reports) for r in replies] == [2, 2]
        assert next(paths, None) is None  # each part took the path set for it
    monkeypatch.undo()
    rest = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(rest.reports) == TRAIN - 10, f"{len(rest.reports)} records released, {TRAIN - 10} had budget left: some released twice"


# -- 6. sizes are checked before anything is allocated -------------------------------------------
@pytest.mark.parametrize(
    "randomizer,name",
    [
        ({"mechanism": "oue", "epsilon": 1.0, "dim": 384_000_000}, "dim"),  # MemoryError while parsing, before
        ({"mechanism": "oue", "epsilon": 1.0, "dim": 5_000_000}, "dim"),  # 2.3 GiB and 24 s, then refused, before
        ({"mechanism": "sue", "epsilon": 1.0, "dim": 5e6}, "dim"),
        ({"mechanism": "ome", "epsilon": 1.0, "dim": 5_000_000, "lambda": 100.0}, "dim"),
        (  # a pool of 10^9 sign masks drawn at release time
            {"mechanism": "dpie-gaussian", "clip": 1.0, "sigma": 100.0, "k": 4, "masks": 10**9, "max_coefficient": 1.0},
            "masks",
        ),
    ],
    ids=["oue-3.84e8", "oue-5e6", "sue-5e6", "ome-5e6", "dpie-masks-1e9"],
)
def test_a_huge_size_is_refused_at_once_naming_it(
    data: Path, bundle: np.ndarray, tmp_path: Path, randomizer: dict, name: str
) -> None:
    grid = _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public"))
    before = _ledgers(grid)
    started = time.perf_counter()
    reply = _train(grid, randomizer)
    seconds = time.perf_counter() - started
    refused = protocol.read_refusal(reply.content)
    assert refused is not None and refused[0] == Refusal.POLICY, refused
    assert f"'{name}'" in refused[1] and "max_dim" in refused[1], refused
    assert seconds < 3, f"refused after {seconds:.1f} s"
    assert _ledgers(grid) == before


# -- 6. a refused bundle leaves nothing behind -------------------------------------------------
def _bundle(tmp_path: Path, name: str, files: dict[str, bytes]) -> np.ndarray:
    folder = tmp_path / name
    folder.mkdir()
    for file, content in files.items():
        (folder / file).write_bytes(content)
    return pack(folder)


@pytest.mark.parametrize(
    "files,policy,says",
    [
        ({"encoder.txt": b"/home/owner/private-model"}, {}, "encoder"),  # outside the policy's encoders
        ({"encoder.txt": b"minilm", "projection.npz": None}, {}, "projection expects 128"),  # does not fit minilm's 384 dims
        ({"encoder.txt": b"minilm", "projection.npz": b"\0" * 2**20}, {"max_bundle_bytes": 2**20}, str(2**20)),
    ],
    ids=["encoder-outside-policy", "fails-to-load", "over-max-bundle-bytes"],
)
def test_a_refused_bundle_leaves_the_state_folder_as_it_was(
    data: Path, bundle: np.ndarray, tmp_path: Path, files: dict, policy: dict, says: str
) -> None:
    state = tmp_path / "state"
    grid = _device(data, bundle, state, _policy(tmp_path / "p.toml", epsilon_sentence=3.0, **policy))
    if files.get("projection.npz", b"") is None:
        files["projection.npz"] = _projection_bytes(tmp_path, 128)
    before = _listing(state)
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(_bundle(tmp_path, "b", files))).content)
    assert refused is not None and says in refused[1], refused
    assert _listing(state) == before


def _projection_bytes(tmp_path: Path, input_dim: int) -> bytes:
    """A valid projection.npz from ``input_dim`` dims to 4."""
    path = tmp_path / "projection.npz"
    PCAProjection.fit(np.random.default_rng(0).normal(size=(64, input_dim)), 4).save(path)
    return path.read_bytes()
