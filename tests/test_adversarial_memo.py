"""The server is the adversary (design.md section 2b): what memoization could give it (issue 24,
findings 3 and 4), tried against the real ClientApp running as a device.

- Amplified enforcement assumes the server cannot link a report to its record; a memoized
  report repeats unchanged and is linked by construction, so a policy may not combine them.
- Up-sampled inference hides true queries among fictitious ones; a memoized true query would
  repeat across steps where a fictitious one does not, so query reports are always fresh draws.
- A memo answers only the request it was made for (same bundle, dimension, randomizer, label
  channel, kind of release): no request sequence leaves a node in a permanent error state.
- Copies of a record (same content) are records of their own (fed.device.record_ids: ids per copy), each
  with its own budget and memo: never two identical reports in one reply.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message

from ldpfed.fed import protocol
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.runtime.node import NodeReply
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.fed.privacy.sampling import UpSampling
from ldpfed.simulations.local_grid import LocalGrid
from tests.test_adversarial_server import SIGMA_AT_3, _device, _gaussian, _ledger, _policy, _send, _train

ROWS = [f"memo record {i} the film was {'awful' if i % 2 else 'great'} indeed\t{i % 2}" for i in range(8)]
TRAIN_ROWS = ROWS + ROWS[:2]  # two records twice: same content, a record id per copy
DEV_ROWS = [ROWS[2], "a new film was great indeed\t0", "a new film was awful indeed\t1"]  # a training record as a query
UP = UpSampling(0.5, 1.0, 3)  # every item of the mixed set in every step: 3 true queries, 3 fictitious
RUN = {"labels": "public", "upsampling_q": UP.q, "p_query": UP.p, "answers": UP.k}
NOISY = _gaussian(3 * SIGMA_AT_3)  # nine releases of one record fit its budget of 3
MINILM_DIM = 384


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A device's dataset with copies: two training records twice, a training record among the queries."""
    folder = tmp_path_factory.mktemp("memo-data")
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "\n".join(TRAIN_ROWS) + "\n")
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "\n".join(DEV_ROWS) + "\n")
    (folder / "labels.txt").write_text("0\tpositive\n1\tnegative\n")  # a device's label set (never its records')
    return folder


def _bundle(folder: Path, dim: int = 0, seed: int = 0) -> np.ndarray:
    """A setup bundle: MiniLM, projected to ``dim`` dimensions (0: no projection) by a PCA fitted under ``seed``."""
    folder = folder / f"bundle-{dim}-{seed}"
    folder.mkdir()
    (folder / "encoder.txt").write_text("minilm")
    if dim:
        PCAProjection.fit(np.random.default_rng(seed).normal(size=(50, MINILM_DIM)), dim).save(folder / "projection.npz")
    return pack(folder)


def _memoizing(data: Path, bundle: np.ndarray, tmp_path: Path) -> LocalGrid:
    """A device whose policy memoizes (its default), set up with ``bundle``."""
    return _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public"), **RUN)


def _query(grid: LocalGrid) -> Message:
    return _send(grid, protocol.RELEASE, protocol.release_request([0], NOISY, 0, UP.spec))


def _setup(grid: LocalGrid, bundle: np.ndarray) -> None:
    """A re-setup with ``bundle``, accepted."""
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content)
    assert refused is None, refused


def _served(reply: Message) -> NodeReply:
    """The release in ``reply``; fails on a refusal of the whole message."""
    refused = protocol.read_refusal(reply.content)
    assert refused is None, refused
    return protocol.read_release_reply(reply.content)


# -- finding 3: amplified enforcement and memoization -------------------------------------------
def test_a_device_policy_combining_amplified_enforcement_with_memoization_is_refused(data: Path, tmp_path: Path) -> None:
    """With both, each record left as one fixed, linkable report while the ledger showed an amplified epsilon."""
    run = {**RUN, "sampling": "poisson:0.5"}
    request = protocol.release_request([0], NOISY, 0, "poisson:0.5")
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", enforce="amplified", memoize=False)
    grid = _device(data, _bundle(tmp_path), tmp_path / "state", policy, **run)
    steps = [_served(_send(grid, protocol.TRAIN, request)).reports for _ in range(4)]
    repeats = Counter(bytes(r) for step in steps for r in step)
    assert sum(map(len, steps)) > 0 and max(repeats.values()) == 1  # memoize = false: every report a fresh draw
    released = _ledger(grid).releases()

    _policy(policy, epsilon_sentence=3.0, labels="public", enforce="amplified")  # memoize: true by default
    refused = protocol.read_refusal(_send(grid, protocol.TRAIN, request).content)
    assert refused is not None and refused[0] == Refusal.NOT_SET_UP, refused
    assert 'enforce = "amplified"' in refused[1] and "memoize = true" in refused[1]
    with pytest.raises(ValueError, match='enforce = "amplified" and memoize = true cannot be combined'):
        DevicePolicy.load(policy)
    _policy(policy, epsilon_sentence=3.0, labels="public", enforce="amplified", memoize=False)
    assert _ledger(grid).releases() == released  # the refused message spent nothing


