"""What a downstream classifier of the server is: it takes released reports and gives models users can run.

Training on released reports is post-processing: a classifier sees only what users released, so
no choice of classifier changes a ledger. The models it gives travel to users (local inference)
or score query reports on the server (remote inference); a device runs only the forms the node
protocol carries and checks (:data:`Model`), so a classifier may train any way it likes but must
give one of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np

from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.learning.mlp import MLPModel
from ldpfed.fed.learning.report_sums import ReportSums

Model = Union[LinearModel, MLPModel]
"""The model forms users run: linear scores, or dense ReLU layers."""


@dataclass(frozen=True)
class ClassifierContext:
    """What the server knows when it builds a classifier: the decoded reports' shape, the run's seed and
    delta, the noise-aware discriminant's options (--shrinkage, --screening, --weighting) and the
    public data's covariance and class means (None without public data labelled like the task)."""

    dim: int
    """Values per decoded report."""
    num_classes: int
    """Classes of the task."""
    seed: int = 0
    """The run's seed."""
    delta: float = 1e-5
    """The run's delta."""
    shrinkage: float = -1.0
    """--shrinkage: the noise-aware discriminant's covariance shrinkage in [0, 1] (negative: automatic, Ledoit-Wolf)."""
    target: np.ndarray | None = None
    """(dim, dim): the covariance to shrink towards, the public data's within-class covariance (or None)."""
    public_means: np.ndarray | None = None
    """(num_classes, dim): the public data's class means (None without public data labelled like the task)."""
    screening: str = "auto"
    """--screening of the noise-aware discriminant."""
    weighting: str = "inverse-variance"
    """--weighting of the noise-aware discriminant."""


class ServerClassifier(ABC):
    """The server's downstream classifier: add released reports, then ask for models.

    ``needs_reports`` says whether it needs every report (the server then asks nodes for them) or
    reads only their sums (:class:`fed.learning.report_sums.ReportSums`, :meth:`add_sums`), which a
    node hosting many simulated users sends instead. ``reports`` counts the reports added so far.
    """

    needs_reports: ClassVar[bool] = True
    reports: int = 0

    @abstractmethod
    def add(
        self, reports: np.ndarray, labels: np.ndarray, randomizer_params: Mapping[str, Any], label_transition: np.ndarray | None
    ) -> None:
        """Add one batch of reports made by one randomizer (its params; decode them with
        fed.randomizers.make_randomizer), with labels as released and their channel
        (``label_transition[i, j]`` = P[reported j | true i]; None: exact labels)."""

    def add_sums(self, sums: ReportSums, randomizer_params: Mapping[str, Any], label_transition: np.ndarray | None) -> None:
        """Add a node's sums of decoded reports (only classifiers with ``needs_reports`` False are sent sums)."""
        raise NotImplementedError(f"{type(self).__name__} needs every report, not their sums")

    @abstractmethod
    def model(self) -> Model:
        """The model for clean inputs (local inference)."""

    @abstractmethod
    def model_for_reports(self, randomizer_params: Mapping[str, Any], answers: int = 1) -> Model:
        """The model for query reports made by this randomizer (remote inference); with ``answers`` > 1
        a user averages the scores of that many answers to one query."""

    def round_metrics(self) -> dict[str, Any]:
        """Figures of the fitted model for a round's metrics (none by default)."""
        return {}
