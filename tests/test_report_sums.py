"""A node may send the sums of its decoded reports instead of the reports (fed.learning.report_sums): the sums
must be exactly what the server would have computed, the model the same, the ledgers untouched,
and a hostile or malformed request or reply must be refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed import protocol
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.device.entropy import simulation_engine
from ldpfed.fed.randomizers import RANDOMIZERS
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.fed.runtime.requests import RequestRefused
from tests.test_cohort import PATHS, _host, _request


def _fields(sums: ReportSums) -> tuple:
    return sums.class_sums, sums.label_counts, sums.second_moment, sums.count


def test_report_sums_are_the_class_sums_counts_and_second_moment_and_they_merge() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20_000, 7)), rng.integers(0, 3, 20_000)
    sums = ReportSums.of(x, y, 3)
    assert np.allclose(sums.class_sums, [x[y == c].sum(axis=0) for c in range(3)])
    assert np.array_equal(sums.label_counts, np.bincount(y, minlength=3))
    assert np.allclose(sums.second_moment, x.T @ x) and sums.count == 20_000
    low = ReportSums.of(x.astype(np.float32), y, 3)  # float32 blocks summed in float64
    assert np.allclose(low.second_moment, x.T @ x, rtol=1e-5) and not np.array_equal(low.second_moment, sums.second_moment)
    halves = [ReportSums.of(x[s], y[s], 3) for s in (slice(0, 12_345), slice(12_345, None))]
    for whole, *parts in zip(_fields(sums), *map(_fields, halves)):
        assert np.allclose(whole, sum(parts))
    soft = np.eye(3)[y] * 0.5 + 0.5 / 3
    assert np.allclose(ReportSums.of(x, soft, 3).label_counts, soft.sum(axis=0))


@pytest.mark.parametrize("path", PATHS)
def test_a_summarised_reply_holds_the_sums_of_the_reports_it_replaces_and_spends_the_same(tmp_path: Path, path: str) -> None:
    with simulation_engine():
        raw = _host(tmp_path / "raw", path, "public")
        summed = _host(tmp_path / "summed", path, "public")
        users = sorted(raw.records)
        reply = raw.release("train", _request(raw, users, 0))
        short = summed.release("train", {**_request(summed, users, 0), "summarise": True})
    assert len(reply.reports) > 20 and short.sums is not None and not len(short.reports) and not len(short.labels)
    expected = ReportSums.of(reply.reports.astype(np.float32), reply.labels, 2)
    for want, got in zip(_fields(expected), _fields(short.sums)):
        assert np.array_equal(want, got)
    assert np.array_equal(reply.users, short.users) and reply.refusals == short.refusals
    assert raw.ledgers() == summed.ledgers()
    decoded = protocol.read_release_reply(protocol.release_reply(short))
    for want, got in zip(_fields(short.sums), _fields(decoded.sums)):
        assert np.array_equal(want, got)
    assert protocol.read_release_reply(protocol.release_reply(reply)).sums is None


def test_the_server_fits_the_same_model_from_sums_as_from_reports() -> None:
    rng = np.random.default_rng(1)
    randomizer = GaussianRandomizer(1.0, 0.5)
    x = np.concatenate([rng.normal(0.4, 0.3, (3_000, 6)), rng.normal(-0.4, 0.3, (3_000, 6))])
    y = np.repeat([0, 1], 3_000)
    reports = randomizer.release(x, rng).astype(np.float32)
    transition = np.array([[0.8, 0.2], [0.2, 0.8]])
    from_reports, from_sums = ReportAggregator(6, 2, -1.0), ReportAggregator(6, 2, -1.0)
    from_reports.add(reports, y, randomizer.params(), transition)
    from_sums.add_sums(ReportSums.of(reports, y, 2), randomizer.params(), transition)
    assert from_sums.reports == from_reports.reports == 6_000
    a, b = from_reports.model(), from_sums.model()
    assert np.allclose(a.weights, b.weights, rtol=1e-5) and np.allclose(a.bias, b.bias, rtol=1e-5, atol=1e-8)


def test_summarise_is_refused_on_query_releases_and_unless_a_boolean_and_nothing_is_spent(tmp_path: Path) -> None:
    with simulation_engine():
        host = _host(tmp_path, "cohort", "public")
        before = host.ledgers()
        users = sorted(host.records)
        with pytest.raises(RequestRefused, match="train requests only"):
            host.release("query", {**_request(host, users, 0), "summarise": True})
        for value in ("yes", 1, None, [True]):
            with pytest.raises(RequestRefused, match="'summarise' must be true or false"):
                host.release("train", {**_request(host, users, 0), "summarise": value})
        assert host.ledgers() == before


@pytest.mark.parametrize(
    "change, message",
    [
        ({"second_moment": np.zeros((3, 3))}, "shapes"),
        ({"class_sums": np.full((2, 4), np.nan)}, "NaN"),
        ({"count": 7}, "label counts add to"),
        ({"count": -1}, "non-negative integer"),
        ({"count": 2.5}, "non-negative integer"),
    ],
)
def test_malformed_sums_from_a_node_are_refused_by_the_server(change: dict, message: str) -> None:
    good = dict(class_sums=np.ones((2, 4)), label_counts=np.array([3.0, 2.0]), second_moment=np.eye(4), count=5)
    aggregator = ReportAggregator(4, 2, -1.0)
    with pytest.raises(ValueError, match=message):
        aggregator.add_sums(ReportSums(**{**good, **change}), GaussianRandomizer(1.0, 1.0).params(), None)
    assert aggregator.reports == 0 and aggregator.lda.count == 0


def test_only_randomizers_whose_decode_is_the_identity_skip_decoding() -> None:
    rng = np.random.default_rng(2)
    reports = rng.normal(size=(5, 3)).astype(np.float32)
    for name, cls in RANDOMIZERS.items():
        if cls.decoded_as_sent:
            randomizer = cls.__new__(cls)  # decode of a plain clip-and-noise randomizer reads no parameter but its noise
            object.__setattr__(randomizer, cls.noise_key, 1.0)
            assert np.array_equal(randomizer.decode(reports)[0], reports), name
