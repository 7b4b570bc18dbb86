"""The server is the adversary (design.md section 2b): each attack of issue 8, tried against the
real ClientApp running as a device (not the simulation engine), must fail.

Every node here is a device: an in-process LocalGrid with ``engine=False`` whose node config
names the owner's policy file, state folder and data, exactly as ``flower-supernode
--node-config`` would. Releases are asked for with the protocol's own encoders, as a hostile
ServerApp would send them.
"""

from __future__ import annotations

import json
import multiprocessing
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Message, RecordDict

from ldpfed.fed import protocol
from ldpfed.clients.app import FLOWER, app as client_app, owner_ledgers
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.device.state import init_state
from ldpfed.fed.device.entropy import simulation_engine
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, RandomizedResponseEvent
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.fed.runtime.user import User, UserRecords
from ldpfed.simulations.local_grid import LocalGrid
from tests.conftest import write_review_folder

NODE = 1000
DELTA = 1e-5
TRAIN, DEV = 24, 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small labelled folder dataset (two classes)."""
    return write_review_folder(tmp_path_factory.mktemp("device-data"), {"train": TRAIN, "dev": DEV}, "record ", seed=1)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The setup bundle of a run without projection: the encoder name only."""
    folder = tmp_path_factory.mktemp("bundle")
    (folder / "encoder.txt").write_text("minilm")
    return pack(folder)


def _policy(path: Path, **values: object) -> Path:
    """An owner's policy file; no user-level cap unless given (these attacks are about records)."""
    values = {"epsilon_user": float("inf"), **values}
    lines = [f"{k} = {'inf' if v == float('inf') else json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _device(
    data: Path, bundle: np.ndarray, state: Path, policy: Path | None = None, engine: bool = False, **run: object
) -> LocalGrid:
    """A one-node federation hosting one user, set up; the run config is the server's.

    A device's ``state`` is initialised as its owner would (``ldpfed device init``), or kept if it was.
    """
    values = dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0)
    values.update(run)
    if engine:
        values["data"] = str(data)
    else:
        init_state(state)
    node_config = {"data": str(data), "state-dir": str(state)}
    if policy is not None:
        node_config["policy"] = str(policy)
    grid = LocalGrid(client_app, 1, RunSpec.from_mapping(values).to_mapping(), engine=engine, node_configs=[node_config])
    reply = _send(grid, protocol.SETUP, protocol.setup_request(bundle))
    assert protocol.read_refusal(reply.content) is None, protocol.read_refusal(reply.content)
    return grid


def _send(grid: LocalGrid, message_type: str, content: protocol.Content | RecordDict) -> Message:
    """Send the protocol's content, or a hand-built RecordDict (what a hostile server may write), and check the node survived."""
    flower = content if isinstance(content, RecordDict) else FLOWER(content)
    (reply,) = grid.send_and_receive([Message(flower, dst_node_id=NODE, message_type=message_type)])
    assert not reply.has_error(), reply.error.reason  # a hostile request never crashes the node
    return reply


def _gaussian(sigma: float, clip: float = 1.0) -> dict:
    return {"mechanism": "gaussian", "clip": clip, "sigma": sigma}


def _train(grid: LocalGrid, randomizer: dict, records: int = 0) -> Message:
    return _send(grid, protocol.TRAIN, protocol.release_request([0], randomizer, records, "all"))


def _owner_ledgers(grid: LocalGrid) -> dict[int, Ledger]:
    """The hosted users' full ledgers, read on the node as its owner would (a device sends the server only aggregates)."""
    with simulation_engine() if grid.engine else nullcontext():
        return owner_ledgers(grid.node_ctx[NODE])


def _ledger(grid: LocalGrid) -> Ledger:
    """User 0's full ledger (see :func:`_owner_ledgers`)."""
    return _owner_ledgers(grid)[0]


SIGMA_AT_3 = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0)  # one release at epsilon 3, clip 1


