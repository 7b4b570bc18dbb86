"""The BiLSTM network of fed.encoders.bilstm (its own module: importing it imports torch)."""

from __future__ import annotations

import torch
from torch import nn


class BiLSTMNet(nn.Module):
    """Embedding, one bidirectional LSTM layer, masked mean pooling."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        self.lstm = nn.LSTM(embed_dim, hidden, batch_first=True, bidirectional=True)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Pooled representation (batch, 2 * hidden) of padded ids with true lengths."""
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embedding(ids), lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, _ = self.lstm(packed)
        states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=ids.shape[1])
        # pad_packed_sequence fills positions past each length with zeros.
        return states.sum(dim=1) / lengths.unsqueeze(-1).to(states.dtype)
