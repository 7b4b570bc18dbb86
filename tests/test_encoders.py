"""Encoders (MiniLM, BiLSTM), the PCA projection, the encoding cache and the factory."""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.data.corpus import generate_corpus, generate_public_corpus
from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.encoders.base import Encoder
from ldpfed.fed.encoders.bilstm import BiLSTMEncoder, train_bilstm
from ldpfed.fed.encoders.cache import encode_cached, store_dir
from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.encoders.projected import ProjectedEncoder
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.encoders.vocab import Vocab, tokenize


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _class_mean_accuracy(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> float:
    means = np.stack([x_train[y_train == k].mean(axis=0) for k in range(int(y_train.max()) + 1)])
    scores = x_test @ means.T - 0.5 * (means**2).sum(axis=1)
    return float((scores.argmax(axis=1) == y_test).mean())


@pytest.fixture(scope="module")
def minilm() -> Encoder:
    """MiniLM loaded with every network connection refused."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")

        def refuse(*args: object, **kwargs: object) -> None:
            raise OSError("network access attempted while loading MiniLM")

        patch.setattr(socket.socket, "connect", refuse)
        encoder = make_encoder("minilm")
        encoder.encode(["warm up"])  # loads tokenizer and weights under the patch
    return encoder


def test_minilm_offline_dim_and_similarity(minilm: Encoder) -> None:
    assert minilm.dim == 384 and minilm.name == "minilm"
    x = minilm.encode(
        [
            "The cat is sleeping on the sofa.",
            "A cat naps on the couch.",
            "Interest rates were raised by the central bank.",
        ]
    )
    assert x.shape == (3, 384) and x.dtype == np.float32
    assert _cosine(x[0], x[1]) > _cosine(x[0], x[2]) + 0.3


def test_minilm_pairs_and_batching(minilm: Encoder) -> None:
    texts = ["A man is playing a guitar.", "Stocks fell sharply.", "The soup was cold."]
    whole = minilm.encode(texts, batch_size=8)
    assert np.allclose(whole, minilm.encode(texts, batch_size=1), atol=1e-5)
    pairs = minilm.encode(texts, ["Someone plays music.", "Markets dropped.", "Dinner was bad."])
    assert pairs.shape == (3, 384) and not np.allclose(pairs, whole)
    with pytest.raises(ValueError, match="texts2"):
        minilm.encode(texts, ["only one"])
    assert len(minilm.fingerprint()) == 64 and minilm.fingerprint() == make_encoder("minilm").fingerprint()


class CountingEncoder:
    """A cheap deterministic encoder that records every text it encodes."""

    name = "counting"
    dim = 3

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def fingerprint(self) -> str:
        return "c" * 64

    def truncated(self, max_length: int) -> "CountingEncoder":
        raise ValueError("the counting encoder has no token limit")

    def encode(
        self, texts: Sequence[str], texts2: Sequence[str] | None = None, batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        self.encoded += texts
        second = [""] * len(texts) if texts2 is None else texts2
        return np.array([[len(t), t.count("a"), len(u)] for t, u in zip(texts, second)], dtype=np.float32)


def _data(texts: Sequence[str], texts2: Sequence[str] | None = None) -> TextDataset:
    second = None if texts2 is None else tuple(texts2)
    return TextDataset("d", tuple(texts), second, np.zeros(len(texts), dtype=np.int64), ("x",))


def test_a_bar_names_its_split_and_writes_its_end_once_to_a_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 9f: each bar's 100% line was written twice (its last update and its close), naming no split."""
    encode_cached(CountingEncoder(), _data(["a", "bab", "cc"]), tmp_path, progress=True, label="train")
    err = capsys.readouterr().err
    assert err.count("100%") == 1 and "encode train (counting)" in err, err


def test_cache_is_content_keyed(tmp_path: Path) -> None:
    encoder = CountingEncoder()
    assert isinstance(encoder, Encoder)
    data = _data(["a", "bab", "cc", "a"])
    first = encode_cached(encoder, data, tmp_path)
    assert sorted(encoder.encoded) == ["a", "bab", "cc"]  # each distinct sentence once
    assert np.array_equal(first, encoder.encode(data.texts))
    encoder.encoded = []
    texts = ["dddd", "cc", "aaaa", "a", "bab", "e"]  # a shuffled superset, other name and labels
    superset = TextDataset("other", tuple(texts), None, np.arange(6) % 2, ("x", "y"))
    assert np.array_equal(encode_cached(encoder, superset, tmp_path), CountingEncoder().encode(texts))
    assert sorted(encoder.encoded) == ["aaaa", "dddd", "e"]  # only the new sentences
    assert np.array_equal(encode_cached(encoder, data.subset([2, 0]), tmp_path), first[[2, 0]])
    assert encode_cached(encoder, _data([]), tmp_path).shape == (0, 3) and len(encoder.encoded) == 3
    pairs = _data(["a", "bab"], ["cc", "a"])  # a pair is not its first sentence
    assert np.array_equal(encode_cached(encoder, pairs, tmp_path), CountingEncoder().encode(pairs.texts, pairs.texts2))
    assert encoder.encoded[3:] == ["a", "bab"]
    shards = list(store_dir(encoder, tmp_path).iterdir())
    assert len(shards) == 3 and all(path.suffix == ".npz" for path in shards)  # no temporary file left


def test_cache_ignores_other_row_sizes_and_names_damaged_shards(tmp_path: Path) -> None:
    class WideEncoder(CountingEncoder):
        """Same fingerprint, rows of another size (as an incompatible version would write)."""

        dim = 4

        def encode(self, texts: Sequence[str], *args: object, **kwargs: object) -> np.ndarray:
            return np.ones((len(texts), 4), dtype=np.float32)

    data = _data(["a", "bab"])
    assert encode_cached(WideEncoder(), data, tmp_path).shape == (2, 4)
    encoder = CountingEncoder()
    assert np.array_equal(encode_cached(encoder, data, tmp_path), CountingEncoder().encode(data.texts))
    assert sorted(encoder.encoded) == ["a", "bab"]
    next(store_dir(encoder, tmp_path).iterdir()).write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="damaged.*delete it"):
        encode_cached(encoder, data, tmp_path)