# -- 1. entropy ------------------------------------------------------------------------------
def test_a_server_that_knows_the_seed_cannot_replay_a_devices_noise(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Replay: the server runs a seeded node with the run's seed and config; on a device its guess is off by the noise."""
    randomizer = _gaussian(SIGMA_AT_3)
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    replay = [  # what a seeded node would send: the server can compute it (same code, same seed, same data)
        protocol.read_release_reply(_train(_device(data, bundle, tmp_path / f"sim{i}", engine=True, labels="public"), randomizer).content).reports
        for i in range(2)
    ]
    np.testing.assert_array_equal(replay[0], replay[1])  # inside the engine the replay is exact, by design
    for typo in ({}, {"deployed": "false"}):  # no config key can turn seeding back on
        grid = _device(data, bundle, tmp_path / f"dev{len(typo)}", policy)
        grid.node_ctx[NODE].node_config.update(typo)
        device = protocol.read_release_reply(_train(grid, randomizer).content).reports
        error = np.abs(device - replay[0]).mean()
        assert device.shape == replay[0].shape
        assert error > 0.5 * SIGMA_AT_3, f"replayed noise within {error:.3g} of a device's reports"


def test_a_server_that_knows_the_seed_cannot_replay_a_devices_coins(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    """Replay of all randomness, not just the Gaussian noise (OpenDP's): two devices given the same run
    (same seed, config and data) must draw different coins for Poisson sampling and randomized-response
    labels. Keyed by the run seed they would agree; by chance they agree with probability < 1e-5."""
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0, {RandomizedResponseEvent(1.0, 2): 1})
    request = protocol.release_request([0], _gaussian(sigma), 0, "poisson:0.5")
    draws = []
    for i in range(2):
        policy = _policy(tmp_path / f"p{i}.toml", epsilon_sentence=3.0, labels="rr:1.0")
        grid = _device(data, bundle, tmp_path / f"dev{i}", policy, sampling="poisson:0.5", seed=7)
        reply = protocol.read_release_reply(_send(grid, protocol.TRAIN, request).content)
        sampled = np.flatnonzero(_ledger(grid).record_counts().sum(axis=0))  # which records the coins picked
        draws.append((sampled.tolist(), reply.labels.tolist()))
    assert draws[0] != draws[1], f"two devices of the same run drew the same coins: {draws[0]}"


# -- 2. the policy, not the run config, sets what is released ------------------------------------
@pytest.mark.parametrize(
    "run,randomizer,code",
    [
        ({"epsilon": 1e6}, _gaussian(0.0043), Refusal.POLICY),  # a huge budget in the run config
        ({"sigma": 1e-4, "epsilon": 0.0}, _gaussian(1e-4), Refusal.POLICY),  # sigma that implies a budget of 1.8e9
        ({"mechanism": "texthide"}, {"mechanism": "texthide", "k": 4, "masks": 16}, Refusal.POLICY),  # no DP at all
    ],
)
def test_run_config_asking_beyond_the_policy_is_refused_with_nothing_spent(
    data: Path, bundle: np.ndarray, tmp_path: Path, run: dict, randomizer: dict, code: str
) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0)
    grid = _device(data, bundle, tmp_path / "state", policy, **run)
    refused = protocol.read_refusal(_train(grid, randomizer).content)
    assert refused is not None and refused[0] == code, refused
    assert _ledger(grid).releases() == 0


def test_labels_leave_through_the_policys_channel_whatever_the_run_says(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="rr:1.0")
    grid = _device(data, bundle, tmp_path / "state", policy, labels="public")
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0, {RandomizedResponseEvent(1.0, 2): 1})
    reply = protocol.read_release_reply(_train(grid, _gaussian(sigma)).content)
    assert reply.label_channel == {"mechanism": "randomized_response", "epsilon": 1.0, "num_values": 2}
    assert RandomizedResponseEvent(1.0, 2) in _ledger(grid).events  # and the label release is charged


def test_without_a_policy_file_the_strict_defaults_apply(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    grid = _device(data, bundle, tmp_path / "state")  # no policy: epsilon 1 per record, labels rr:1
    refused = protocol.read_refusal(_train(grid, _gaussian(SIGMA_AT_3)).content)  # costs 3 > 1
    assert refused is not None and refused[0] == Refusal.POLICY and "floor" in refused[1]


def test_a_bundle_naming_an_encoder_outside_the_policy_is_refused(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    grid = _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", epsilon_sentence=3.0))
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "encoder.txt").write_text("/home/owner/private-model")
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(pack(folder))).content)
    assert refused is not None and refused[0] == Refusal.POLICY and "encoder" in refused[1]


