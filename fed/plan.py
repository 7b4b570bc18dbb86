"""A run's privacy plan: the calibrated randomizers, the label channel and each user's budget.

Server and users derive it from the same run options: the server to know what to ask
for, each user to set its own budget and noise floor (it refuses anything noisier-less).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fed.config import RunConfig
from fed.privacy.composition import compose_epsilon
from fed.privacy.ledger import Budget
from fed.randomizers import RANDOMIZERS, Randomizer
from fed.randomizers.labels import PublicLabels, RandomizedResponse
from fed.requests import ClientLimits


@dataclass(frozen=True)
class PrivacyPlan:
    """Randomizers for training and query releases, label channel, and budget."""

    train: Randomizer
    query: Randomizer
    labels: PublicLabels | RandomizedResponse
    budget: Budget

    def limits(self, kind: str) -> ClientLimits:
        """The user's floor for one kind of release: no run may cost more than planned."""
        randomizer = self.train if kind == "train" else self.query
        return ClientLimits(compose_epsilon({randomizer.event: 1}, self.budget.delta), self.budget.delta)


@lru_cache(maxsize=64)
def make_plan(config: RunConfig, num_labels: int) -> PrivacyPlan:
    """Calibrate (or take --sigma) and set the per-record and per-user budgets."""
    labels: PublicLabels | RandomizedResponse = (
        PublicLabels(num_labels) if config.label_epsilon is None else RandomizedResponse(config.label_epsilon, num_labels)
    )
    label_events = {} if labels.event is None else {labels.event: config.releases_per_record}
    cls = RANDOMIZERS[config.mechanism]
    user_epsilon = config.user_epsilon or float("inf")
    if config.sigma > 0:
        train = query = cls.from_params({"mechanism": config.mechanism, "clip": config.clip, "sigma": config.sigma})
        epsilon = max(
            compose_epsilon({train.event: config.releases_per_record, **label_events}, config.delta),
            compose_epsilon({query.event: config.releases_per_query}, config.delta),
        )
        return PrivacyPlan(train, query, labels, Budget(epsilon, config.delta, user_epsilon))
    options = {"clip": config.clip}
    train = cls.calibrated(config.epsilon, config.delta, config.releases_per_record, options, label_events)
    query = cls.calibrated(config.epsilon, config.delta, config.releases_per_query, options)
    return PrivacyPlan(train, query, labels, Budget(config.epsilon, config.delta, user_epsilon))