def test_cache_concurrent_writers(tmp_path: Path) -> None:
    texts = [f"sentence {i}" for i in range(200)]
    parts = [_data(texts[start : start + 120]) for start in (0, 40, 80)]
    with ThreadPoolExecutor(3) as pool:  # overlapping writers, as Ray actors may be
        results = list(pool.map(lambda part: encode_cached(CountingEncoder(), part, tmp_path), parts))
    for part, result in zip(parts, results):
        assert np.array_equal(result, CountingEncoder().encode(part.texts))
    assert np.array_equal(encode_cached(CountingEncoder(), _data(texts), tmp_path), CountingEncoder().encode(texts))


def test_bench_encoding_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ldpfed.simulations.benchmarks import bench_encoding

    assert bench_encoding.main(["--sentences", "8", "--no-progress", "--out", str(tmp_path / "bench.json")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split("|")[1].strip() for row in rows[1:]] == [
        "raw: transformers MiniLM, length-sorted batches",
        "ldpfed: encode_cached, cold cache",
        "ldpfed: encode_cached, warm cache",
    ]
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results["sentences"] == 8 and results["warm_equals_cold"] and results["max_abs_difference_raw_cold"] < 1e-4


def test_projection_reduces_dim_and_is_deterministic(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 10)) @ rng.normal(size=(10, 10))
    a, b = PCAProjection.fit(x, 4), PCAProjection.fit(x.copy(), 4)
    assert a.dim == 4 and a.input_dim == 10 and a.fingerprint() == b.fingerprint()
    y = a.apply(x)
    assert y.shape == (200, 4) and y.dtype == np.float32 and np.array_equal(y, b.apply(x))
    variances = y.var(axis=0)
    assert np.all(np.diff(variances) <= 1e-6)  # largest variance first
    loaded = PCAProjection.load(a.save(tmp_path / "pca.npz"))
    assert loaded.fingerprint() == a.fingerprint() and np.array_equal(loaded.apply(x), y)
    assert PCAProjection.fit(x, 3).fingerprint() != a.fingerprint()
    with pytest.raises(ValueError, match="dim must lie"):
        PCAProjection.fit(x, 11)
    with pytest.raises(ValueError, match="expected shape"):
        a.apply(x[:, :5])


