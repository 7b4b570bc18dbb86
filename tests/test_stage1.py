"""Stage 1 for MiniLM as a hostile request (design.md section 2b): the server ships fine-tuned layers,
and a node takes them only when its owner's policy lists their fingerprint, only as safetensors of the
base model's own layer shapes, finite, within the size caps; checked before any file is loaded or written."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from ldpfed.fed.runtime import assets
from ldpfed.fed.runtime.assets import build_bundle, load_assets, pack, unpack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.encoders.hf import HFEncoder, minilm_path
from ldpfed.fed.encoders.tuned import (
    FORMAT, MAX_FILE_BYTES, TUNED_FILE, TUNED_SPEC, TunedEncoder, finetune, read_tuned, tuned_bytes, weights_fingerprint,
)
from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.device.policy import DevicePolicy
from tests.conftest import write_review_folder

SENTENCES = ["a great film, truly", "an awful film, sadly", "lovely acting and story", "boring and terrible plot"]


@pytest.fixture(scope="module")
def base_model():
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(minilm_path()), local_files_only=True).eval()


@pytest.fixture(scope="module")
def one_layer(base_model) -> bytes:
    """A well-formed shipped file: the base model's own top layer."""
    return tuned_bytes(base_model, 1)


def _bundle(folder: Path, weights: bytes | None, spec: str = TUNED_SPEC) -> np.ndarray:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "encoder.txt").write_text(spec)
    if weights is not None:
        (folder / TUNED_FILE).write_bytes(weights)
    return pack(folder)


def _accept(policy: DevicePolicy):
    """What a device's setup does with the bundle's spec and digests (clients.app._setup's accept)."""

    def accept(spec: str, digests) -> None:
        refused = policy.bundle_refusal(spec, digests)
        if refused:
            raise PermissionError(refused)

    return accept


def _safetensors(tensors: dict[str, torch.Tensor], layers: str = "1", fmt: str = FORMAT) -> bytes:
    from safetensors.torch import save

    return save(tensors, metadata={"format": fmt, "layers": layers})


def _unread(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail the test if any shipped weights are parsed; returns the list of parse attempts."""
    calls: list[str] = []

    def spy(*args, **kwargs):
        calls.append("read")
        raise AssertionError("shipped weights were read before the policy allowed them")

    monkeypatch.setattr(assets, "read_tuned", spy)
    return calls


def test_unknown_fingerprint_refused_before_reading(tmp_path: Path, one_layer: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _unread(monkeypatch)
    bundle = _bundle(tmp_path / "b", one_layer)
    other = weights_fingerprint(b"some other weights")
    for policy in (DevicePolicy(), DevicePolicy(tuned_encoders=(other,))):
        with pytest.raises(PermissionError, match="shipped encoder weights .* not allowed"):
            unpack(bundle, tmp_path / "cache", _accept(policy))
    assert calls == [] and not (tmp_path / "cache").exists()


def test_tuned_needs_minilm_allowed_and_its_weights(tmp_path: Path, one_layer: bytes) -> None:
    allowed = (weights_fingerprint(one_layer),)
    with pytest.raises(PermissionError, match="not allowed"):
        unpack(_bundle(tmp_path / "a", one_layer), tmp_path / "cache", _accept(DevicePolicy(encoders=("bilstm",), tuned_encoders=allowed)))
    with pytest.raises(PermissionError, match="needs its weights"):
        unpack(_bundle(tmp_path / "b", None), tmp_path / "cache", _accept(DevicePolicy(tuned_encoders=allowed)))
    # weights smuggled beside another encoder name are still checked by fingerprint
    with pytest.raises(PermissionError, match="not allowed"):
        unpack(_bundle(tmp_path / "c", one_layer, spec="minilm"), tmp_path / "cache", _accept(DevicePolicy()))
    assert not (tmp_path / "cache").exists()


def test_policy_fingerprints_are_checked() -> None:
    with pytest.raises(ValueError, match="tuned_encoders must be a list of SHA-256"):
        DevicePolicy(tuned_encoders=("abc",))
    text = DevicePolicy(tuned_encoders=("a" * 64,)).to_toml()
    assert 'tuned_encoders = [\n    "' + "a" * 64 in text or f'tuned_encoders = ["{"a" * 64}"]' in text


def test_oversized_refused(tmp_path: Path, one_layer: bytes) -> None:
    allowed = DevicePolicy(tuned_encoders=(weights_fingerprint(one_layer),), max_bundle_bytes=len(one_layer) // 2)
    with pytest.raises(ValueError, match="exceeds"):
        unpack(_bundle(tmp_path / "b", one_layer), tmp_path / "cache", _accept(allowed), allowed.max_bundle_bytes)
    big = b"\0" * (MAX_FILE_BYTES + 1)
    with pytest.raises(ValueError, match="more than shipped weights may have"):
        read_tuned(big, None)
    assert not (tmp_path / "cache").exists()


class _Payload:
    """Unpickling this writes a marker file: code from the server would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))


