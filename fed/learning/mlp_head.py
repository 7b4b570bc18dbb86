"""``--classifier mlp``: the seeds' MLP head trained by SGD on every decoded report the server received.

Seeds 000 and 003 train a neural head on the noisy representations; this one follows the
seeds' Keras-style recipe (fed.learning.mlp). It keeps every report (not their sums), so the
server asks nodes for the reports themselves; what it learns is still a function of the released
reports only (post-processing: no ledger changes). Inputs are standardised by the reports' own
mean and spread, folded into the first layer so that users score raw features. Randomized-response
labels are learnt through their channel (forward loss correction). Each report is drawn toward its
class's mean by a fresh uniform share whenever it is trained on (``MLPRecipe.shrink``): the reports
are far noisier than the clean queries users score, and a net trained on them as given memorises
them and scores clean queries at chance (issue 28). Retrained from its seed
whenever reports were added, so a run is reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ldpfed.fed.learning.mlp import MLPModel, MLPRecipe, train_mlp
from ldpfed.fed.learning.server_classifier import ClassifierContext, ServerClassifier
from ldpfed.fed.randomizers import make_randomizer

RECIPE = MLPRecipe(hidden=(128,), epochs=20, batch_size=64, lr=0.01, momentum=0.9, decay=1e-6, shrink=True)
"""One hidden layer of 128 ReLU units, 20 epochs of SGD with momentum (seed 004's schedule), rows drawn toward
their class means (docs/results.md)."""
STREAM = 0x4D4C50
"""Stream of the MLP's initialisation and batch order under the run seed."""


class MLPHead(ServerClassifier):
    """The MLP trained on every report added so far (see the module docstring)."""

    needs_reports = True

    def __init__(self, context: ClassifierContext, recipe: MLPRecipe = RECIPE) -> None:
        self.dim, self.num_classes, self.recipe = context.dim, context.num_classes, recipe
        self.seed = int(np.random.SeedSequence([context.seed, STREAM]).generate_state(1)[0])
        self.reports = 0
        self._x: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self._channel: list[np.ndarray] = []
        self._transitions: list[np.ndarray] = []
        self._fitted: tuple[int, MLPModel] | None = None

    def add(
        self, reports: np.ndarray, labels: np.ndarray, randomizer_params: Mapping[str, Any], label_transition: np.ndarray | None
    ) -> None:
        """Decode one batch of reports made by one randomizer and keep it."""
        estimates = np.asarray(make_randomizer(randomizer_params).decode(reports)[0], dtype=np.float32)
        if estimates.ndim != 2 or estimates.shape[1] != self.dim or not np.isfinite(estimates).all():
            raise ValueError(f"reports must decode to finite rows of {self.dim} numbers, got shape {estimates.shape}")
        labels = np.asarray(labels)
        if len(labels) != len(estimates):
            raise ValueError(f"{len(estimates)} reports but {len(labels)} labels")
        transition = np.eye(self.num_classes) if label_transition is None else np.asarray(label_transition, np.float64)
        known = [i for i, t in enumerate(self._transitions) if np.array_equal(t, transition)]
        if not known:
            self._transitions.append(transition)
        self._x.append(estimates)
        self._y.append(labels)
        self._channel.append(np.full(len(estimates), known[0] if known else len(self._transitions) - 1, dtype=np.int64))
        self.reports += len(estimates)

    def model(self) -> MLPModel:
        """The MLP for clean inputs (local inference), retrained only after new reports."""
        if not self.reports:
            raise ValueError("no reports received yet")
        if self._fitted is None or self._fitted[0] != self.reports:
            self._fitted = (self.reports, self._train())
        return self._fitted[1]

    def model_for_reports(self, randomizer_params: Mapping[str, Any], answers: int = 1) -> MLPModel:
        """The same MLP: it was trained on noisy reports, and scores query reports as they come (a user
        averages its logits over the ``answers``)."""
        return self.model()

    def _train(self) -> MLPModel:
        x = np.concatenate(self._x)
        mean = x.mean(axis=0, dtype=np.float64)
        scale = np.maximum(x.std(axis=0, dtype=np.float64), 1e-12)
        labels = np.concatenate(self._y)
        exact = all(np.array_equal(t, np.eye(self.num_classes)) for t in self._transitions)
        net = train_mlp(
            (x - mean) / scale, labels, self.num_classes, self.recipe, self.seed,
            None if exact else np.array(self._transitions), None if exact else np.concatenate(self._channel),
        )
        (weights, bias), *rest = net.layers
        first = (weights / scale[:, None], bias - (mean / scale) @ weights)
        return MLPModel((first, *rest))
