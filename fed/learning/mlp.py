"""The seeds' downstream MLP: dense ReLU layers trained by SGD with momentum on (noisy) reports.

Seed 004 (and the TextHide recipe seed 002 follows) train Keras-style: SGD with momentum,
the learning rate decayed as lr / (1 + decay * iteration), dropout on the input
representation. Seed 000 trains its server-side head on the noisy representations the same way.
Targets may be class ids or soft labels (mixed labels of instance encoding). Training uses torch;
a trained net is kept as numpy layers (:class:`MLPModel`), which a device scores without torch and
checks as untrusted input (:meth:`MLPModel.checked`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_LAYERS = 8
"""Most dense layers a device accepts in one model."""
MAX_WIDTH = 4096
"""Widest hidden layer a device accepts."""
MAX_PARAMETERS = 1 << 22
"""Most numbers (weights and biases) a device accepts in one model: 32 MiB as float64."""


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
    weight_decay: float = 0.0
    """L2 penalty on the weights (the optimizer's weight_decay)."""
    shrink: bool = False
    """Each time a row is trained on, it is drawn toward its (reported) class's mean over the training rows by a
    fresh uniform share t: mean + t (row - mean) (t = 1: the row as given), so that the net also
    sees inputs with less than the reports' noise, as clean queries have."""
    holdout: float = 0.0
    """Share of the rows held out (seeded) for early stopping: after each epoch the loss on them is
    measured, and the weights of the epoch with the lowest held-out loss are kept. 0: no holdout,
    the weights after the last epoch."""
    patience: int = 0
    """With a holdout, stop after this many epochs without a lower held-out loss (0: run every epoch)."""


@dataclass(frozen=True)
class MLPModel:
    """Dense layers ``(weights (in, out), bias (out,))`` with ReLU between them; scores are the last layer's logits."""

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def checked(cls, layers: Sequence[tuple[np.ndarray, np.ndarray]], dim: int, num_classes: int) -> "MLPModel":
        """The model of ``layers`` if it is one a device may run on ``dim``-dimensional inputs; ValueError naming the problem.

        It must have 1 to MAX_LAYERS layers, at most MAX_PARAMETERS numbers and hidden widths of
        at most MAX_WIDTH; take ``dim`` inputs, chain, and give ``num_classes`` scores; and hold
        finite floating-point numbers only.
        """
        if not 1 <= len(layers) <= MAX_LAYERS:
            raise ValueError(f"an MLP must have 1 to {MAX_LAYERS} layers, got {len(layers)}")
        shapes = [(np.shape(w), np.shape(b)) for w, b in layers]
        size = sum(int(np.prod(w)) + int(np.prod(b)) for w, b in shapes)
        if size > MAX_PARAMETERS:
            raise ValueError(f"an MLP may hold at most {MAX_PARAMETERS} numbers, got {size}")
        width = dim
        for i, (w, b) in enumerate(shapes):
            last = i == len(shapes) - 1
            if len(w) != 2 or w[0] != width or b != (w[1],) or (last and w[1] != num_classes):
                out = num_classes if last else "h"
                raise ValueError(f"MLP layer {i} has weights {w} and bias {b}, expected ({width}, {out}) and ({out},)")
            if not last and not 1 <= w[1] <= MAX_WIDTH:
                raise ValueError(f"MLP layer {i} is {w[1]} wide; at most {MAX_WIDTH}")
            width = w[1]
        for i, (w, b) in enumerate(layers):
            for part in (w, b):
                part = np.asarray(part)
                if not (np.issubdtype(part.dtype, np.floating) and np.isfinite(part).all()):
                    raise ValueError(f"MLP layer {i} must hold finite floating-point numbers")
        return cls(tuple((np.asarray(w, np.float64), np.asarray(b, np.float64)) for w, b in layers))

    def scores(self, x: np.ndarray) -> np.ndarray:
        """The logits of each row."""
        h = np.asarray(x, dtype=np.float64)
        for i, (weights, bias) in enumerate(self.layers):
            h = h @ weights + bias
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted class of each row."""
        return self.scores(x).argmax(axis=1)

    def accuracy(self, x: np.ndarray, y: Sequence[int]) -> float:
        """Share of rows whose predicted class is ``y``."""
        return float((self.predict(x) == np.asarray(y)).mean())


def train_mlp(
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    recipe: MLPRecipe,
    seed: int,
    transitions: np.ndarray | None = None,
    channel: np.ndarray | None = None,
) -> MLPModel:
    """Train on rows ``x`` with class ids ``y`` (n,) or soft targets (n, num_classes).

    With ``transitions`` (m, k, k) and ``channel`` (n,): row i's label went through the channel
    ``transitions[channel[i]]`` (P[reported j | true i], randomized response); the loss is then the
    cross-entropy of the reported label under the model's true-label probabilities sent through that
    channel (forward loss correction), so the net learns the true labels. With ``recipe.holdout``, a
    seeded share of the rows is not trained on but scored by the same loss after each epoch, and the
    best epoch's weights are returned (early stopping). Deterministic on CPU for one ``seed``.
    """
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
        corrected = transitions is not None
        if corrected:
            tt = torch.as_tensor(np.asarray(transitions, dtype=np.float32))
            ct = torch.as_tensor(np.asarray(channel, dtype=np.int64))
        order = torch.randperm(len(xt), generator=generator) if recipe.holdout else torch.arange(len(xt))
        held = order[: int(round(recipe.holdout * len(xt)))]
        fit = order[len(held):]
        if recipe.holdout and (not len(held) or not len(fit)):
            raise ValueError(f"a holdout of {recipe.holdout:g} leaves no rows to train on or to stop by among {len(xt)}")
        onehot = yt if y.ndim == 2 else nn.functional.one_hot(yt, num_classes).float()
        weights = onehot[fit].sum(dim=0)
        centres = onehot @ ((onehot[fit].T @ xt[fit]) / weights.clamp_min(1e-12)[:, None])

        def loss_of(rows: torch.Tensor, drawn: bool = False) -> torch.Tensor:
            inputs = xt[rows]
            if drawn:
                t = torch.rand(len(rows), 1, generator=generator)
                inputs = centres[rows] + t * (inputs - centres[rows])
            logits = net(inputs)
            if corrected:
                reported = torch.einsum("nk,nkj->nj", logits.softmax(dim=1), tt[ct[rows]])
                return -(onehot[rows] * reported.clamp_min(1e-12).log()).sum(dim=1).mean()
            return nn.functional.cross_entropy(logits, yt[rows])

        if recipe.optimizer == "adam":
            optimizer = torch.optim.Adam(net.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
        else:
            optimizer = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1.0 + recipe.decay * step))
        best: tuple[float, int, dict[str, torch.Tensor]] | None = None
        for epoch in range(recipe.epochs):
            net.train()
            for batch in fit[torch.randperm(len(fit), generator=generator)].split(recipe.batch_size):
                loss = loss_of(batch, recipe.shrink)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
            if len(held):
                net.eval()
                with torch.no_grad():
                    held_loss = float(loss_of(held))
                if best is None or held_loss < best[0]:
                    best = (held_loss, epoch, {k: v.clone() for k, v in net.state_dict().items()})
                elif recipe.patience and epoch - best[1] >= recipe.patience:
                    break
        if best is not None:
            net.load_state_dict(best[2])
    dense = [m for m in net if isinstance(m, nn.Linear)]
    return MLPModel(tuple((m.weight.detach().numpy().T.astype(np.float64), m.bias.detach().numpy().astype(np.float64)) for m in dense))