def test_pickle_refused_even_when_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    buffer = io.BytesIO()
    torch.save({"encoder.layer.5.output.dense.weight": _Payload(marker)}, buffer)
    for data in (buffer.getvalue(), pickle.dumps(_Payload(marker))):
        policy = DevicePolicy(tuned_encoders=(weights_fingerprint(data),))
        with pytest.raises(ValueError, match="not a safetensors file"):
            unpack(_bundle(tmp_path / "b", data), tmp_path / "cache", _accept(policy))
    assert not marker.exists() and not (tmp_path / "cache" / "assets").exists()


def _layer(one_layer: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load

    return load(one_layer)


@pytest.mark.parametrize(
    "case, match",
    [
        ("nan", "NaN or infinite"),
        ("inf", "NaN or infinite"),
        ("float16", "must be float32"),
        ("embeddings", "do not fit"),
        ("shape", "do not fit"),
        ("missing", "do not fit"),
        ("format", "not an ldpfed tuned encoder"),
        ("layers", "layers must be an integer"),
    ],
)
def test_bad_weights_refused_even_when_allowed(tmp_path: Path, one_layer: bytes, case: str, match: str) -> None:
    tensors = _layer(one_layer)
    name = "encoder.layer.5.output.dense.weight"
    layers, fmt = "1", FORMAT
    if case in ("nan", "inf"):
        tensors[name][0, 0] = float(case)
    elif case == "float16":
        tensors[name] = tensors[name].half()
    elif case == "embeddings":  # the server swaps an embedding table the user's text goes through
        tensors["embeddings.position_embeddings.weight"] = torch.zeros(512, 384)
    elif case == "shape":
        tensors[name] = torch.zeros(384, 384)
    elif case == "missing":
        del tensors[name]
    elif case == "format":
        fmt = "denoiser"
    elif case == "layers":
        layers = "99"
    data = _safetensors(tensors, layers, fmt)
    policy = DevicePolicy(tuned_encoders=(weights_fingerprint(data),))
    with pytest.raises(ValueError, match=match):
        unpack(_bundle(tmp_path / "b", data), tmp_path / "cache", _accept(policy))
    assert not (tmp_path / "cache" / "assets").exists()


def _pooled(model, texts: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    with torch.inference_mode():
        inputs = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        states = model(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).float()
        return ((states * mask).sum(1) / mask.sum(1)).numpy()


def test_public_only_finetune_ships_and_loads_when_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_bundle fine-tunes on the public records alone (no private record reaches it); a node whose
    policy lists the shipped fingerprint loads it and encodes exactly as the fine-tuned model does."""
    (tmp_path / "public").mkdir()
    (tmp_path / "task").mkdir()
    public = write_review_folder(tmp_path / "public", {"train": 64}, "pub", seed=1)
    task = write_review_folder(tmp_path / "task", {"train": 40, "dev": 10}, "CANARY", seed=2)
    seen: list[tuple[str, ...]] = []
    models = []

    def spy(base, texts, labels, num_labels, **kwargs):
        seen.append(tuple(texts))
        model = finetune(base, texts, labels, num_labels, layers=kwargs.get("layers", 6), epochs=1, batch_size=16, seed=0)
        models.append(model)
        return model

    monkeypatch.setattr(assets, "finetune", spy)
    config = RunSpec.of(data=str(task), public=str(public), encoder=TUNED_SPEC, dim=0)
    bundle = build_bundle(config, assets.load_public(config), tmp_path / "server-cache")
    assert seen == [load_dataset(str(public), "train").texts]
    assert not any("CANARY" in text for texts in seen for text in texts)

    with assets.unpacked(bundle, tmp_path / "cache", lambda spec, digests: None) as folder:
        shipped = (folder / TUNED_FILE).read_bytes()
    policy = DevicePolicy(tuned_encoders=(weights_fingerprint(shipped),))
    folder = unpack(bundle, tmp_path / "device-cache", _accept(policy))
    encoder = load_assets(folder).encoder
    assert isinstance(encoder, TunedEncoder)
    got = encoder.encode(SENTENCES)
    want = _pooled(models[0], SENTENCES)
    base = HFEncoder(minilm_path()).encode(SENTENCES)
    assert np.abs(got - want).max() < 1e-4
    assert np.abs(got - base).max() > 1e-2  # the fine-tune changed the encodings
    assert encoder.fingerprint() != HFEncoder(minilm_path()).fingerprint()