# -- 3. ledgers survive re-setup and new runs; memoization ---------------------------------------
def test_re_setup_and_a_new_run_keep_spending(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    state = tmp_path / "state"
    grid = _device(data, bundle, state, policy)
    first = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(first.reports) == TRAIN
    _send(grid, protocol.SETUP, protocol.setup_request(bundle))  # re-setup
    bad = _send(grid, protocol.SETUP, protocol.setup_request(np.zeros(10, np.uint8)))  # a failing re-setup
    assert protocol.read_refusal(bad.content) is not None
    again = protocol.read_release_reply(_train(grid, _gaussian(SIGMA_AT_3)).content)
    assert len(again.reports) == 0 and again.refusals[0][0] == Refusal.BUDGET
    new_run = _device(data, bundle, state, policy, seed=7)  # another run, another run id, same device
    later = protocol.read_release_reply(_train(new_run, _gaussian(SIGMA_AT_3)).content)
    assert len(later.reports) == 0 and later.refusals[0][0] == Refusal.BUDGET
    assert _ledger(new_run).record_counts().max() == 1


def test_memoized_repeats_are_free_and_identical_and_a_new_draw_is_charged(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")  # memoize: on by default
    grid = _device(data, bundle, tmp_path / "state", policy)
    noisy = _gaussian(2 * SIGMA_AT_3)  # two releases of each record fit the budget
    first = protocol.read_release_reply(_train(grid, noisy).content)
    second = protocol.read_release_reply(_train(grid, noisy).content)
    assert sorted(map(bytes, first.reports)) == sorted(map(bytes, second.reports))  # the server cannot average noise away
    assert _ledger(grid).record_counts().max() == 1
    other = protocol.read_release_reply(_train(grid, _gaussian(2 * SIGMA_AT_3, clip=0.9)).content)  # a new draw
    assert len(other.reports) == TRAIN and _ledger(grid).record_counts().sum() == 2 * TRAIN


# -- 4. concurrent messages: one charge per release ----------------------------------------------
def _train_in_process(args: tuple[int, dict, dict, dict, bool, float]) -> int:
    run_id, run_config, node_config, state, engine, sigma = args
    from flwr.app import ConfigRecord, Context

    from ldpfed.fed.device.entropy import simulation_engine

    context = Context(run_id=run_id, node_id=NODE, node_config=node_config, state=RecordDict({"node": ConfigRecord(state)}), run_config=run_config)
    message = Message(FLOWER(protocol.release_request([0], _gaussian(sigma), 0, "all")), dst_node_id=NODE, message_type=protocol.TRAIN)
    message.metadata.__dict__["_message_id"] = "m"
    with simulation_engine() if engine else _null():
        reply = client_app(message, context)
    return len(protocol.read_release_reply(reply.content).reports)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


@pytest.mark.parametrize("engine", [True, False], ids=["simulation", "device"])
def test_concurrent_messages_release_each_record_once(data: Path, bundle: np.ndarray, tmp_path: Path, engine: bool) -> None:
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public", memoize=False)
    grid = _device(data, bundle, tmp_path / "state", policy, engine=engine, labels="public")
    context = grid.node_ctx[NODE]
    node_state = dict(context.state["node"])
    # as Flower's engine does, every worker gets a copy of the node's context (same run, same node)
    args = (context.run_id, dict(context.run_config), dict(context.node_config), node_state, engine, SIGMA_AT_3)
    with multiprocessing.get_context("fork").Pool(4) as pool:
        released = pool.map(_train_in_process, [args] * 4)
    assert sum(released) == TRAIN, released  # four concurrent requests: every record released once in total
    assert _ledger(grid).record_counts().max() == 1


# -- 5. no free oracles ------------------------------------------------------------------------
def test_evaluate_gives_nothing_uncharged_on_a_device(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    from ldpfed.fed.learning.classifier import LinearModel

    dim = 384
    models = {f"m{i}": LinearModel(np.random.default_rng(i).normal(size=(dim, 2)), np.zeros(2)) for i in range(3)}
    closed = _device(data, bundle, tmp_path / "closed", _policy(tmp_path / "a.toml", epsilon_sentence=3.0))
    refused = protocol.read_refusal(_send(closed, protocol.EVALUATE, protocol.evaluate_request(models)).content)
    assert refused is not None and refused[0] == Refusal.POLICY and "evaluation" in refused[1]
    score = protocol.read_refusal(_send(closed, protocol.SCORE, RecordDict()).content)
    assert score is not None and score[0] == Refusal.POLICY
    many = {f"m{i}": models["m0"] for i in range(504)}
    refused = protocol.read_refusal(_send(closed, protocol.EVALUATE, protocol.evaluate_request(many)).content)
    assert refused is not None and "504 models" in refused[1]

    open_ = _device(data, bundle, tmp_path / "open", _policy(tmp_path / "b.toml", epsilon_sentence=3.0, evaluation="rr:1.0"))
    outcomes = protocol.read_outcomes_reply(_send(open_, protocol.EVALUATE, protocol.evaluate_request(models)).content)
    assert not outcomes.exact and outcomes.keep_probability == pytest.approx(np.e / (np.e + 1))
    assert outcomes.total == {name: DEV for name in models}
    ledger = _ledger(open_)
    queries = ledger.record_counts()[:, TRAIN:]
    assert ledger.events == [RandomizedResponseEvent(1.0, 2)] and (queries == 3).all()  # one charge per query and model
    assert ledger.sentence_epsilon() == pytest.approx(compose_epsilon({RandomizedResponseEvent(1.0, 2): 3}, DELTA))


# -- 7. accounting the report cannot under-state ----------------------------------------------
def _user(train: int, enforce: str = "worst-case") -> User:
    from ldpfed.fed.privacy.ledger import Budget
    from ldpfed.fed.randomizers.labels import PublicLabels

    rng = np.random.default_rng(0)
    records = UserRecords(rng.normal(size=(train, 4)), rng.integers(0, 2, train), rng.normal(size=(2, 4)), np.array([0, 1]))
    return User(3, records, Budget(1e6, DELTA), PublicLabels(2), seed=None, enforce=enforce)


def test_mixup_reports_are_charged_at_user_level_as_one_noise_draw_each() -> None:
    from ldpfed.fed.randomizers.instance_encoding import DPInstanceEncodingGaussian
    from ldpfed.fed.runtime.requests import ReleaseRequest

    user, clip, sigma, n = _user(12), 1.0, 4.0, 12
    randomizer = DPInstanceEncodingGaussian(k=4, max_coefficient=0.25, masks=16, clip=clip, sigma=sigma)
    user.release("train", ReleaseRequest((3,), randomizer, 0))
    per_record = compose_epsilon({randomizer.event: n}, DELTA)  # what composing the records' charges gives
    true = compose_epsilon({GaussianEvent(2 * clip, sigma): n}, DELTA)  # n reports, each moved by at most 2C
    assert user.state.ledger.user_epsilon() == pytest.approx(true)
    assert true > 2 * per_record


def test_amplified_enforcement_refuses_a_users_only_record() -> None:
    from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
    from ldpfed.fed.runtime.requests import ReleaseRequest
    from ldpfed.fed.runtime.user import BudgetExhausted

    user = _user(1, enforce="amplified")
    with pytest.raises(BudgetExhausted, match="linked"):
        user.release("train", ReleaseRequest((3,), GaussianRandomizer(1.0, 5.0), 0))
    assert user.state.ledger.releases() == 0


def test_an_invalid_mechanism_is_refused_unless_the_policy_allows_it(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    invalid = {"mechanism": "laplace-seed002", "clip": 1.0, "stated_epsilon": 0.1, "dim": 384, "allow_invalid": True}
    for allow in (False, True):
        policy = _policy(tmp_path / f"p{allow}.toml", epsilon_sentence=3.0, mechanisms=["laplace-seed002"], allow_invalid=allow, labels="public")
        grid = _device(data, bundle, tmp_path / f"state{allow}", policy)
        refused = protocol.read_refusal(_train(grid, invalid).content)
        if allow:  # allowed: served, and charged its true cost (2C sqrt(d) L1 sensitivity)
            assert refused is None and _ledger(grid).releases() == TRAIN
        else:
            assert refused is not None and refused[0] == Refusal.POLICY and "no valid guarantee" in refused[1]
            assert _ledger(grid).releases() == 0


# -- 6. noise a device can trust (issue 9, item 6) -------------------------------------------------
def test_a_device_adds_its_noise_through_opendp_and_says_so(
    data: Path, bundle: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device's Gaussian noise goes through OpenDP's sampler; a seeded engine node's does not."""
    from ldpfed.fed.privacy import noise

    built: list[tuple[str, float]] = []
    measurement = noise._opendp_measurement

    def counting(kind: str, scale: float, *grid: int | None) -> object:
        built.append((kind, scale))
        return measurement(kind, scale, *grid)

    monkeypatch.setattr(noise, "_opendp_measurement", counting)
    policy = _policy(tmp_path / "p.toml", epsilon_sentence=3.0, labels="public")
    device = _device(data, bundle, tmp_path / "dev", policy)
    reply = _send(device, protocol.SETUP, protocol.setup_request(bundle))
    assert protocol.read_setup_reply(reply.content).sampler == noise.DEVICE_SAMPLER
    assert protocol.read_refusal(_train(device, _gaussian(SIGMA_AT_3)).content) is None
    assert built == [("gaussian", SIGMA_AT_3)]
    engine = _device(data, bundle, tmp_path / "sim", engine=True, labels="public")
    assert protocol.read_setup_reply(_send(engine, protocol.SETUP, protocol.setup_request(bundle)).content).sampler == noise.ENGINE_SAMPLER
    _train(engine, _gaussian(SIGMA_AT_3))
    assert len(built) == 1


def test_textbook_float_dchi_runs_on_a_device_only_if_its_owner_names_it(data: Path, bundle: np.ndarray, tmp_path: Path) -> None:
    dchi = {"mechanism": "dchi", "clip": 1.0, "eta": 1.5}  # epsilon 3 per record
    for named in (False, True):
        extra = {"mechanisms": ["gaussian", "dchi"]} if named else {}
        grid = _device(data, bundle, tmp_path / f"state{named}", _policy(tmp_path / f"p{named}.toml", epsilon_sentence=3.0, labels="public", **extra))
        refused = protocol.read_refusal(_train(grid, dchi).content)
        if named:
            assert refused is None and _ledger(grid).releases() == TRAIN
        else:
            assert refused is not None and refused[0] == Refusal.POLICY and "dchi" in refused[1]
            assert _ledger(grid).releases() == 0
