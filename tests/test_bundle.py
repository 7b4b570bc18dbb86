"""The setup bundle as a hostile request (design.md section 2b): ``unpack`` refuses bombs,
links, escapes, unknown files and bad arrays before writing anything, and ``build_bundle``
leaves no temporary folder behind."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ldpfed.fed.runtime import assets
from ldpfed.fed.runtime.assets import MAX_UNPACKED_BYTES, build_bundle, load_assets, pack, unpack
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.encoders.bilstm import BiLSTMEncoder
from ldpfed.fed.encoders.bilstm_net import BiLSTMNet
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.encoders.vocab import Vocab

PROJECTION = PCAProjection.fit(np.random.default_rng(0).normal(size=(50, 8)), 4)
MINILM_DIM = 384


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


PROJECTION_NPZ = _npz(mean=PROJECTION.mean, components=PROJECTION.components)


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> np.ndarray:
    """A plain tar of the given headers and contents, headers written verbatim (they may lie)."""
    buffer = io.BytesIO()
    for info, content in members:
        buffer.write(info.tobuf(tarfile.GNU_FORMAT))
        buffer.write(content + bytes(-len(content) % tarfile.BLOCKSIZE))
    buffer.write(bytes(2 * tarfile.BLOCKSIZE))
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def _file(name: str, content: bytes, size: int | None = None) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content) if size is None else size
    return info, content


def _special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info, b""


def _bundle(files: dict[str, bytes]) -> np.ndarray:
    return _tar(*(_file(name, content) for name, content in files.items()))


def _bilstm_files() -> dict[str, bytes]:
    """The files of a tiny untrained BiLSTM (vocabulary 5, embedding 4, dim 6), as shipped under bilstm/."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = BiLSTMEncoder(BiLSTMNet(5, 4, 3), Vocab(("<pad>", "<unk>", "<sep>", "good", "bad")))
    with tempfile.TemporaryDirectory() as temp:
        folder = encoder.save(Path(temp) / "bilstm")
        return {f"bilstm/{p.name}": p.read_bytes() for p in folder.iterdir()}


def _weights(state: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for folders)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _refused(bundle: np.ndarray, cache: Path, reason: str) -> None:
    """``unpack`` raises ValueError naming ``reason`` and the cache is left as it was."""
    before = _tree(cache) if cache.exists() else None
    with pytest.raises(ValueError, match=reason):
        unpack(bundle, cache)
    assert (_tree(cache) if cache.exists() else None) == before  # no staging folder, nothing altered


def test_valid_bundle_round_trips(tmp_path: Path) -> None:
    projection = PCAProjection.fit(np.random.default_rng(0).normal(size=(50, MINILM_DIM)), 4)
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "encoder.txt").write_text("minilm")
    projection.save(folder / "projection.npz")
    bundle = pack(folder)
    os.utime(folder / "encoder.txt", (0, 12345))
    assert np.array_equal(pack(folder), bundle)  # deterministic: mtimes do not enter
    cache = tmp_path / "cache"
    unpacked = unpack(bundle, cache)
    assert unpack(bundle, cache) == unpacked
    assert sorted(p.name for p in unpacked.iterdir()) == ["encoder.txt", "projection.npz"]
    assert [p.name for p in cache.iterdir()] == ["assets"]  # no staging folder left
    loaded = load_assets(unpacked)
    assert loaded.encoder.name == "minilm" and loaded.encoder.dim == MINILM_DIM
    assert loaded.projection is not None and loaded.projection.fingerprint() == projection.fingerprint()
    np.testing.assert_array_equal(loaded.projection.components, projection.components)
    np.testing.assert_array_equal(loaded.projection.mean, projection.mean)


def test_projection_must_fit_the_encoder_at_load(tmp_path: Path) -> None:
    folder = unpack(_bundle({"encoder.txt": b"minilm", "projection.npz": PROJECTION_NPZ}), tmp_path)
    with pytest.raises(ValueError, match=f"projection expects 8 dims, encoder 'minilm' gives {MINILM_DIM}"):
        load_assets(folder)


