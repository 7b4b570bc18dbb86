"""Issue 39, minor findings 4 to 9, tried against the real ClientApp running as a device (an in-process
LocalGrid with ``engine=False``, node config as ``flower-supernode --node-config`` gives it), asked with
the protocol's own encoders as a hostile ServerApp would.

- 4. A permanent wedge: requests of negligible cost filling the ledger's cap on distinct events.
- 5. A user named many times in one request.
- 6. A tiny up-sampling rate q: thousands of fictitious rows per message.
- 7. A state folder that grows with every new bundle.
- 8. Plans that cannot be built, and a malformed ``train.central``.
- 9. A copy of the state folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed import protocol
from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.device.state import init_state
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.local_grid import LocalGrid
from tests.test_adversarial_server import DELTA, SIGMA_AT_3, TRAIN, _device, _gaussian, _ledger, _policy, _send, _train
from tests.test_adversarial_server import bundle, data  # noqa: F401 - the module's fixtures


def _grid(data: Path, state: Path, policy: Path, **run: object) -> LocalGrid:
    """A one-node device federation, its state initialised by its owner, not yet set up (the run config is the server's)."""
    values = {**dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0), **run}
    init_state(state)
    node_config = {"data": str(data), "state-dir": str(state), "policy": str(policy)}
    return LocalGrid(client_app, 1, RunSpec.from_mapping(values).to_mapping(), engine=False, node_configs=[node_config])


def _refusal(reply) -> tuple[str, str] | None:  # noqa: ANN001 - a Flower Message
    return protocol.read_refusal(reply.content)


# -- 4. no permanent wedge at a negligible cost -------------------------------------------------
def test_releases_of_negligible_cost_cannot_wedge_the_ledger_for_good(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Issue 39 finding 4: 32 train messages with sigma 1e4 + i (epsilon 9e-4 in all) filled the default cap of
    32 distinct events, and every later request with a new event was refused, in every later run. A release
    costing less than the policy's least (min_release_epsilon, by default 1 over max_events here) is refused,
    so the attack spends nothing and takes no slot, and the honest request is served."""
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy)
    for i in range(32):
        refused = _refusal(_train(grid, _gaussian(1e4 + i), records=1))
        assert refused is not None and refused[0] == Refusal.POLICY and "min_release_epsilon" in refused[1], refused
    assert len(_ledger(grid).events) == 0
    honest = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(honest.reports) == TRAIN and not honest.refusals, honest.refusals


def test_filling_the_event_cap_costs_at_least_a_records_whole_budget_in_all(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """The cheapest way to fill the cap: each new event at the least cost a release may have, on one record.
    Holding ``max_events`` events then cost releases summing to at least epsilon 1 (the default budget), or
    the floor where it is smaller."""
    cap = 4
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False, max_events=cap)
    least = DevicePolicy.load(policy).least_release_epsilon()
    assert least == pytest.approx(1.0 / cap)  # the smallest of the floor (3), the budgets (3, inf) and 1, over the cap
    grid = _device(data, bundle, tmp_path / "state", policy)
    spent = []
    for clip in np.linspace(1.0, 2.0, 2 * cap):  # distinct events, each at the least cost a device serves
        sigma = calibrate_gaussian_sigma(least * 1.001, DELTA, 1, 2.0 * clip)
        reply = _train(grid, _gaussian(sigma, clip), records=1)
        if _refusal(reply) is None and not protocol.read_release_reply(reply.content).refusals:
            spent.append(compose_epsilon({GaussianEvent(2.0 * clip, sigma): 1}, DELTA))
    assert len(spent) == cap  # the cap still bounds the work of composing a ledger
    assert sum(spent) >= 1.0, f"the cap of {cap} events filled for epsilon {sum(spent):.3g} in all"


# -- 5. a user named once ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", [protocol.TRAIN, protocol.RELEASE])
def test_a_request_naming_a_user_twice_is_refused(data: Path, bundle: np.ndarray, tmp_path: Path, kind: str) -> None:
    """Issue 39 finding 5: ``train {users: [0] * 10000}`` with memoize on returned 120,000 reports (176 MiB,
    259 s): each repetition of the user was served from its stored reports. Duplicate user ids are refused."""
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")  # memoize: on by default
    grid = _device(data, bundle, tmp_path / "state", policy)
    assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content).reports) == TRAIN
    started = time.perf_counter()
    reply = _send(grid, kind, protocol.release_request([0] * 1000, _gaussian(SIGMA_AT_3), 0, "all"))
    refused = _refusal(reply)
    assert refused is not None and refused[0] == Refusal.MALFORMED and "twice" in refused[1], refused
    assert not reply.content.array_records, "a refusal carried reports"
    assert time.perf_counter() - started < 5


# -- 6. the owner sets how many fictitious queries a true one may bring ---------------------------
def test_a_tiny_upsampling_rate_is_refused_before_any_fictitious_row_is_built(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Issue 39 finding 6: ``upsampling_q = 1e-3`` made a device build 999 fictitious rows per true query through
    OpenDP (533 s for one message). The least q is the owner's (policy: min_upsampling_q, default 0.1: at most 9
    fictitious queries per true one, the largest ratio of seed 000's Figure 7); a request under it is refused at once."""
    q = 0.01  # 792 fictitious rows of 384 dims for the 8 true queries: half a minute through OpenDP before this check
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy, upsampling_q=q)
    started = time.perf_counter()
    reply = _send(grid, protocol.RELEASE, protocol.release_request([0], _gaussian(SIGMA_AT_3), 0, f"upsample:{q!r}:1.0:1"))
    refused = _refusal(reply)
    assert refused is not None and refused[0] == Refusal.POLICY and "min_upsampling_q" in refused[1], refused
    assert time.perf_counter() - started < 3
    assert _ledger(grid).releases() == 0
    allowed = _policy(tmp_path / "allowed.toml", epsilon_sentence=3.0, labels="public", memoize=False, min_upsampling_q=0.5)
    grid = _device(data, bundle, tmp_path / "state2", allowed, upsampling_q=0.5)  # at the owner's least: served
    served = protocol.read_release_reply(_send(grid, protocol.RELEASE, protocol.release_request([0], _gaussian(SIGMA_AT_3), 0, "upsample:0.5:1.0:1")).content)
    assert len(served.reports) == 16  # 8 true queries and 8 fictitious ones


