"""A small BiLSTM sentence encoder the server pre-trains on its public data (seed 000,
Stage 1) and ships to users.

The representation is the mean over tokens of the concatenated forward and backward hidden
states (dimension ``2 * hidden``; 128 by default, the paper's latent size). Pre-training
fits it with a linear classification head on the public labelled data; the head is not
shipped. ``save`` writes config.json, vocab.json and weights.pt to a folder, ``load``
reads them back.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import pickle
import zipfile
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.encoders.base import check_pairs
from ldpfed.fed.encoders.vocab import Vocab

if TYPE_CHECKING:  # torch is imported where a network is built or run, not with this module
    import torch

    from ldpfed.fed.encoders.bilstm_net import BiLSTMNet

SAVED_FILES = ("config.json", "vocab.json", "weights.pt")
"""What ``BiLSTMEncoder.save`` writes."""
MAX_PARAMETERS = 2**24
"""Most weights a loaded BiLSTM may have (64 MiB of float32)."""
MAX_TOKENS = 4096
"""Largest ``max_length`` a loaded BiLSTM may ask for."""


class BiLSTMEncoder:
    """A trained BiLSTM and its vocabulary, used frozen.

    Parameters
    ----------
    net:
        The network (put in eval mode).
    vocab:
        Word vocabulary the network was trained with.
    max_length:
        Inputs are cut to this many tokens.
    name:
        Human-readable identity.
    """

    def __init__(self, net: BiLSTMNet, vocab: Vocab, max_length: int = 128, name: str = "bilstm") -> None:
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        if net.embedding.num_embeddings != len(vocab):
            raise ValueError(f"network has {net.embedding.num_embeddings} embeddings, vocab {len(vocab)} tokens")
        self.net = net.eval()
        self.vocab = vocab
        self.max_length = max_length
        self.name = name

    @property
    def dim(self) -> int:
        """Length of the pooled representation (2 * hidden)."""
        return 2 * self.net.lstm.hidden_size

    def _config(self) -> dict[str, int]:
        return {
            "vocab_size": len(self.vocab),
            "embed_dim": self.net.embedding.embedding_dim,
            "hidden": self.net.lstm.hidden_size,
            "max_length": self.max_length,
        }

    def truncated(self, max_length: int) -> "BiLSTMEncoder":
        """The same network reading at most ``max_length`` tokens (a cheaper device setting), sharing
        its weights; ValueError past this encoder's own limit."""
        if not 2 <= max_length <= self.max_length:
            raise ValueError(f"{self.name} reads 2 to {self.max_length} tokens, asked for {max_length}")
        other = copy.copy(self)
        other.__dict__.pop("_fingerprint", None)
        other.max_length = max_length
        return other

    def fingerprint(self) -> str:
        """Digest of the configuration, vocabulary and weights."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        digest = hashlib.sha256(b"bilstm-mean")
        digest.update(json.dumps(self._config(), sort_keys=True).encode())
        digest.update("\n".join(self.vocab.tokens).encode("utf-8"))
        for key, tensor in self.net.state_dict().items():
            digest.update(key.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def encode(
        self,
        texts: Sequence[str],
        texts2: Sequence[str] | None = None,
        batch_size: int = 256,
        progress: bool = False,
    ) -> np.ndarray:
        """Pooled BiLSTM states; float32 (n, dim)."""
        import torch
        from tqdm.auto import tqdm

        check_pairs(texts, texts2)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in tqdm(range(0, len(texts), batch_size), desc=f"encode {self.name}", disable=not progress):
            stop = start + batch_size
            ids, lengths = self.vocab.batch(
                texts[start:stop], None if texts2 is None else texts2[start:stop], self.max_length
            )
            with torch.inference_mode():
                out[start:stop] = self.net(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()
        return out

    def save(self, folder: str | Path) -> Path:
        """Write config.json, vocab.json and weights.pt into ``folder`` (created)."""
        import torch

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(self._config(), indent=2) + "\n")
        (folder / "vocab.json").write_text(json.dumps(list(self.vocab.tokens), ensure_ascii=False))
        torch.save(self.net.state_dict(), folder / "weights.pt")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> BiLSTMEncoder:
        """Read an encoder written by ``save`` (checked as in ``from_saved``)."""
        folder = Path(folder)
        missing = [n for n in SAVED_FILES if not (folder / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder} is not a saved BiLSTM encoder: missing {', '.join(missing)}")
        return cls.from_saved({n: (folder / n).read_bytes() for n in SAVED_FILES}, name=f"bilstm:{folder}")

    @classmethod
    def from_saved(cls, files: Mapping[str, bytes], name: str = "bilstm") -> BiLSTMEncoder:
        """An encoder from the contents of the files ``save`` writes, read as untrusted input.

        Raises ValueError unless config.json holds four positive integers within
        ``MAX_PARAMETERS`` and ``MAX_TOKENS``, vocab.json exactly ``vocab_size`` distinct
        strings, and weights.pt (uncompressed) exactly the finite float32 tensors of the
        shapes the config implies.
        """
        import torch

        from ldpfed.fed.encoders.bilstm_net import BiLSTMNet

        config = _read_config(files["config.json"])
        tokens = json.loads(files["vocab.json"].decode("utf-8"))
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("vocab.json must be a list of strings")
        vocab = Vocab(tuple(tokens))
        if len(vocab) != config["vocab_size"]:
            raise ValueError(f"vocab.json has {len(vocab)} tokens, config.json says {config['vocab_size']}")
        with torch.device("meta"):  # shapes only, nothing allocated
            expected = BiLSTMNet(config["vocab_size"], config["embed_dim"], config["hidden"]).state_dict()
        size = sum(tensor.numel() for tensor in expected.values())
        if size > MAX_PARAMETERS:
            raise ValueError(f"config.json implies {size} weights, more than {MAX_PARAMETERS}")
        state = _read_weights(files["weights.pt"])
        if set(state) != set(expected):
            raise ValueError(f"weights.pt holds {sorted(map(str, state))}, expected {sorted(expected)}")
        for key, tensor in state.items():
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
                raise ValueError(f"weights.pt: {key} is not a float32 tensor")
            if tensor.shape != expected[key].shape:
                shapes = f"{tuple(tensor.shape)}, expected {tuple(expected[key].shape)}"
                raise ValueError(f"weights.pt: {key} has shape {shapes}")
            if not torch.isfinite(tensor).all():
                raise ValueError(f"weights.pt: {key} is not finite (NaN or inf)")
        net = BiLSTMNet(config["vocab_size"], config["embed_dim"], config["hidden"])
        net.load_state_dict(state)
        return cls(net, vocab, config["max_length"], name=name)


def _read_config(data: bytes) -> dict[str, int]:
    """config.json: exactly the four sizes, each a positive integer within the caps."""
    config = json.loads(data.decode("utf-8"))
    keys = ["embed_dim", "hidden", "max_length", "vocab_size"]
    if not isinstance(config, dict) or sorted(config) != keys:
        raise ValueError(f"config.json must be an object with exactly the keys {keys}")
    if not all(type(config[k]) is int and 1 <= config[k] <= MAX_PARAMETERS for k in keys):
        raise ValueError(f"config.json values must be positive integers up to {MAX_PARAMETERS}, got {config}")
    if not 2 <= config["max_length"] <= MAX_TOKENS:
        raise ValueError(f"config.json max_length must lie in [2, {MAX_TOKENS}], got {config['max_length']}")
    return config


def _read_weights(data: bytes) -> dict[str, torch.Tensor]:
    """A state dict from torch.save's zip format, every entry stored and within the file,
    so that what torch allocates is bounded by the file's size."""
    import torch

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.header_offset + info.file_size > len(data):
                    raise ValueError(f"weights.pt entry {info.filename} is compressed or larger than the file")
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (zipfile.BadZipFile, pickle.UnpicklingError, RuntimeError, EOFError, KeyError, TypeError) as err:
        raise ValueError(f"weights.pt is not a saved torch state dict: {err}") from err
    if not isinstance(state, dict):
        raise ValueError("weights.pt must hold a state dict")
    return state