def test_bilstm_bundle_round_trips(tmp_path: Path) -> None:
    files = _bilstm_files()
    projection = PCAProjection.fit(np.random.default_rng(1).normal(size=(30, 6)), 2)
    bundle = _bundle({"encoder.txt": b"bilstm", **files, "projection.npz": _npz(mean=projection.mean, components=projection.components)})
    loaded = load_assets(unpack(bundle, tmp_path))
    shipped = BiLSTMEncoder.from_saved({k.removeprefix("bilstm/"): v for k, v in files.items()})
    assert loaded.encoder.fingerprint() == shipped.fingerprint() and loaded.encoder.dim == 6
    assert loaded.projection is not None and loaded.projection.fingerprint() == projection.fingerprint()


def test_gzip_bomb_is_refused_with_nothing_written(tmp_path: Path) -> None:
    big = MAX_UNPACKED_BYTES + 2**20
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("projection.npz")
        info.size = big
        tar.addfile(info, io.BytesIO(bytes(big)))
    bomb = np.frombuffer(buffer.getvalue(), dtype=np.uint8)
    assert bomb.nbytes < big // 100 and gzip.decompress(bomb.tobytes())  # small, and a real bomb
    _refused(bomb, tmp_path / "cache", r"not a plain \(uncompressed\) tar")
    assert not (tmp_path / "cache").exists()


def test_lying_sizes_are_refused_before_reading(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _refused(_tar(_file("encoder.txt", b"", size=2**40)), cache, f"exceed {MAX_UNPACKED_BYTES} bytes unpacked")
    _refused(_tar(_file("encoder.txt", b"minilm", size=10_000)), cache, "unexpected end of data")
    assert not cache.exists()


@pytest.mark.parametrize(
    "member,reason",
    [
        (_special("encoder.txt", tarfile.SYMTYPE, "/etc/passwd"), "'encoder.txt' is not a regular file"),
        (_special("encoder.txt", tarfile.LNKTYPE, "/etc/passwd"), "'encoder.txt' is not a regular file"),
        (_special("bilstm", tarfile.DIRTYPE), "'bilstm' is not a regular file"),
        (_special("encoder.txt", tarfile.FIFOTYPE), "'encoder.txt' is not a regular file"),
        (_special("encoder.txt", tarfile.CHRTYPE), "'encoder.txt' is not a regular file"),
        (_file("../escape.txt", b"x"), "'../escape.txt' points outside the bundle"),
        (_file("bilstm/../../escape.txt", b"x"), "points outside the bundle"),
        (_file("/tmp/abs.txt", b"x"), "'/tmp/abs.txt' points outside the bundle"),
        (_file("notes.txt", b"x"), "'notes.txt' is unknown"),
        (_file("encoder.txt", b"minilm"), "'encoder.txt' appears twice"),
    ],
)
def test_hostile_members_are_refused(tmp_path: Path, member: tuple[tarfile.TarInfo, bytes], reason: str) -> None:
    cache = tmp_path / "sub" / "cache"
    _refused(_tar(_file("encoder.txt", b"minilm"), member), cache, reason)
    assert not cache.exists() and not (tmp_path / "sub" / "escape.txt").exists() and not (tmp_path / "escape.txt").exists()


def test_sparse_member_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("encoder.txt")
    info.type = tarfile.GNUTYPE_SPARSE
    _refused(_tar((info, b"")), tmp_path, "not a regular file")


def _scaled(factor: float) -> np.ndarray:
    return PROJECTION.components * factor


def _with(value: float) -> np.ndarray:
    components = PROJECTION.components.copy()
    components[0, 0] = value
    return components


@pytest.mark.parametrize(
    "projection,reason",
    [
        (_npz(mean=PROJECTION.mean, components=_with(np.nan)), "must be finite"),
        (_npz(mean=PROJECTION.mean, components=_with(np.inf)), "must be finite"),
        (_npz(mean=np.full(8, np.nan), components=PROJECTION.components), "must be finite"),
        (_npz(mean=PROJECTION.mean, components=_scaled(1e9)), r"not orthonormal rows \(max \|C C\^T - I\| = 1e\+18\)"),
        (_npz(mean=PROJECTION.mean, components=np.tile(PROJECTION.components[:1], (4, 1))), "not orthonormal rows"),
        (_npz(mean=PROJECTION.mean, components=PROJECTION.components[0]), "do not fit together"),
        (_npz(mean=PROJECTION.mean[:7], components=PROJECTION.components), "do not fit together"),
        (_npz(mean=PROJECTION.mean[None], components=PROJECTION.components), "do not fit together"),
        (_npz(mean=np.zeros(4), components=np.eye(8, 4)), r"need 1 <= dim <= input_dim"),
        (_npz(mean=PROJECTION.mean, components=np.zeros((0, 8))), r"need 1 <= dim <= input_dim"),
        (_npz(mean=PROJECTION.mean, components=np.eye(4, 8, dtype=np.int64)), "expected floating point"),
        (_npz(mean=PROJECTION.mean, components=PROJECTION.components, extra=np.zeros(1)), "expected exactly"),
        (_npz(mean=PROJECTION.mean), "expected exactly"),
        (b"not a zip", "not a projection .npz file"),
    ],
)
def test_bad_projection_is_refused(tmp_path: Path, projection: bytes, reason: str) -> None:
    _refused(_bundle({"encoder.txt": b"minilm", "projection.npz": projection}), tmp_path / "cache", f"projection.npz: .*{reason}")
    assert not (tmp_path / "cache").exists()


def test_compressed_or_oversized_projection_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, mean=PROJECTION.mean, components=PROJECTION.components)
    _refused(_bundle({"encoder.txt": b"minilm", "projection.npz": buffer.getvalue()}), tmp_path, "mean.npy is compressed")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2**20, 2**20)})
    huge = io.BytesIO()
    with zipfile.ZipFile(huge, "w") as archive:
        archive.writestr("mean.npy", header.getvalue())
        archive.writestr("components.npy", b"")
    _refused(_bundle({"encoder.txt": b"minilm", "projection.npz": huge.getvalue()}), tmp_path, r"declares shape \(1048576, 1048576\)")


