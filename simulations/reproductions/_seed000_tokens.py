"""Seed 000 Table 4's token rows: servers that train on the noisy token reports (issue 40 item 1).

A user's report is its sentence's ``L`` token embeddings from the server's pre-trained BiLSTM (cut or padded to
``L``; padding is noised too, so the length stays hidden), each clipped to L2 norm ``C_tok`` and noised with
N(0, sigma^2) per coordinate. Two servers train on the reports and are told sigma:

- ``mean-lda``: the server averages each report's ``L`` noisy positions, whose noise is then N(0, sigma^2 / L) per
  coordinate, and fits NoiseAwareLDA told that noise (beside a softmax head trained by Adam on the same rows). The
  average's noise is drawn directly from that law: the same distribution as averaging ``L`` noised positions.
- ``mean-lda-own``: ``mean-lda`` with the server's own clean rows added as one more group of the LDA (inverse-variance
  weighting, no domain shift: the same distribution), so the reports can only add to what its own data gives.
- ``bilstm``: the paper's server: the layers after the DP layer (the BiLSTM, started from the server's pre-trained
  one, mean-pooled over the ``L`` positions, and a linear head) trained by Adam, one step per sampled batch on at most
  ``BILSTM_BATCH`` of its reports (the rest are released too, only not used: post-processing).

Each server also runs on the server's own clean data alone (``own-only``), the baseline a reader compares with.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

SERVERS = ("mean-lda", "bilstm", "mean-lda-own")
SKIPPED = {"bilstm": ("clean", "strict-once"), "mean-lda-own": ("own-only", "clean")}
"""Rows a server does not run: the BiLSTM's clean and strict-once rows (CPU time); mean-lda-own's own-only and clean
rows (those of mean-lda)."""
BILSTM_BATCH = 256
"""Reports of one sampled batch the BiLSTM server trains on (a reduction: the batch has about p n reports)."""
BILSTM_LR = 1e-3
CHUNK = 2048


def clipped_embeddings(embedding: torch.nn.Embedding, ids: np.ndarray, clip: float) -> torch.Tensor:
    """Token embeddings (rows, L, e) of ``ids``, each clipped to L2 norm ``clip`` (padding, id 0, stays zero)."""
    import torch

    with torch.no_grad():  # not inference_mode: the BiLSTM server back-propagates through the noisy reports
        emb = embedding(torch.from_numpy(ids))
        return emb * torch.clamp(clip / emb.norm(dim=-1, keepdim=True).clamp_min(1e-12), max=1.0)


def mean_rows(embedding: torch.nn.Embedding, ids: np.ndarray, clip: float) -> np.ndarray:
    """The position average (rows, e) of the clipped token embeddings, padding positions included."""
    out = [clipped_embeddings(embedding, ids[s : s + CHUNK], clip).mean(dim=1).numpy() for s in range(0, len(ids), CHUNK)]
    return np.concatenate(out).astype(np.float64) if out else np.empty((0, embedding.embedding_dim))


def noisy_mean_rows(clean: np.ndarray, sigma: float, length: int, rng: np.random.Generator) -> np.ndarray:
    """The average of ``length`` positions each noised with N(0, sigma^2): ``clean`` plus N(0, sigma^2 / length)."""
    return clean + rng.normal(0.0, sigma / np.sqrt(length), clean.shape)


class BiLSTMServer:
    """The paper's server on token reports: BiLSTM and linear head trained by Adam on noisy embeddings.

    Parameters
    ----------
    net:
        The server's pre-trained BiLSTMNet (copied; its embedding is the users' token layer, not trained here).
    clip:
        C_tok, for clipping the clean test tokens alike.
    seed:
        Seeds the head's initialisation.
    """

    def __init__(self, net: Any, clip: float, seed: int) -> None:
        import torch

        self.embedding, self.clip = net.embedding, clip
        self.lstm = copy.deepcopy(net.lstm).train()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = torch.nn.Linear(2 * self.lstm.hidden_size, 2)
        self.optimizer = torch.optim.Adam([*self.lstm.parameters(), *self.head.parameters()], lr=BILSTM_LR)

    def _logits(self, emb: torch.Tensor) -> torch.Tensor:
        states, _ = self.lstm(emb)
        return self.head(states.mean(dim=1))  # the server does not know the length: all L positions

    def add_batch(self, reports: torch.Tensor, labels: np.ndarray) -> None:
        """One Adam step on a batch of noisy token reports (rows, L, e)."""
        import torch

        loss = torch.nn.functional.cross_entropy(self._logits(reports), torch.from_numpy(labels))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def accuracy(self, ids: np.ndarray, labels: np.ndarray) -> float:
        """Accuracy on clean test sentences (token ids, clipped alike, no noise)."""
        import torch

        with torch.inference_mode():
            pred = np.concatenate([
                self._logits(clipped_embeddings(self.embedding, ids[s : s + CHUNK], self.clip)).argmax(dim=1).numpy()
                for s in range(0, len(ids), CHUNK)
            ])
        return float((pred == labels).mean())


def noisy_tokens(embedding: torch.nn.Embedding, ids: np.ndarray, clip: float, sigma: float,
                 rng: np.random.Generator) -> torch.Tensor:
    """The DP layer on tokens: clipped embeddings of ``ids`` plus N(0, sigma^2) on every coordinate of every position."""
    import torch

    emb = clipped_embeddings(embedding, ids, clip)
    return emb + torch.from_numpy(rng.normal(0.0, sigma, tuple(emb.shape)).astype(np.float32))