def train_bilstm(
    data: TextDataset,
    dim: int = 128,
    embed_dim: int = 64,
    epochs: int = 3,
    batch_size: int = 64,
    lr: float = 3e-3,
    max_length: int = 128,
    seed: int = 0,
    progress: bool = False,
) -> BiLSTMEncoder:
    """Pre-train a BiLSTM encoder with a linear head on public labelled data.

    Parameters
    ----------
    data:
        Public labelled records (sentences or pairs); the vocabulary is built from them.
    dim:
        Representation size (even; each direction has dim / 2 hidden units).
    embed_dim:
        Word embedding size.
    epochs, batch_size, lr:
        Adam training schedule (cross-entropy of the head).
    max_length:
        Inputs are cut to this many tokens.
    seed:
        Seeds initialisation and batch order (the global torch RNG is left untouched).
    progress:
        Show a progress bar over epochs.
    """
    import torch
    from torch import nn
    from tqdm.auto import tqdm

    from ldpfed.fed.encoders.bilstm_net import BiLSTMNet

    if dim < 2 or dim % 2:
        raise ValueError(f"dim must be a positive even number, got {dim}")
    if len(data) == 0:
        raise ValueError("cannot pre-train on an empty dataset")
    texts = list(data.texts) + list(data.texts2 or [])
    vocab = Vocab.build(texts)
    ids, lengths = vocab.batch(data.texts, data.texts2, max_length)
    ids_t, lengths_t = torch.from_numpy(ids), torch.from_numpy(lengths)
    labels = torch.from_numpy(data.labels)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = BiLSTMNet(len(vocab), embed_dim, dim // 2)
        head = nn.Linear(dim, data.num_labels)
        optimizer = torch.optim.Adam([*net.parameters(), *head.parameters()], lr=lr)
        net.train()
        for _ in tqdm(range(epochs), desc="pre-train bilstm", disable=not progress):
            for batch in torch.randperm(len(data)).split(batch_size):
                width = int(lengths_t[batch].max())
                logits = head(net(ids_t[batch, :width], lengths_t[batch]))
                loss = nn.functional.cross_entropy(logits, labels[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    return BiLSTMEncoder(net, vocab, max_length, name=f"bilstm({data.name})")
