"""The shuffle model: the FMT21 bound against published numbers and a direct computation, and the
shuffler between nodes and server (origin stripped, order permuted) in a whole in-process run."""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict
from scipy import stats

from ldpfed.fed import protocol
from ldpfed.clients.app import app as client_app
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.runtime.node import NodeReply
from ldpfed.fed.privacy.shuffle import composed, shuffled_delta, shuffled_epsilon
from ldpfed.fed.runtime.shuffler import ShuffledBatch, Shuffler
from ldpfed.strategies.app import app as server_app
from tests.conftest import write_review_folder
from tests.local_grid import LocalGrid


def test_bound_lies_within_the_published_numerical_bounds() -> None:
    # FMT21's reference implementation (apple/ml-shuffling-amplification, README and example.py):
    # shuffling 1e5 reports of 4-DP randomizers is (eps, 1e-6)-DP for eps between 0.1675 (lower) and 0.1728 (upper).
    assert 0.1675 <= shuffled_epsilon(10**5, 4.0, 1e-6) <= 0.1728


def test_one_report_is_not_amplified() -> None:
    # n = 1: the shuffle is the identity, and the pair (P, Q) is binary randomized response at eps0.
    eps0 = 2.0
    for eps in (0.0, 0.5, 1.5):
        expected = (math.exp(eps0) - math.exp(eps)) / (math.exp(eps0) + 1)
        assert shuffled_delta(1, eps0, eps) == pytest.approx(expected, rel=1e-12)
    assert shuffled_epsilon(1, eps0, 1e-6) == pytest.approx(eps0, rel=1e-6)


@pytest.mark.parametrize("n, eps0, eps", [(40, 1.0, 0.3), (25, 3.0, 1.0), (60, 0.5, 0.05)])
def test_delta_equals_the_hockey_stick_summed_over_every_outcome(n: int, eps0: float, eps: float) -> None:
    # Theorem 3.2's P and Q written out over every (c, a) and the divergence summed directly, both directions.
    alpha = math.exp(eps0) / (math.exp(eps0) + 1)
    forward = backward = 0.0
    for c in range(n):
        a = np.arange(c + 2)
        b, b_shift = stats.binom.pmf(a, c, 0.5), stats.binom.pmf(a - 1, c, 0.5)
        p = alpha * b_shift + (1 - alpha) * b
        q = alpha * b + (1 - alpha) * b_shift
        weight = stats.binom.pmf(c, n - 1, math.exp(-eps0))
        forward += weight * np.maximum(p - math.exp(eps) * q, 0).sum()
        backward += weight * np.maximum(q - math.exp(eps) * p, 0).sum()
    assert shuffled_delta(n, eps0, eps) == pytest.approx(max(forward, backward), rel=1e-9, abs=1e-15)


def test_rounds_compose_and_gaussian_reports_get_no_figure() -> None:
    one = shuffled_epsilon(5000, 2.0, 1e-6 / 2)
    assert composed([5000, 5000], 2.0, 1e-6).epsilon == pytest.approx(2 * one)
    assert composed([5000], None, 1e-6).epsilon is None
    with pytest.raises(ValueError, match="n must be"):
        shuffled_epsilon(0, 1.0, 1e-6)


def _parts(sizes: list[int], dim: int = 3) -> list[NodeReply]:
    """One release part per node; row i of node k is (k, i, 0...) so each report's origin is known."""
    parts = []
    for node, size in enumerate(sizes):
        reports = np.zeros((size, dim))
        reports[:, 0], reports[:, 1] = node, np.arange(size)
        users = np.full(size, 100 + node)
        parts.append(NodeReply(reports, np.arange(size) % 2, users, np.arange(size), {"mechanism": "x"}, {"kind": "public"},
                               ledgers={100 + node: {"epsilon_sentence": 1.0}}, host=f"host{node}"))
    return parts