# -- 8. setup refuses a plan that cannot be built; train.central is refused like any message ---------
@pytest.mark.parametrize(
    "run,says",
    [
        ({"mechanism_options": "k=2,masks=4"}, "unknown parameter"),  # gaussian takes neither
        ({"mechanism": "sue", "epsilon": 1.0, "mechanism_options": "dim=5"}, "384"),  # a bit encoding of 5 dims for 384-value records
    ],
    ids=["gaussian-with-mixup-options", "sue-of-another-dim"],
)
def test_setup_refuses_a_plan_that_later_messages_cannot_build(
    data: Path, bundle: np.ndarray, tmp_path: Path, run: dict, says: str
) -> None:
    """Issue 39 finding 8: setup accepted gaussian with ``k=2,masks=4``, and every later message failed building the
    plan. Setup builds every plan it will serve (and checks it takes the records) before the node's state changes."""
    from flwr.app import RecordDict

    grid = _grid(data, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public"), **run)
    refused = _refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)))
    assert refused is not None and refused[0] == Refusal.MALFORMED and says in refused[1], refused
    later = _refusal(_send(grid, protocol.LEDGER, RecordDict()))
    assert later is not None and later[0] == Refusal.NOT_SET_UP, later  # the node was not set up: the server learns why at setup


def _central_request(norm: object = 1.0, arrays: bool = True) -> "RecordDict":
    from flwr.app import ConfigRecord, RecordDict

    from ldpfed.clients.app import FLOWER
    from ldpfed.fed.learning.softmax_head import initial

    content = RecordDict({"config": ConfigRecord({"server-round": 1} if norm is None else {"clipping_norm": norm, "server-round": 1})})
    if arrays:
        content["arrays"] = FLOWER.record(protocol.central_arrays(initial(384, 2)))
    return content


@pytest.mark.parametrize("engine", [False, True], ids=["device", "simulation-engine"])
@pytest.mark.parametrize(
    "case", ["no-arrays", "no-norm", "norm-not-a-number", "well-formed"],
)
def test_train_central_gets_a_structured_refusal_not_flowers_mod_error(
    data: Path, bundle: np.ndarray, tmp_path: Path, engine: bool, case: str
) -> None:
    """Issue 39 finding 8: a malformed ``train.central`` met Flower's clipping mod first and got its error reply
    (and on a device even a well-formed one did, the handler's refusal carrying no arrays). Every request the node
    refuses gets a structured refusal; a well-formed one inside the engine is served as before."""
    content = {
        "no-arrays": _central_request(arrays=False),
        "no-norm": _central_request(norm=None),
        "norm-not-a-number": _central_request(norm="1.0"),
        "well-formed": _central_request(),
    }[case]
    policy = None if engine else _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    grid = _device(data, bundle, tmp_path / "state", policy, engine=engine, privacy_model="central", users=1)
    reply = _send(grid, protocol.CENTRAL_TRAIN, content)  # _send: no error reply
    refused = _refusal(reply)
    if engine and case == "well-formed":
        assert refused is None and list(reply.content.array_records) == ["arrays"]
        return
    expected = Refusal.POLICY if case == "well-formed" else Refusal.MALFORMED
    assert refused is not None and refused[0] == expected, refused
    assert not reply.content.array_records