def _bilstm_state(**changes: torch.Tensor | None) -> bytes:
    state = torch.load(io.BytesIO(_bilstm_files()["bilstm/weights.pt"]), weights_only=True)
    for key, value in changes.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    return _weights(state)


@pytest.mark.parametrize(
    "changes,reason",
    [
        ({"bilstm/weights.pt": _bilstm_state(**{"lstm.bias_ih_l0": torch.full((12,), float("nan"))})}, "lstm.bias_ih_l0 is not finite"),
        ({"bilstm/weights.pt": _bilstm_state(**{"embedding.weight": torch.full((5, 4), float("inf"))})}, "embedding.weight is not finite"),
        ({"bilstm/weights.pt": _bilstm_state(**{"embedding.weight": torch.zeros(5, 5)})}, r"has shape \(5, 5\), expected \(5, 4\)"),
        ({"bilstm/weights.pt": _bilstm_state(**{"embedding.weight": torch.zeros(5, 4, dtype=torch.float64)})}, "not a float32 tensor"),
        ({"bilstm/weights.pt": _bilstm_state(**{"lstm.bias_hh_l0": None})}, "weights.pt holds"),
        ({"bilstm/weights.pt": _bilstm_state(**{"head.weight": torch.zeros(2, 6)})}, "weights.pt holds"),
        ({"bilstm/weights.pt": b"PK-not-really"}, "not a saved torch state dict"),
        ({"bilstm/weights.pt": _weights({"x": torch.zeros(1)})[:200]}, "not a saved torch state dict"),
        ({"bilstm/config.json": json.dumps({"vocab_size": 5, "embed_dim": 4, "hidden": 4, "max_length": 128}).encode()}, "has shape"),
        ({"bilstm/config.json": json.dumps({"vocab_size": 5, "embed_dim": 2**20, "hidden": 3, "max_length": 128}).encode()}, "weights, more than"),
        ({"bilstm/config.json": json.dumps({"vocab_size": 5, "embed_dim": 4, "hidden": 3, "max_length": 10**5}).encode()}, "max_length must lie in"),
        ({"bilstm/config.json": json.dumps({"vocab_size": 5, "embed_dim": 4, "hidden": -3, "max_length": 128}).encode()}, "positive integers"),
        ({"bilstm/config.json": json.dumps({"vocab_size": 5, "embed_dim": 4, "hidden": 3}).encode()}, "exactly the keys"),
        ({"bilstm/vocab.json": json.dumps(["<pad>", "<unk>", "<sep>", "good"]).encode()}, "4 tokens, config.json says 5"),
        ({"bilstm/vocab.json": json.dumps(["<pad>", "<unk>", "<sep>", "good", 7]).encode()}, "list of strings"),
        ({"bilstm/weights.pt": None}, r"lacks \['bilstm/weights.pt'\]"),
        ({"encoder.txt": b"minilm"}, "ships .* but encoder.txt names 'minilm'"),
        ({"projection.npz": PROJECTION_NPZ}, "projection expects 8 dims, the shipped BiLSTM gives 6"),
    ],
)
def test_bad_bilstm_is_refused(tmp_path: Path, changes: dict[str, bytes | None], reason: str) -> None:
    files: dict[str, bytes | None] = {"encoder.txt": b"bilstm", **_bilstm_files(), **changes}
    _refused(_bundle({k: v for k, v in files.items() if v is not None}), tmp_path / "cache", reason)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "files,reason",
    [
        ({"encoder.txt": b"minilm\n/etc/evil"}, "encoder.txt: encoder.txt must be one printable line"),
        ({"encoder.txt": b"x" * 201}, "one printable line of 1 to 200 characters"),
        ({"encoder.txt": b""}, "one printable line"),
        ({"encoder.txt": b"\xff\xfe"}, "encoder.txt: .*utf-8"),
        ({"projection.npz": PROJECTION_NPZ}, "has no encoder.txt"),
    ],
)
def test_bad_encoder_spec_is_refused(tmp_path: Path, files: dict[str, bytes], reason: str) -> None:
    _refused(_bundle(files), tmp_path / "cache", reason)
    assert not (tmp_path / "cache").exists()


