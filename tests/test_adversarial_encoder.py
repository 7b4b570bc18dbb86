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

from fed import protocol
from fed.runtime.assets import pack
from fed.encoders import factory
from fed.randomizers.split_denoise import DENOISER_FILE, SplitDenoiseRandomizer
from fed.runtime.requests import Refusal
from simulations.local_grid import LocalGrid
from tests.test_adversarial_server import NODE, _device, _ledger, _policy, _send
from tests.test_adversarial_server import data  # noqa: F401 (the device's data folder, a fixture)

CANARY = "ldpfed-canary-model-type-5c1e"
LENGTH = 4
RUN = dict(mechanism="snd", clip=12.0, epsilon=20000.0, mechanism_options=f"length={LENGTH}")
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
    from fed.learning.denoiser import Denoiser, DenoiserShape

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
    randomizer = SplitDenoiseRandomizer(12.0, 10.0, LENGTH, encoder).params()  # one release: epsilon 960
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

    from fed.encoders.hf import HFEncoder

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # as imported before the device started
    _snd_device(data, snd_bundle, tmp_path)  # its setup message is the device's first
    assert [os.environ.get(n) for n in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")] == ["1"] * 3
    watch.start(tmp_path / "nothing")
    with pytest.raises(ValueError):
        HFEncoder("ldpfed-attacker/probe-model").dim
    assert watch.network == []