def test_shuffler_output_carries_no_origin_and_keeps_every_report() -> None:
    parts = _parts([50, 70])
    (batch,) = Shuffler(np.random.default_rng(0)).shuffle(parts)
    assert {f.name for f in fields(ShuffledBatch)} == {"reports", "labels", "randomizer", "label_channel"}
    stacked = np.concatenate([p.reports for p in parts])
    assert sorted(map(tuple, batch.reports)) == sorted(map(tuple, stacked))
    with pytest.raises(ValueError, match="sums"):
        Shuffler(np.random.default_rng(0)).shuffle([replace(parts[0], sums=object())])  # type: ignore[arg-type]


def _runs(origins: np.ndarray) -> int:
    return int(1 + np.count_nonzero(origins[1:] != origins[:-1]))


def _assert_looks_permuted(origins: np.ndarray) -> None:
    """Wald-Wolfowitz runs test on the node of each report, in the order the server got them."""
    n1, n2 = np.bincount(origins, minlength=2)[:2]
    n = n1 + n2
    mean = 1 + 2 * n1 * n2 / n
    sd = math.sqrt(2 * n1 * n2 * (2 * n1 * n2 - n) / (n * n * (n - 1)))
    assert abs(_runs(origins) - mean) < 5 * sd, (_runs(origins), mean, sd)


def test_shuffler_permutes_uniformly() -> None:
    (batch,) = Shuffler(np.random.default_rng(1)).shuffle(_parts([400, 400]))
    _assert_looks_permuted(batch.reports[:, 0].astype(int))
    # positions within a node are not kept either: rank correlation with the original index is ~0
    original = batch.reports[:, 0] * 400 + batch.reports[:, 1]
    rho = stats.spearmanr(original, np.arange(len(original))).statistic
    assert abs(rho) < 5 / math.sqrt(len(original))


class OriginGrid(LocalGrid):
    """A LocalGrid that notes which node sent each training report (the ground truth a server must not learn)."""

    origin: dict[bytes, int] = {}

    def push_messages(self, messages):  # type: ignore[override]
        ids = list(super().push_messages(messages))
        for mid, msg in zip(ids, messages):
            reply = self._replies[mid]
            if msg.metadata.message_type == protocol.TRAIN and not reply.has_error():
                for part in protocol.read_release_replies(reply.content):
                    for row in part.reports:
                        OriginGrid.origin[row.tobytes()] = msg.metadata.dst_node_id
        return ids


def test_whole_run_hands_the_classifier_shuffled_reports_without_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    data = write_review_folder(tmp_path / "data", {"train": 240, "dev": 40}, "shuf", seed=3)
    out = tmp_path / "run"
    config = RunSpec.from_mapping(dict(
        data=str(data), public="none", dim=0, users=8, nodes=2, epsilon=4.0, clip=1.0, mechanism="laplace",
        privacy_model="shuffle", save_reports=True, out=str(out),
    )).to_mapping()
    seen: list[np.ndarray] = []
    add = ReportAggregator.add

    def recording_add(self, reports, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(np.array(reports))
        return add(self, reports, *args, **kwargs)

    monkeypatch.setattr(ReportAggregator, "add", recording_add)
    OriginGrid.origin = {}
    grid = OriginGrid(client_app, 2, config)
    server_app(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    received = np.concatenate(seen)
    assert len(received) == 240 == len(OriginGrid.origin)
    origins = np.array([OriginGrid.origin[row.tobytes()] for row in received]) - 1000
    _assert_looks_permuted(origins)
    saved = np.load(out / "reports.npz")
    assert (saved["users"] == -1).all()  # what the server keeps names no user
    summary = json.loads((out / "summary.json").read_text())
    shuffled = summary["shuffled"]
    assert shuffled["batch_sizes"] == [240]
    assert shuffled["epsilon"] == pytest.approx(shuffled_epsilon(240, shuffled["eps0"], 1e-5))
    assert "device cannot verify the shuffler" in (out / "privacy_report.md").read_text()