def test_refusals_leave_the_existing_cache_untouched(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    good = unpack(_bundle({"encoder.txt": b"minilm"}), cache)
    before = _tree(cache)
    _refused(_bundle({"encoder.txt": b"minilm", "projection.npz": _npz(mean=PROJECTION.mean, components=_scaled(1e9))}), cache, "orthonormal")
    _refused(_tar(_file("encoder.txt", b"minilm"), _special("assets", tarfile.SYMTYPE, str(good))), cache, "not a regular file")
    assert _tree(cache) == before and (good / "encoder.txt").read_text() == "minilm"


def test_failed_write_leaves_no_staging_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(assets.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        unpack(_bundle({"encoder.txt": b"minilm"}), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["assets"] and not any((tmp_path / "assets").iterdir())


def test_build_bundle_leaves_no_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    bundle = build_bundle(RunSpec.of(public="none", dim=0), None, tmp_path / "cache")
    assert list(temp.iterdir()) == []
    assert load_assets(unpack(bundle, tmp_path / "cache")).projection is None
    with pytest.raises(ValueError, match="needs public data"):
        build_bundle(RunSpec.of(encoder="bilstm", public="none", dim=0), None, tmp_path / "cache")
    assert list(temp.iterdir()) == []


def test_built_bilstm_bundle_passes_the_node_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ldpfed.fed.runtime.assets import load_public

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    config = RunSpec.of(encoder="bilstm", public="generated:60", dim=4)
    cache = tmp_path / "cache"
    loaded = load_assets(unpack(build_bundle(config, load_public(config), cache), cache))
    assert list(temp.iterdir()) == []
    assert isinstance(loaded.encoder, BiLSTMEncoder) and loaded.projection is not None
    assert loaded.projection.input_dim == loaded.encoder.dim and loaded.projection.dim == 4
