"""The seeds' downstream MLP: dense ReLU layers trained by SGD with momentum on (noisy) reports.

Seed 004 (and the TextHide recipe seed 002 follows) train Keras-style: SGD with momentum,
the learning rate decayed as lr / (1 + decay * iteration), dropout on the input
representation. Targets may be class ids or soft labels (mixed labels of instance encoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MLPRecipe:
    """Architecture and schedule of the downstream MLP."""

    hidden: tuple[int, ...]
    epochs: int
    batch_size: int = 32
    lr: float = 0.01
    momentum: float = 0.9
    decay: float = 1e-6
    input_dropout: float = 0.0
    optimizer: str = "sgd"
    """'sgd' (momentum, Keras-style decay) or 'adam' (lr, no decay)."""


def train_mlp(x: np.ndarray, y: np.ndarray, num_classes: int, recipe: MLPRecipe, seed: int) -> "MLPModel":
    """Train on rows ``x`` with class ids ``y`` (n,) or soft targets (n, num_classes)."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = [nn.Dropout(recipe.input_dropout)] if recipe.input_dropout else []
        width = x.shape[1]
        for h in recipe.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        net = nn.Sequential(*layers, nn.Linear(width, num_classes))
        xt = torch.as_tensor(np.asarray(x, dtype=np.float32))
        y = np.asarray(y)
        yt = torch.as_tensor(y.astype(np.float32) if y.ndim == 2 else y.astype(np.int64))
        if recipe.optimizer == "adam":
            optimizer = torch.optim.Adam(net.parameters(), lr=recipe.lr)
        else:
            optimizer = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1.0 + recipe.decay * step))
        net.train()
        for _ in range(recipe.epochs):
            for batch in torch.randperm(len(xt), generator=generator).split(recipe.batch_size):
                loss = nn.functional.cross_entropy(net(xt[batch]), yt[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
    return MLPModel(net.eval())


class MLPModel:
    """A trained MLP, used for prediction."""

    def __init__(self, net: "object") -> None:
        self.net = net

    def predict(self, x: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """Class ids of rows ``x``."""
        import torch

        out: list[np.ndarray] = []
        with torch.inference_mode():
            for start in range(0, len(x), batch_size):
                chunk = torch.as_tensor(np.asarray(x[start : start + batch_size], dtype=np.float32))
                out.append(self.net(chunk).argmax(dim=1).numpy())
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)

    def accuracy(self, x: np.ndarray, y: Sequence[int]) -> float:
        """Share of rows whose predicted class is ``y``."""
        return float((self.predict(x) == np.asarray(y)).mean())
