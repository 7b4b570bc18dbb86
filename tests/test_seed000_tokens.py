"""Seed 000 Table 4's token rows (issue 40 item 1): the server trains on the noisy reports and is told their noise."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from ldpfed.simulations.reproductions import seed000_tables as tables
from ldpfed.simulations.reproductions._seed000_tokens import BiLSTMServer, noisy_mean_rows

N, DIM = 40, 3


class _Labelled(argparse.Namespace):
    def __len__(self) -> int:
        return len(self.labels)


class _TinyContext(tables.Context):
    """Context with synthetic position-averaged rows in place of the encoder and SST-2."""

    def __init__(self) -> None:
        super().__init__(Path("."), p=0.5, steps=3, pretrain_epochs=1)
        rng = np.random.default_rng(0)
        self.rows = {name: (rng.normal(size=(size, DIM)), rng.integers(0, 2, size))
                     for name, size in (("users", N), ("dev", 20), ("own", 10))}

    def splits(self):  # noqa: ANN201
        return tuple(_Labelled(labels=self.rows[k][1]) for k in ("own", "users", "dev"))

    def users(self, n: int):  # noqa: ANN201
        return _Labelled(labels=self.rows["users"][1]), self.rows["users"][1]

    def encoder(self, dim: int):  # noqa: ANN201
        return argparse.Namespace(net=argparse.Namespace(embedding=None))

    def token_clip(self) -> float:
        return 1.0

    def token_means(self, n: int):  # noqa: ANN201
        return tuple(self.rows[k][0] for k in ("users", "dev", "own"))


@pytest.mark.parametrize("accounting", ["strict", "strict-once"])
def test_the_mean_lda_server_is_told_the_noise_of_the_averaged_reports(monkeypatch, accounting: str) -> None:  # noqa: ANN001
    told: list[float] = []

    class Recorder(tables.Learners):
        def add_batch(self, rows, labels, noise_std) -> None:  # noqa: ANN001
            told.append(noise_std)
            super().add_batch(rows, labels, noise_std)

        def add_all(self, rows, labels, noise_std, steps, batch, rng) -> None:  # noqa: ANN001
            told.append(noise_std)
            super().add_all(rows, labels, noise_std, steps, batch, rng)

    monkeypatch.setattr(tables, "Learners", Recorder)
    out = _TinyContext().compute(tables.token_setting("mean-lda", N, accounting, 2.0), 0)
    assert out["sigma"] > 0 and told
    assert told == pytest.approx([out["sigma"] / np.sqrt(tables.LENGTH)] * len(told))


def test_the_average_of_noised_positions_has_noise_sigma_over_root_length() -> None:
    rows = noisy_mean_rows(np.zeros((20_000, 4)), 2.0, 16, np.random.default_rng(0))
    assert rows.std() == pytest.approx(0.5, rel=0.02)


def test_the_bilstm_server_trains_a_copy_of_the_pretrained_lstm() -> None:
    import torch

    from ldpfed.fed.encoders.bilstm_net import BiLSTMNet

    torch.manual_seed(0)
    net = BiLSTMNet(10, 4, 3)
    before = [p.detach().clone() for p in net.lstm.parameters()]
    server = BiLSTMServer(net, 1.0, seed=0)
    server.add_batch(torch.randn(8, 5, 4), np.array([0, 1] * 4))
    assert all(torch.equal(a, b) for a, b in zip(before, net.lstm.parameters()))  # the user's encoder is untouched
    assert not all(torch.equal(a, b) for a, b in zip(before, server.lstm.parameters()))
    assert 0.0 <= server.accuracy(np.array([[1, 2, 0, 0, 0]] * 4), np.array([0, 1, 0, 1])) <= 1.0
