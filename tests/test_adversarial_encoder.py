"""The server names an encoder through the run's mechanism options (issue 24, finding 2).

A device whose policy allows its bundle's encoder (``tokens:4:minilm``, Split-N-Denoise) is
asked, through ``mechanism-options=length=4,encoder=X``, to make X the plan's encoder. X is a
local folder whose config.json holds a canary (the refusal must not read it back: a probe of
the device's files) or a Hub id (the device must not go on the network). The device must load
nothing but its bundle's encoder, open nothing under X and refuse with code ``policy``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed import protocol
from ldpfed.fed.device.state import init_state
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.runtime.assets import pack
from ldpfed.fed.encoders import factory
from ldpfed.fed.randomizers.split_denoise import DENOISER_FILE, SplitDenoiseRandomizer
from ldpfed.fed.runtime.requests import Refusal
from ldpfed.simulations.local_grid import LocalGrid
from tests.test_adversarial_server import NODE, _device, _ledger, _policy, _send
from tests.test_adversarial_server import data  # noqa: F401 (the device's data folder, a fixture)

CANARY = "ldpfed-canary-model-type-5c1e"
LENGTH = 4
RUN = dict(mechanism="snd", epsilon=20000.0, mechanism_options=f"length={LENGTH}")
NETWORK_EVENTS = ("socket.getaddrinfo", "socket.gethostbyname", "socket.connect")


class _Watch:
    """What this process opens under the watched folders, and its network attempts (blocked)."""

    folders: tuple[str, ...] = ()
    opened: list[str] = []
    network: list[str] = []
    installed = False

    @classmethod
    def start(cls, folder: Path) -> None:
        """Watch ``folder`` (and the network) from now on."""
        cls.folders, cls.opened, cls.network = (str(folder),), [], []

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        """An audit hook (sys.addaudithook): record a watched open, record and refuse a network attempt."""
        if not cls.folders:
            return
        if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(cls.folders):
                cls.opened.append(path)
        elif event in NETWORK_EVENTS:
            cls.network.append(f"{event}{args[:2]!r}")
            raise OSError(f"network blocked by the test: {event}")


@pytest.fixture
def watch() -> Iterator[type[_Watch]]:
    """Opens under a folder and network attempts (blocked), from :meth:`_Watch.start` to the end of the test."""
    if not _Watch.installed:
        sys.addaudithook(_Watch.hook)  # audit hooks stay for the process: idle unless a test watches
        _Watch.installed = True
    yield _Watch
    _Watch.folders = ()


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every encoder spec the node asks fed.encoders to build (the real factory still builds it)."""
    specs: list[str] = []
    real = factory.make_encoder

    def recording(spec: str = "minilm", *args: Any, **kwargs: Any) -> Any:
        specs.append(spec)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(factory, "make_encoder", recording)
    return specs


@pytest.fixture(scope="module")
def snd_bundle(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """A Split-N-Denoise bundle the policy allows: token matrices of MiniLM at 4 positions, and a denoiser."""
    from ldpfed.fed.learning.denoiser import Denoiser, DenoiserShape

    folder = tmp_path_factory.mktemp("snd-bundle")
    (folder / "encoder.txt").write_text(f"tokens:{LENGTH}:minilm")
    (folder / DENOISER_FILE).write_bytes(Denoiser(DenoiserShape(dim=384, length=LENGTH)).to_bytes())
    return pack(folder)


def _hostile(tmp_path: Path, variant: str, watch: type[_Watch]) -> str:
    """The encoder the server names: a local model folder with a canary, or a Hub id; watched from now on."""
    folder = tmp_path / "private-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": CANARY, "hidden_size": 8}))
    watch.start(folder)
    return "ldpfed-attacker/probe-model" if variant == "hub-id" else str(folder)


def _snd_device(data: Path, bundle: np.ndarray, tmp_path: Path, **policy: object) -> LocalGrid:
    values = {"epsilon_sentence": 20000.0, "mechanisms": ["snd"], "labels": "public", **policy}
    return _device(data, bundle, tmp_path / "state", _policy(tmp_path / "p.toml", **values), labels="public", **RUN)


