"""``--dim auto``: the projection's dimension, chosen on public data by simulating the run's noisy reports.

The server never sees a clean record of a user, so it chooses on what it holds: its public
labelled encodings, the run's training randomizer (noise scale and clip, a public function of
the run options) and the planned number of training reports (the users' dataset sizes are
public, design.md section 2). For each candidate dimension (0: the encoder's own, no projection)
it fits the projection on one half of the public records, draws as many noisy reports of them as
the run will send, fits the server's noise-aware classifier on those reports, and scores it on the
other half, clean (local inference).

Public data labelled like the task stands in for the task: the best simulated dimension wins.
Public data with other labels measures only how much of a text's signal the noise leaves in d
dimensions; a projection fitted on it may still discard what the task needs (fed.runtime.assets'
domain check, measured in simulations). So then no projection is shipped unless the full
dimension loses more than ``UNRELATED_MARGIN`` to the best projection on the public data itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.randomizers.base import Randomizer

if TYPE_CHECKING:
    from ldpfed.fed.configuration.run_spec import RunSpec

CANDIDATES = (8, 16, 32, 64, 128)
"""Projected dimensions tried besides 0 (no projection); those above the encoder's are skipped."""
UNRELATED_MARGIN = 0.05
"""With public data labelled unlike the task, no projection unless it loses more than this much
accuracy (on the public data's own labels) to the best projection."""
MIN_PUBLIC = 40
"""Fewest public records for the simulation (half fit the projection, half score it); fewer: no projection."""
MAX_SIMULATED = 20_000
"""Most reports drawn per candidate. A run planning more is simulated with this many reports at the noise
std scaled by sqrt(MAX_SIMULATED / reports): the class means, which carry the noise the dimension trades
against, then vary as much as from the run's reports (the within-class covariance is estimated from fewer)."""
REPEATS = 2
"""Noise draws per candidate; their accuracies are averaged."""


@dataclass(frozen=True)
class DimChoice:
    """The chosen dimension and the simulation behind it.

    Attributes
    ----------
    dim:
        The chosen projection dimension; 0 for none.
    related:
        Whether the public data is labelled like the task (it then stands in for the task).
    reports:
        The run's planned training reports.
    simulated:
        Noisy reports drawn per candidate (at most MAX_SIMULATED, the noise scaled to match).
    accuracy:
        Simulated accuracy on held-out public records by candidate dimension (0: the encoder's own).
    reason:
        One sentence saying why ``dim`` was chosen.
    """

    dim: int
    related: bool
    reports: int
    simulated: int
    accuracy: dict[int, float]
    reason: str

    def to_json(self) -> dict:
        """The choice as summary.json records it."""
        return {
            "dim": self.dim,
            "related": self.related,
            "reports": self.reports,
            "simulated": self.simulated,
            "accuracy": {str(d): a for d, a in self.accuracy.items()},
            "reason": self.reason,
        }


def choose_dim(
    public_x: np.ndarray,
    public_y: np.ndarray,
    num_public_labels: int,
    randomizer: Randomizer,
    reports: int,
    related: bool,
    seed: int = 0,
) -> DimChoice:
    """Choose the projection dimension for a run from public data only (see the module docstring).

    Parameters
    ----------
    public_x, public_y:
        The server's clean public encodings (n, encoder dim) and their labels.
    num_public_labels:
        Number of public labels.
    randomizer:
        The run's training randomizer, a Gaussian (its noise is independent of the dimension).
    reports:
        Planned training reports of the run (records x planned releases).
    related:
        Whether the public data is labelled like the task.
    seed:
        Seed of the split and of the simulated noise.
    """
    x = np.asarray(public_x, dtype=np.float32)
    y = np.asarray(public_y, dtype=np.int64)
    if len(x) < MIN_PUBLIC or num_public_labels < 2:
        return DimChoice(0, related, reports, 0, {}, f"fewer than {MIN_PUBLIC} public records or one label: no projection")
    rng = np.random.default_rng([seed, 29])
    order = rng.permutation(len(x))
    fit, held = order[: len(x) // 2], order[len(x) // 2 :]
    n = int(min(max(reports, 1), MAX_SIMULATED))
    if n < reports:
        randomizer = type(randomizer).from_params({**randomizer.params(), "sigma": randomizer.params()["sigma"] * (n / reports) ** 0.5})
    dims = [0] + [d for d in CANDIDATES if d < min(x.shape[1], len(fit))]
    accuracy = {d: _simulate(x, y, num_public_labels, fit, held, d, randomizer, n, rng) for d in dims}
    best = max(accuracy, key=lambda d: (accuracy[d], -d))
    if related:
        reason = f"public data labelled like the task: best simulated accuracy at {_name(best)}"
        return DimChoice(best, related, reports, n, accuracy, reason)
    if accuracy[0] >= accuracy[best] - UNRELATED_MARGIN:
        reason = (
            f"public data labelled unlike the task, and without a projection its own simulated accuracy "
            f"{accuracy[0]:.3f} is within {UNRELATED_MARGIN} of the best ({accuracy[best]:.3f} at {_name(best)}): "
            "no projection fitted on unrelated text"
        )
        return DimChoice(0, related, reports, n, accuracy, reason)
    reason = (
        f"public data labelled unlike the task, but the noise leaves too little in the encoder's "
        f"{x.shape[1]} dimensions (simulated {accuracy[0]:.3f} against {accuracy[best]:.3f} at {_name(best)})"
    )
    return DimChoice(best, related, reports, n, accuracy, reason)


def _simulate(
    x: np.ndarray,
    y: np.ndarray,
    num_labels: int,
    fit: np.ndarray,
    held: np.ndarray,
    dim: int,
    randomizer: Randomizer,
    n: int,
    rng: np.random.Generator,
) -> float:
    """Mean held-out accuracy of the noise-aware classifier fitted on ``n`` noisy reports at ``dim``."""
    projection = PCAProjection.fit(x[fit], dim) if dim else None
    features = projection.apply(x) if projection else x
    scores = []
    for _ in range(REPEATS):
        rows = fit[rng.integers(0, len(fit), n)]
        aggregator = ReportAggregator(features.shape[1], num_labels, shrinkage=-1.0)
        aggregator.add(randomizer.release(features[rows], rng), y[rows], randomizer.params(), None)
        predicted = aggregator.model().predict(features[held])
        scores.append(float(np.mean(predicted == y[held])))
    return float(np.mean(scores))


def _name(dim: int) -> str:
    return "no projection" if dim == 0 else f"{dim} dimensions"


def choose_for_run(
    config: "RunSpec",
    public_x: np.ndarray,
    public_labels: np.ndarray,
    public_label_names: Sequence[str],
    task_labels: Sequence[str],
    train_records: int,
) -> DimChoice:
    """:func:`choose_dim` for a run: its training randomizer and planned reports, from public facts only.

    ``task_labels`` are the task's label names (its schema, or the ids as strings where only their
    count is known, as the nodes tell it); ``train_records`` is the number of training records the
    nodes hold (public, design.md section 2). Reports = records x the planned releases per record.
    """
    from ldpfed.fed.runtime.assets import same_labels
    from ldpfed.fed.configuration.plan import make_plan, planned_train_releases

    plan = make_plan(config.with_options(dim=0), len(task_labels))
    related = same_labels(public_label_names, task_labels)
    reports = train_records * planned_train_releases(config)
    return choose_dim(public_x, public_labels, len(public_label_names), plan.train, reports, related, config.seed)
