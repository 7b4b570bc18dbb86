"""Central DP-FedAvg (--privacy-model central): Flower's own DP wrapper over FedAvg of a softmax head.

Every round the server samples --users-per-round of the users (one user per node) with the run
seed, sends them the global head as ``train.central``; each trains on its clean encodings and
Flower's ``fixedclipping_mod`` clips its update on the client; ``DifferentialPrivacyClientSideFixedClipping``
averages the updates with equal weights and adds N(0, (z C / m)^2) to the mean. After the last
round the nodes score the head by local inference, as they score the local model's classifier.
The user-level (epsilon, delta) comes from fed.privacy.central (dp_accounting, the actual sampling).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    FedAvg,
    Strategy,
)

from ldpfed.fed import protocol
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.learning.evaluation import accuracy
from ldpfed.fed.privacy.central import TRUST, CentralAccount, account, calibrate
from ldpfed.fed.reporting.run_record import RunRecord
from ldpfed.fed.learning.softmax_head import initial
from ldpfed.strategies.strategy import FLOWER, LdpStrategy


class CentralFedAvg(FedAvg):
    """FedAvg with equal weights that samples m of the set-up nodes per round with the run seed."""

    def __init__(self, config: RunSpec, nodes: list[int], record: RunRecord) -> None:
        self.per_round = config.schedule.users_per_round or config.data.users
        super().__init__(
            fraction_evaluate=0.0, min_train_nodes=self.per_round, min_available_nodes=self.per_round,
            weighted_by_key=protocol.CENTRAL_WEIGHT,
        )
        self.nodes = sorted(nodes)
        self.rng = np.random.default_rng(config.seed)
        self.record = record
        self.started = time.monotonic()
        self.message_type = protocol.CENTRAL_TRAIN if config.privacy.central_clipping == "fixed" else protocol.CENTRAL_TRAIN_ADAPTIVE

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """``train.central`` to a uniform sample of m nodes, without replacement."""
        self.started = time.monotonic()
        # Sample positions, not ids: numpy turns a list of node ids (uint64) that mixes ids above and
        # below 2**63 into float64, which rounds the ids to nodes that do not exist.
        chosen = sorted(self.nodes[i] for i in self.rng.choice(len(self.nodes), size=self.per_round, replace=False))
        config[protocol.CENTRAL_ROUND] = server_round
        content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._construct_messages(content, chosen, self.message_type)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):  # type: ignore[override]
        """FedAvg's own aggregation (the DP wrapper requires it); the round's metrics go to the run record."""
        replies = list(replies)
        result = super().aggregate_train(server_round, replies)
        self.record.round({
            "round": server_round, "users_sampled": self.per_round,
            "updates_received": sum(not r.has_error() for r in replies), "seconds": time.monotonic() - self.started,
        })
        return result


def noise_for(config: RunSpec) -> CentralAccount:
    """The run's Flower noise multiplier and its user-level account: --central-noise, or calibrated to --epsilon."""
    per_round = config.schedule.users_per_round or config.data.users
    if config.privacy.central_noise > 0:
        return account(config.privacy.central_noise, config.data.users, per_round, config.schedule.rounds, config.privacy.delta)
    return calibrate(config.privacy.epsilon, config.data.users, per_round, config.schedule.rounds, config.privacy.delta)


def train(grid: Grid, config: RunSpec, setup: LdpStrategy) -> tuple[LinearModel, CentralAccount]:
    """Run the DP-FedAvg rounds over the nodes ``setup`` has set up; returns the final head and its account."""
    nodes = sorted(set(setup.node_of.values()) & setup.available)
    if len(nodes) != config.data.users:
        raise RuntimeError(f"central DP-FedAvg needs all {config.data.users} users' nodes set up, got {len(nodes)}: {setup.errors}")
    plan = noise_for(config)
    np.random.seed(config.seed % 2**32)  # Flower's wrapper draws its noise from NumPy's global generator (simulation)
    inner = CentralFedAvg(config, nodes, setup.record)
    strategy = dp_wrapper(config, inner, plan.noise_multiplier)
    head = initial(setup.dim, setup.num_labels)  # the classifier's input: the plan's features of the records
    result = strategy.start(
        grid, initial_arrays=FLOWER.record(protocol.central_arrays(head)), num_rounds=config.schedule.rounds, timeout=config.schedule.round_timeout
    )
    models = protocol.read_evaluate_request(RecordDict({"m": result.arrays}), setup.dim, setup.num_labels, key="m")
    return models[protocol.CENTRAL_HEAD], plan


def dp_wrapper(config: RunSpec, inner: CentralFedAvg, noise_multiplier: float) -> Strategy:
    """Flower's client-side clipping wrapper for --central-clipping around ``inner``.

    Adaptive: ``noise_multiplier`` is the effective one over the update noise and the noise on the
    count of clipped updates (Andrew et al. 2021, as Flower computes it); that count's std is
    max(m / 20, noise_multiplier), Andrew et al.'s m / 20 unless the update noise would have to grow
    without bound, which costs at most a factor 2/sqrt(3) on the update noise.
    """
    m = inner.per_round
    if config.privacy.central_clipping == "fixed":
        return DifferentialPrivacyClientSideFixedClipping(inner, noise_multiplier, config.privacy.central_clip, num_sampled_clients=m)
    return DifferentialPrivacyClientSideAdaptiveClipping(
        inner, noise_multiplier, num_sampled_clients=m, initial_clipping_norm=config.privacy.central_clip,
        clipped_count_stddev=max(m / 20, noise_multiplier),
    )


def evaluate(grid: Grid, setup: LdpStrategy, models: dict[str, LinearModel]) -> dict[str, float]:
    """Local inference of ``models`` on every node's clean queries (exact: simulation only)."""
    content = FLOWER(protocol.evaluate_request(models))
    messages = [Message(content, dst_node_id=n, message_type=protocol.EVALUATE) for n in setup._hosting()]
    return accuracy([protocol.read_outcomes_reply(reply.content) for _, reply in setup._exchange(grid, messages)])


def report(config: RunSpec, plan: CentralAccount, accuracies: dict[str, Any]) -> str:
    """The privacy report of a central run."""
    return "\n".join([
        "# Privacy report: central DP-FedAvg (--privacy-model central)",
        "",
        f"- accuracy of the DP-FedAvg softmax head (local inference, exact, simulation only): {accuracies['accuracy_local']}",
        f"- user-level epsilon {plan.epsilon:.4g} at delta {plan.delta:g} (unit: all of one user's records)",
        f"- Flower noise multiplier {plan.noise_multiplier:.4g} (noise std on the sum of updates / clipping norm "
        f"{config.privacy.central_clip:g}, clipping {config.privacy.central_clipping}); {plan.users_per_round} of {plan.users} users per "
        f"round, {plan.rounds} rounds",
        "- sampling: fixed-size, uniformly without replacement, seeded by the run seed",
        f"- accountant: {plan.to_json()['accountant']}",
        "- labels: clean (the head trains on the users' own labels; they leave the user only inside the clipped update)",
        "",
        "## Trust assumption",
        "",
        TRUST + ".",
        "",
    ])