def _name_encoder(grid: LocalGrid, encoder: str) -> None:
    """The server's run config from now on: the same run, its options naming ``encoder``."""
    grid.node_ctx[NODE].run_config["mechanism-options"] = f"length={LENGTH},encoder={encoder}"


def _assert_refused_unseen(refused: tuple[str, str] | None, encoder: str, loaded: list[str], watch: type[_Watch]) -> None:
    seen = {
        "loaded": [spec for spec in loaded if encoder in spec],
        "opened": watch.opened,
        "network": watch.network,
        "canary in reply": refused is not None and CANARY in refused[1],
    }
    assert seen == {"loaded": [], "opened": [], "network": [], "canary in reply": False}, seen
    assert refused is not None and refused[0] == Refusal.POLICY and "encoder" in refused[1], refused


@pytest.mark.parametrize("variant", ["local-path", "hub-id"])
def test_evaluate_with_no_models_loads_no_encoder_the_run_names(
    data: Path, snd_bundle: np.ndarray, tmp_path: Path, variant: str, watch: type[_Watch], loaded: list[str]
) -> None:
    grid = _snd_device(data, snd_bundle, tmp_path)  # evaluation = "none"
    encoder = _hostile(tmp_path, variant, watch)
    _name_encoder(grid, encoder)
    refused = protocol.read_refusal(_send(grid, protocol.EVALUATE, protocol.evaluate_request({})).content)
    _assert_refused_unseen(refused, encoder, loaded, watch)


@pytest.mark.parametrize("kind", ["train", "query"])
@pytest.mark.parametrize("variant", ["local-path", "hub-id"])
def test_a_release_loads_no_encoder_the_run_names(
    data: Path, snd_bundle: np.ndarray, tmp_path: Path, variant: str, kind: str, watch: type[_Watch], loaded: list[str]
) -> None:
    """The request names the same encoder as the run (so it passes the pin); train asks for sums, which decode."""
    grid = _snd_device(data, snd_bundle, tmp_path)
    encoder = _hostile(tmp_path, variant, watch)
    _name_encoder(grid, encoder)
    randomizer = SplitDenoiseRandomizer(10.0, LENGTH, encoder, 1.7, 26.2).params()  # one release: epsilon 136
    message, summarise = (protocol.TRAIN, True) if kind == "train" else (protocol.RELEASE, False)
    reply = _send(grid, message, protocol.release_request([0], randomizer, 0, "all", summarise=summarise))
    _assert_refused_unseen(protocol.read_refusal(reply.content), encoder, loaded, watch)
    _name_encoder(grid, "minilm")
    assert _ledger(grid).releases() == 0


@pytest.mark.parametrize("variant", ["local-path", "hub-id"])
def test_setup_refuses_a_run_whose_options_name_another_encoder(
    data: Path, snd_bundle: np.ndarray, tmp_path: Path, variant: str, watch: type[_Watch], loaded: list[str]
) -> None:
    grid = _snd_device(data, snd_bundle, tmp_path)
    encoder = _hostile(tmp_path, variant, watch)
    _name_encoder(grid, encoder)
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(snd_bundle)).content)
    _assert_refused_unseen(refused, encoder, loaded, watch)