def test_tokenizer_and_vocab() -> None:
    assert tokenize("Can't wait!! #GameDay :)") == ["can't", "wait", "!", "!", "#gameday", ":", ")"]
    vocab = Vocab.build(["a b b", "c"])
    assert vocab.tokens[3] == "b" and vocab.ids("b zzz") == [3, 1]
    ids, lengths = vocab.batch(["a b", ""], ["c", "a"], max_length=8)
    assert lengths.tolist() == [4, 2] and ids.tolist() == [[4, 3, 2, 5], [2, 4, 0, 0]]
    ids, lengths = vocab.batch(["", "b " * 20], None, max_length=5)
    assert lengths.tolist() == [1, 5] and ids[0, 0] == 1  # empty -> <unk>; cut to max_length
    ids, _ = vocab.batch(["b " * 20], ["c"], max_length=6)
    assert ids[0].tolist() == [3, 3, 3, 3, 2, 5]  # the short second sentence survives the cut


def test_bilstm_trains_beats_chance_and_round_trips(tmp_path: Path) -> None:
    public = generate_public_corpus(1500, seed=0)
    encoder = train_bilstm(public, dim=64, epochs=2, seed=0)
    assert encoder.dim == 64
    train, test = generate_corpus(600, 0, "train"), generate_corpus(300, 0, "dev")
    x_train, x_test = encoder.encode(train.texts), encoder.encode(test.texts)
    assert x_train.shape == (600, 64) and x_train.dtype == np.float32
    assert _class_mean_accuracy(x_train, train.labels, x_test, test.labels) > 0.6  # chance: 0.25
    again = train_bilstm(public, dim=64, epochs=2, seed=0)
    assert again.fingerprint() == encoder.fingerprint()
    loaded = make_encoder(f"bilstm:{encoder.save(tmp_path / 'bilstm')}")
    assert isinstance(loaded, BiLSTMEncoder) and loaded.fingerprint() == encoder.fingerprint()
    assert np.allclose(loaded.encode(test.texts[:20]), x_test[:20], atol=1e-6)
    pairs = loaded.encode(test.texts[:4], test.texts[4:8])
    assert pairs.shape == (4, 64)


def test_projected_encoder_from_factory(tmp_path: Path) -> None:
    public = generate_public_corpus(400, seed=1)
    folder = train_bilstm(public, dim=32, epochs=1).save(tmp_path / "bilstm")
    base = make_encoder(f"bilstm:{folder}")
    projection = PCAProjection.fit(base.encode(public.texts), 8)
    encoder = make_encoder(f"bilstm:{folder}", projection=projection.save(tmp_path / "pca.npz"))
    assert isinstance(encoder, ProjectedEncoder) and encoder.dim == 8
    assert encoder.fingerprint() != base.fingerprint()
    assert np.allclose(encoder.encode(public.texts[:5]), projection.apply(base.encode(public.texts[:5])))
    with pytest.raises(ValueError, match="projection expects"):
        ProjectedEncoder(base, PCAProjection.fit(np.ones((5, 4)) + np.eye(5, 4), 2))


def test_factory_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="(?s)could not be downloaded.*'minilm' or a local model folder"):
        _ = make_encoder("no-such-org/no-such-model").dim
    with pytest.raises(FileNotFoundError, match="not a saved BiLSTM"):
        make_encoder(f"bilstm:{tmp_path}")
    with pytest.raises(ValueError, match="must not be empty"):
        make_encoder("")


def test_a_model_folders_fingerprint_is_its_files_and_follows_an_edit_within_the_process(tmp_path: Path) -> None:
    """The digest of a local model folder is kept per process while its files keep their size and modification
    time; an edit (same size) gives a new fingerprint to the next encoder, and the digest is settings, then each
    file's relative path and bytes."""
    import hashlib
    import json

    from ldpfed.fed.encoders.hf import HFEncoder

    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 100)

    def expected(max_length: int) -> str:
        digest = hashlib.sha256(json.dumps({"kind": "hf-mean", "max_length": max_length}, sort_keys=True).encode())
        for path in sorted(tmp_path.iterdir()):
            digest.update(path.name.encode() + path.read_bytes())
        return digest.hexdigest()

    first = HFEncoder(tmp_path, max_length=16).fingerprint()
    assert first == expected(16) == HFEncoder(tmp_path, max_length=16).fingerprint()
    assert HFEncoder(tmp_path, max_length=8).fingerprint() == expected(8) != first
    weights.write_bytes(b"b" * 100)
    assert HFEncoder(tmp_path, max_length=16).fingerprint() == expected(16) != first