# -- 7. the state folder stays bounded ----------------------------------------------------------
def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_new_bundles_do_not_grow_the_device_folder_without_bound(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Issue 39 finding 7: each accepted bundle left its unpacked folder and its record store, and nothing was ever
    removed, so a server growing the device's disk needed only new bundles (here: other projections). A device
    keeps the policy's max_stored_bundles most recently used and removes the rest after each setup."""
    from ldpfed.fed.device.records import RECORDS_FOLDER
    from ldpfed.fed.encoders.projection import PCAProjection
    from ldpfed.fed.runtime.assets import add_projection

    state = tmp_path / "state"
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False, max_stored_bundles=2)
    grid = _device(data, bundle, state, policy)
    sizes = []
    for seed in range(6):
        projection = PCAProjection.fit(np.random.default_rng(seed).normal(size=(64, 384)), 4)
        assert _refusal(_send(grid, protocol.SETUP, protocol.setup_request(add_projection(bundle, projection)))) is None
        assert len(list((state / RECORDS_FOLDER).glob("*.npz"))) <= 2
        assert len(list((state / "cache" / "assets").iterdir())) <= 2
        sizes.append(_size(state))
    assert max(sizes[2:]) <= 1.2 * sizes[1], f"the device folder grew with every bundle: {sizes}"
    served = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)  # the latest bundle still serves
    assert served.reports.shape == (TRAIN, 4) and not served.refusals


# -- 9. a copy of the state folder ----------------------------------------------------------------
def _node(data: Path, state: Path, policy: Path) -> LocalGrid:
    """A one-node device federation over ``state`` as it is (no owner action on it)."""
    values = dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0)
    node_config = {"data": str(data), "state-dir": str(state), "policy": str(policy)}
    return LocalGrid(client_app, 1, RunSpec.from_mapping(values).to_mapping(), engine=False, node_configs=[node_config])


def test_a_copy_of_the_state_folder_refuses_instead_of_spending_every_budget_again(
    data: Path, bundle: np.ndarray, tmp_path: Path
) -> None:
    """Issue 39 finding 9: a copy of the state folder forked the ledger, and each copy spent the full budget on every
    record. The ledger records the file it was made as (its inode); a copy (or a restored backup) is another file, so
    its node refuses until the owner rebinds it (`ldpfed device init DIR --rebind`). A move within the file system
    is no copy: that node still serves."""
    import argparse
    import shutil

    from ldpfed.simulations.commands.device import add_arguments

    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    state = tmp_path / "state"
    grid = _device(data, bundle, state, policy)
    copy = Path(shutil.copytree(state, tmp_path / "copy"))  # before anything is spent
    assert len(protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content).reports) == TRAIN  # all spent
    forked = _node(data, copy, policy)
    for reply in (_send(forked, protocol.SETUP, protocol.setup_request(bundle)), _train(forked, _gaussian(SIGMA_AT_3))):
        refused = _refusal(reply)  # before: served, every record released again at full budget
        assert refused is not None and refused[0] == Refusal.NOT_SET_UP, refused
        assert "copied" in refused[1] and "--rebind" in refused[1], refused
        assert not reply.content.array_records
    with pytest.raises(ValueError, match="--rebind"):
        init_state(copy)  # `ldpfed device init` on the copy says so too, and changes nothing
    moved = state.rename(tmp_path / "moved")  # the original, moved: the same file, still this device's ledger
    grid = _node(data, moved, policy)
    assert _refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle))) is None
    spent = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert not len(spent.reports) and spent.refusals[0][0] == Refusal.BUDGET  # served: every record already spent
    # Rebinding is the owner's word that this folder alone serves from now on; a copy made before the spending
    # (a restored backup) forgets it, which docs/device.md says.
    shutil.rmtree(moved)
    init_state(copy, rebind=True)
    assert _refusal(_send(forked, protocol.SETUP, protocol.setup_request(bundle))) is None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["init", str(copy.parent), "--rebind"]).rebind  # the owner's command: ldpfed device init DIR --rebind