def test_a_device_keeps_off_the_hub(
    data: Path, snd_bundle: np.ndarray, tmp_path: Path, watch: type[_Watch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even an encoder the owner allowed by Hub id loads from the local cache only: no request leaves."""
    from huggingface_hub import constants

    from ldpfed.fed.encoders.hf import HFEncoder

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # as imported before the device started
    _snd_device(data, snd_bundle, tmp_path)  # its setup message is the device's first
    assert [os.environ.get(n) for n in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")] == ["1"] * 3
    watch.start(tmp_path / "nothing")
    with pytest.raises(ValueError):
        HFEncoder("ldpfed-attacker/probe-model").dim
    assert watch.network == []


# -- issue 39, finding 3: one resolver from an encoder name to what a device loads ----------------
def _bare_device(data: Path, state: Path, policy: Path | None = None, **run: object) -> LocalGrid:
    """A device its owner initialised, not yet set up; the run config is the server's."""
    values: dict[str, object] = dict(data="generated:400", public="none", dim=0, clip=1.0, users=1, nodes=1, rounds=1, epsilon=3.0)
    values.update(run)
    init_state(state)
    node_config = {"data": str(data), "state-dir": str(state)}
    if policy is not None:
        node_config["policy"] = str(policy)
    return LocalGrid(client_app, 1, RunSpec.from_mapping(values).to_mapping(), engine=False, node_configs=[node_config])


def _planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, watch: type[_Watch]) -> Path:
    """The node's working directory, holding a model folder ``name`` with a canary in its config.json; watched from now on."""
    cwd = tmp_path / "cwd"
    folder = cwd / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": CANARY, "hidden_size": 8}))
    monkeypatch.chdir(cwd)
    watch.start(folder)
    return folder


def _bundle_of(folder: Path, spec: str, denoiser: bool = False) -> np.ndarray:
    """A bundle whose encoder.txt is ``spec`` (and, for snd, a denoiser of LENGTH tokens)."""
    from ldpfed.fed.learning.denoiser import Denoiser, DenoiserShape

    folder.mkdir(parents=True)
    (folder / "encoder.txt").write_text(spec)
    if denoiser:
        (folder / DENOISER_FILE).write_bytes(Denoiser(DenoiserShape(dim=384, length=LENGTH)).to_bytes())
    return pack(folder)


HIJACKS = {  # variant -> (run config, the owner's policy or None for the strict defaults, encoder.txt, the name planted)
    "tokens-bilstm": ({"encoder": f"tokens:{LENGTH}:bilstm"}, None, f"tokens:{LENGTH}:bilstm", "bilstm"),
    "tokens-minilm-tuned": ({"encoder": f"tokens:{LENGTH}:minilm-tuned"}, None, f"tokens:{LENGTH}:minilm-tuned", "minilm-tuned"),
    "snd-options": (
        {**RUN, "mechanism_options": f"length={LENGTH},encoder=bilstm"},
        {"epsilon_sentence": 20000.0, "mechanisms": ["snd"], "labels": "public"},
        f"tokens:{LENGTH}:bilstm",
        "bilstm",
    ),
}


@pytest.mark.parametrize("variant", sorted(HIJACKS))
def test_a_built_in_name_never_loads_from_the_working_directory(
    data: Path, tmp_path: Path, variant: str, watch: type[_Watch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tokens:4:bilstm`` and ``tokens:4:minilm-tuned`` passed the policy on their base name and then loaded
    ``./bilstm`` (or ``./minilm-tuned``) from the node's working directory as a Hugging Face model; the snd variant
    names bilstm through mechanism-options. The resolver maps built-in names to what they are (the BiLSTM a bundle
    ships, MiniLM with shipped layers), neither of which makes a token matrix: refused, nothing opened."""
    run, policy, spec, name = HIJACKS[variant]
    bundle = _bundle_of(tmp_path / "bundle", spec, denoiser="snd" in variant)
    grid = _bare_device(data, tmp_path / "state", None if policy is None else _policy(tmp_path / "p.toml", **policy), **run)
    folder = _planted(tmp_path, monkeypatch, name, watch)
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content)
    _assert_refused_unseen(refused, str(folder), [], watch)
    assert "node" not in grid.node_ctx[NODE].state.config_records


@pytest.mark.parametrize("name", ["minilm-tuned", f"tokens:{LENGTH}:minilm-tuned", f"tokens:{LENGTH}:bilstm", "tokens:4:bilstm:/abs"])
def test_the_policy_maps_a_built_in_name_to_what_it_is_not_to_its_spelling(name: str) -> None:
    """minilm-tuned goes by the digest of shipped weights, which come with encoder.txt 'minilm-tuned' only; a
    token matrix needs a transformer, which bilstm is not. The strict defaults list both base names."""
    from ldpfed.fed.device.policy import DevicePolicy

    policy = DevicePolicy()
    assert policy.bundle_refusal(name, {}) is not None
    if name != "minilm-tuned":  # the name alone (a run's plan) refers to the bundle's checked weights
        assert policy.encoder_refusal(name) is not None
    assert policy.encoder_refusal(f"tokens:{LENGTH}:minilm") is None and policy.encoder_refusal("bilstm") is None


@pytest.mark.parametrize("name", ["bilstm", "minilm-tuned", f"tokens:{LENGTH}:bilstm"])
def test_the_experimenter_s_built_in_names_are_not_paths_either(
    tmp_path: Path, name: str, watch: type[_Watch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a bundle ``bilstm`` and ``minilm-tuned`` name no files (``bilstm:<folder>`` does): an error naming
    what to write, never ``./bilstm`` as a Hugging Face model, in a simulation's own process too."""
    from ldpfed.fed.encoders.factory import make_encoder

    _planted(tmp_path, monkeypatch, name.rpartition(":")[2], watch)
    with pytest.raises(ValueError, match="bundle|transformer"):
        make_encoder(name).dim
    assert watch.opened == []


@pytest.mark.parametrize("listed", ["ldpfed-owner/model", "./ldpfed-owner/model", "ldpfed-owner/../ldpfed-owner/model"])
def test_a_name_the_owner_allows_is_never_looked_up_in_the_working_directory(
    data: Path, tmp_path: Path, listed: str, watch: type[_Watch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner lists a Hub id (loaded from the local Hugging Face cache only) or a relative path (refused: the
    owner writes an absolute one). A folder of that name in the node's working directory is never opened."""
    policy = _policy(tmp_path / "p.toml", encoders=["minilm", listed])
    bundle = _bundle_of(tmp_path / "bundle", listed)
    grid = _bare_device(data, tmp_path / "state", policy, encoder=listed)
    _planted(tmp_path, monkeypatch, "ldpfed-owner/model", watch)
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content)
    assert {"opened": watch.opened, "network": watch.network} == {"opened": [], "network": []}
    assert refused is not None and CANARY not in refused[1] and "encoder" in refused[1], refused
    assert "node" not in grid.node_ctx[NODE].state.config_records


@pytest.mark.parametrize("weights", [None, b"not a safetensors file"])
def test_an_encoder_the_owner_names_that_does_not_load_is_a_refusal(data: Path, tmp_path: Path, weights: bytes | None) -> None:
    """A folder the owner's policy names by absolute path, with a config.json but no weights (or weights and no
    tokenizer): setup is refused with a reason (the details go to the node's log), not an unhandled OSError."""
    folder = tmp_path / "owner-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    if weights is not None:
        (folder / "model.safetensors").write_bytes(weights)
    policy = _policy(tmp_path / "p.toml", encoders=["minilm", str(folder)])
    grid = _bare_device(data, tmp_path / "state", policy, encoder=str(folder))
    refused = protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(_bundle_of(tmp_path / "bundle", str(folder)))).content)
    assert refused is not None and refused[0] == Refusal.NOT_SET_UP and "cannot be loaded" in refused[1], refused
    assert "node" not in grid.node_ctx[NODE].state.config_records


def _hub_cache(cache: Path, repo: str, files: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local Hugging Face cache holding ``repo`` (its files linked from ``files``), as the owner's process sees it."""
    from huggingface_hub import constants

    commit = "0" * 40
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    for path in files.rglob("*"):
        if path.is_file():
            (snapshot / path.relative_to(files)).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / path.relative_to(files)).symlink_to(path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))


def test_an_encoder_the_options_name_resolves_as_the_bundle_s_does(
    data: Path, tmp_path: Path, watch: type[_Watch], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner allows a Hub id; the bundle (``tokens:4:<id>``) and snd's ``encoder`` option name it. Setup loads
    it from the local Hugging Face cache, and so does the train message whose sums snd decodes with that
    encoder's upper layers: a folder of that name in the node's working directory is opened by neither."""
    from ldpfed.fed.encoders.hf import minilm_path

    repo = "ldpfed-owner/model"
    _hub_cache(tmp_path / "hf-cache", repo, minilm_path(), monkeypatch)
    policy = _policy(tmp_path / "p.toml", encoders=["minilm", repo], epsilon_sentence=20000.0, mechanisms=["snd"], labels="public")
    run = {**RUN, "mechanism_options": f"length={LENGTH},encoder={repo}"}
    bundle = _bundle_of(tmp_path / "bundle", f"tokens:{LENGTH}:{repo}", denoiser=True)
    grid = _bare_device(data, tmp_path / "state", policy, **run)
    _planted(tmp_path, monkeypatch, repo, watch)
    assert protocol.read_refusal(_send(grid, protocol.SETUP, protocol.setup_request(bundle)).content) is None
    randomizer = SplitDenoiseRandomizer(10.0, LENGTH, repo, 1.7, 26.2).params()
    reply = _send(grid, protocol.TRAIN, protocol.release_request([0], randomizer, 0, "all", summarise=True))
    assert protocol.read_refusal(reply.content) is None
    assert {"opened": watch.opened, "network": watch.network} == {"opened": [], "network": []}
    assert _ledger(grid).releases() > 0


def test_shipped_layers_load_on_a_device_by_their_digest_only(tmp_path: Path) -> None:
    """A device loading ``minilm-tuned`` checks the file it loads against ``tuned_encoders`` again (the bundle's
    digests were checked at setup); the experimenter's own bundle needs no listing."""
    from ldpfed.fed.device.policy import DevicePolicy
    from ldpfed.fed.encoders import resolver
    from ldpfed.fed.encoders.base import EncoderRefused
    from ldpfed.fed.encoders.tuned import TUNED_FILE, TunedEncoder, weights_fingerprint

    (tmp_path / TUNED_FILE).write_bytes(b"shipped layers")
    listed = DevicePolicy(tuned_encoders=(weights_fingerprint(b"shipped layers"),))
    other = DevicePolicy(tuned_encoders=(weights_fingerprint(b"other layers"),))
    with pytest.raises(EncoderRefused, match="not allowed") as refused:
        resolver.load_encoder("minilm-tuned", other, bundle=tmp_path)
    assert not refused.value.unavailable
    assert isinstance(resolver.load_encoder("minilm-tuned", listed, bundle=tmp_path), TunedEncoder)
    assert isinstance(resolver.load_encoder("minilm-tuned", None, bundle=tmp_path), TunedEncoder)
    with pytest.raises(EncoderRefused, match="bundle"):
        resolver.load_encoder("minilm-tuned", listed)


@pytest.mark.parametrize("sampler, clip, l1_clip", [("dchi", 0.5, 30.0), ("coordinate", 0.5, 5.0)])
def test_a_devices_snd_release_is_its_requests_domain_and_charged_its_true_event(
    data: Path, snd_bundle: np.ndarray, tmp_path: Path, sampler: str, clip: float, l1_clip: float
) -> None:
    """A server's snd request picks the sampler and the domain: what leaves the device is word rows within that
    domain's post-clip with the mask flags, and the device's ledger charges exactly the request's own event
    (the authors' sampler at its L1 diameter, not the seed's L2 figure)."""
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer

    grid = _snd_device(data, snd_bundle, tmp_path)
    randomizer = SplitDenoiseRandomizer(50.0, LENGTH, "minilm", clip, l1_clip, sampler)
    reply = protocol.read_release_reply(_send(grid, protocol.TRAIN, protocol.release_request([0], randomizer.params(), 1, "all")).content)
    reports = np.asarray(reply.reports)
    assert reports.shape[1] == LENGTH * 385
    mask, rows = reports.reshape(len(reports), LENGTH, 385)[:, :, 0], reports.reshape(len(reports), LENGTH, 385)[:, :, 1:]
    assert np.isin(mask, (0.0, 1.0)).all() and np.all(rows[mask == 0] == 0)
    assert np.linalg.norm(rows, axis=2).max() <= clip * (1 + 1e-6)  # the post-clip to the request's C
    ledger = _ledger(grid)
    assert ledger.releases() == len(reports) > 0
    one = compose_epsilon({randomizer.event: 1}, 1e-5)
    assert ledger.sentence_epsilon() == pytest.approx(one, rel=1e-6)
    seed_figure = LENGTH * randomizer.claimed_epsilon_per_token()
    assert (one > 5 * seed_figure) == (sampler == "coordinate")  # 2 l1_clip against 2C, per row