def test_amplified_enforcement_with_memoization_is_refused_wherever_a_policy_is_made() -> None:
    """Simulated users derive their policy from the run options, which never memoize; the policy itself
    refuses the combination, so no run option or policy file can bring it back."""
    config = RunSpec.of(enforce="amplified", sampling="poisson:0.05", labels="public", sigma=2.0)  # sigma: no calibration to wait for
    assert DevicePolicy.from_run(config, make_plan(config, 2)).memoize is False
    for make in (lambda: DevicePolicy(enforce="amplified"), lambda: DevicePolicy.from_mapping({"enforce": "amplified"})):
        with pytest.raises(ValueError, match="enforce.*memoize"):
            make()
    assert DevicePolicy(enforce="amplified", memoize=False).enforce == "amplified"


# -- finding 4: what memoization reveals ---------------------------------------------------------
def test_upsampled_true_and_fictitious_query_slots_do_not_differ_by_repetition(data: Path, tmp_path: Path) -> None:
    """A memoized true query repeated byte for byte in every step while fictitious ones never did."""
    grid = _memoizing(data, _bundle(tmp_path), tmp_path)
    steps = [_served(_query(grid)).reports for _ in range(3)]
    n_true, n_fictitious = len(DEV_ROWS), UP.fictitious(len(DEV_ROWS))
    assert [len(step) for step in steps] == [n_true + n_fictitious] * 3
    repeats = Counter(bytes(r) for step in steps for r in step)
    assert max(repeats.values()) == 1, f"{sum(n > 1 for n in repeats.values())} reports repeat across steps"
    assert _ledger(grid).releases() == 3 * n_true  # every true query's report is a fresh draw, charged


@pytest.mark.parametrize("old,new", [((8, 0), (4, 0)), ((4, 0), (4, 1))], ids=["other-dimension", "other-projection"])
def test_after_a_new_bundle_a_train_is_a_fresh_draw_of_its_encoding(data: Path, tmp_path: Path, old: tuple, new: tuple) -> None:
    """The memo ignored the bundle: the old reports came back (a wrong shape: a permanent 'malformed')."""
    grid = _memoizing(data, _bundle(tmp_path, *old), tmp_path)
    first = _served(_train(grid, NOISY)).reports
    assert first.shape[1] == old[0]
    _setup(grid, _bundle(tmp_path, *new))
    fresh = _served(_train(grid, NOISY)).reports
    assert not set(map(bytes, fresh)) & set(map(bytes, first))  # not a report of the old encoding
    assert fresh.shape == (len(first), new[0])
    again = _served(_train(grid, NOISY)).reports  # a repeat under the new bundle: its own memo
    assert sorted(map(bytes, again)) == sorted(map(bytes, fresh))


def test_a_train_after_a_query_under_the_same_randomizer_is_served(data: Path, tmp_path: Path) -> None:
    """A query's report (no label) came back as the training report of the same record: a permanent TypeError."""
    grid = _memoizing(data, _bundle(tmp_path), tmp_path)
    _served(_query(grid))
    for _ in range(2):
        reply = _served(_train(grid, NOISY))
        assert len(reply.reports) == len(TRAIN_ROWS) and len(reply.labels) == len(reply.reports)


def test_copies_of_a_record_never_leave_as_identical_reports(data: Path, tmp_path: Path) -> None:
    """Copies shared one memo: the second reply carried both, byte for byte equal (the copies revealed)."""
    grid = _memoizing(data, _bundle(tmp_path), tmp_path)
    replies = [_served(_train(grid, NOISY)).reports for _ in range(3)]
    for reports in replies:
        assert len(reports) == len(set(map(bytes, reports))) == len(TRAIN_ROWS)
    assert sorted(map(bytes, replies[2])) == sorted(map(bytes, replies[0]))  # memoized: the same reports, free


@pytest.mark.parametrize(
    "sequence",
    [("query", "train", 4, "train"), ("train", 4, "query", "train", 0, "train", "query", "train")],
    ids=["short", "long"],
)
def test_no_request_sequence_leaves_a_node_in_a_permanent_error_state(data: Path, tmp_path: Path, sequence: tuple) -> None:
    """Releases and re-setups (a number: a bundle projecting to that dimension, 0: none) in any order are served."""
    bundles = {dim: _bundle(tmp_path, dim) for dim in (0, 4)}
    grid = _memoizing(data, bundles[0], tmp_path)
    dim = MINILM_DIM
    for step in sequence:
        if isinstance(step, int):
            _setup(grid, bundles[step])
            dim = step or MINILM_DIM
            continue
        reply = _served(_query(grid) if step == "query" else _train(grid, NOISY))
        assert len(reply.reports) and reply.reports.shape[1] == dim, step
