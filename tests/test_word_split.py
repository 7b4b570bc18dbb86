"""Seed 003's split at the word-embedding rows (``--mechanism snd``'s one class on a model's table): both samplers'
noise, events, an attack, the server pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats
from transformers import BertConfig, BertModel

from ldpfed.fed.privacy.audit import dchi_llr, lr_epsilon_lower_bound
from ldpfed.fed.privacy.events import CoordinateMetricDPEvent, MetricDPEvent, event_from_json
from ldpfed.fed.encoders.word_split import TableBounds, coordinate_rows, dchi_rows, server_pass, standard_gamma
from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer
from tests.randomizer_helpers import DELTA


def _tiny_model(rows: np.ndarray, layers: int = 1) -> BertModel:
    """A random BERT whose word-embedding table is ``rows``."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(rows), hidden_size=rows.shape[1], num_hidden_layers=layers, num_attention_heads=1,
        intermediate_size=8, max_position_embeddings=16,
    )
    model = BertModel(config)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.copy_(torch.from_numpy(np.asarray(rows, dtype=np.float32)))
    return model.eval()


def _split(model: BertModel, sampler: str, eta: float, post_clip: bool = True) -> SplitDenoiseRandomizer:
    """The mechanism at ``model``'s table, as the seed-003 reproduction builds it."""
    return SplitDenoiseRandomizer.for_model(model, sampler, eta, 8, "tiny", post_clip=post_clip)


def _rows(model: BertModel, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.embeddings.word_embeddings(ids).float()


def _coordinate_cdf(z: np.ndarray, dim: int, eta: float) -> np.ndarray:
    """CDF of one coordinate of the authors' noise, derived from f(z) = eta / (2 (d-1)) Q(d-1, eta |z|)."""
    t = eta * np.abs(z)
    half = (t * special.gammaincc(dim - 1, t) / (dim - 1) + special.gammainc(dim, t)) / 2
    return 0.5 + np.sign(z) * half


def _coordinate_log_density(z: np.ndarray, dim: int, eta: float) -> np.ndarray:
    """log f(z) per coordinate, up to the constant log(eta / (2 (d - 1)))."""
    return stats.gamma.logsf(eta * np.abs(z), dim - 1)


@pytest.mark.parametrize("alpha", [1.0, 3.0, 384.0])
def test_gamma_sampler_is_gamma(alpha: float) -> None:
    x = standard_gamma((20_000,), alpha, torch.Generator().manual_seed(0)).numpy()
    assert stats.kstest(x, "gamma", args=(alpha,)).pvalue > 1e-3
    assert stats.kstest(x, "gamma", args=(alpha * 1.05,)).pvalue < 1e-4


def test_dchi_rows_have_gamma_radius_and_uniform_direction() -> None:
    d, eta = 16, 2.5
    z = dchi_rows(20_000, d, eta, torch.Generator().manual_seed(1)).numpy()
    radius = np.linalg.norm(z, axis=1)
    assert stats.kstest(radius, "gamma", args=(d, 0, 1 / eta)).pvalue > 1e-3
    assert stats.kstest(radius, "gamma", args=(d, 0, 1.1 / eta)).pvalue < 1e-6
    proj = (z / radius[:, None]) @ (np.ones(d) / math.sqrt(d))
    assert stats.kstest((proj + 1) / 2, "beta", args=((d - 1) / 2, (d - 1) / 2)).pvalue > 1e-3


def test_coordinate_rows_follow_the_derived_marginal() -> None:
    # d = 2: every coordinate is exactly Laplace(1 / eta).
    z2 = coordinate_rows(10_000, 2, 3.0, torch.Generator().manual_seed(2)).numpy()
    assert stats.kstest(z2.ravel(), "laplace", args=(0, 1 / 3.0)).pvalue > 1e-3
    d, eta = 16, 4.0
    z = coordinate_rows(2_000, d, eta, torch.Generator().manual_seed(3)).numpy()
    assert stats.kstest(z.ravel(), lambda v: _coordinate_cdf(v, d, eta)).pvalue > 1e-3
    assert stats.kstest(z.ravel(), lambda v: _coordinate_cdf(v, d, 1.1 * eta)).pvalue < 1e-6
    # coordinates are independent (the text's sampler couples them through one radius)
    assert abs(np.corrcoef(np.abs(z[:, 0]), np.abs(z[:, 1]))[0, 1]) < 0.1
    radius = np.linalg.norm(dchi_rows(2_000, d, eta, torch.Generator().manual_seed(3)).numpy(), axis=1)
    assert radius.mean() == pytest.approx(d / eta, rel=0.02)


def test_coordinate_privacy_loss_is_eta_times_l1_not_l2() -> None:
    # An independent computation of the loss: the derived per-coordinate log density, far out
    # along sign(x1 - x0), approaches eta ||x1 - x0||_1 and never passes it.
    d, eta = 8, 0.7
    x0, x1 = np.zeros(d), np.linspace(-0.3, 0.4, d)
    gap = x1 - x0
    far = x1 + np.sign(gap)[None, :] * np.geomspace(0.1, 1_000, 60)[:, None]
    loss = (_coordinate_log_density(far - x1, d, eta) - _coordinate_log_density(far - x0, d, eta)).sum(axis=1)
    rng = np.random.default_rng(4)
    anywhere = rng.normal(scale=30, size=(20_000, d))
    loss_any = (_coordinate_log_density(anywhere - x1, d, eta) - _coordinate_log_density(anywhere - x0, d, eta)).sum(1)
    l1, l2 = eta * np.abs(gap).sum(), eta * np.linalg.norm(gap)
    assert np.isfinite(loss).all() and loss.max() == pytest.approx(l1, rel=0.02) and loss.max() > 1.5 * l2
    assert np.all(loss <= l1 + 1e-9) and np.all(np.abs(loss_any) <= l1 + 1e-9)


def test_events_state_the_table_diameters() -> None:
    rows = np.random.default_rng(5).normal(size=(40, 6))
    model = _tiny_model(rows)
    bounds = TableBounds.of(model.embeddings.word_embeddings.weight)
    table = model.embeddings.word_embeddings.weight.detach().double().numpy()
    pairs_l1 = np.abs(table[:, None] - table[None]).sum(-1).max()
    pairs_l2 = np.linalg.norm(table[:, None] - table[None], axis=-1).max()
    assert bounds.clip == pytest.approx(np.linalg.norm(table, axis=1).max())
    assert pairs_l2 <= bounds.l2_diameter and pairs_l1 <= bounds.l1_diameter
    dchi, coord = _split(model, "dchi", 0.5), _split(model, "coordinate", 0.5)
    assert dchi.event_for(7) == MetricDPEvent(0.5, bounds.l2_diameter, 7)
    assert coord.event_for(7) == CoordinateMetricDPEvent(0.5, bounds.l1_diameter, 7)
    assert coord.event_for(7) != MetricDPEvent(0.5, bounds.l1_diameter, 7)
    assert coord.event_for(7).epsilon == pytest.approx(7 * 0.5 * bounds.l1_diameter)
    assert coord.claimed_epsilon_per_token() == pytest.approx(dchi.event_for(1).epsilon)
    assert event_from_json(coord.event_for(3).to_json()) == coord.event_for(3)
    assert coord.event == coord.event_for(8) and dchi.event.tokens == 8  # a release is charged for L tokens


@pytest.mark.parametrize("post_clip", [False, True])
def test_attack_breaks_the_seeds_claim_for_the_authors_sampler_only(post_clip: bool) -> None:
    # Two table rows at +-(c, c) in d = 2: the seed claims eta * ||x1 - x0||_2 = 2 for either
    # sampler; the authors' sampler is Laplace per coordinate, eta * ||x1 - x0||_1 = 2.83.
    c = 1 / math.sqrt(2)
    rows = np.array([[-c, -c], [c, c]])
    model, n = _tiny_model(rows), 100_000
    ids0, ids1, mask = torch.zeros(n, 1, dtype=torch.long), torch.ones(n, 1, dtype=torch.long), torch.ones(n, 1)
    found = {}
    for sampler in ("coordinate", "dchi"):
        split = _split(model, sampler, 1.0, post_clip=post_clip)
        generator = torch.Generator().manual_seed(6)
        y0 = split.release_rows(_rows(model, ids0), mask, generator)[0][:, 0].double().numpy()
        y1 = split.release_rows(_rows(model, ids1), mask, generator)[0][:, 0].double().numpy()
        if sampler == "coordinate":
            score = lambda y: (np.abs(y - rows[0]) - np.abs(y - rows[1])).sum(1)  # noqa: E731 - Laplace LLR / eta
        else:
            score = lambda y: dchi_llr(y, rows[0], rows[1], 1.0)  # noqa: E731
        found[sampler] = lr_epsilon_lower_bound(score(y0), score(y1), DELTA)
        assert found[sampler] <= split.event_for(1).epsilon
    claim = 1.0 * 2.0
    assert found["coordinate"] > claim * 1.2
    assert found["dchi"] <= claim


def test_release_noises_real_rows_only_and_clips_them() -> None:
    rows = np.random.default_rng(7).normal(size=(10, 8)) * 0.2
    model = _tiny_model(rows)
    split = _split(model, "coordinate", 2.0)
    ids = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    clean = _rows(model, ids)
    released, noise = split.release_rows(clean, mask, torch.Generator().manual_seed(8))
    assert torch.all(released[0, 3:] == 0) and torch.all(noise[0, 3:] == 0)
    assert torch.allclose(released[mask.bool()] - clean[mask.bool()], noise[mask.bool()], atol=1e-5)
    norms = released[mask.bool()].norm(dim=1)
    assert torch.all(norms <= split.clip * (1 + 1e-5)) and torch.all(norms > 0.99 * split.clip)
    unclipped = _split(model, "coordinate", 2.0, post_clip=False).release_rows(clean, mask, torch.Generator().manual_seed(8))[0]
    assert unclipped[mask.bool()].norm(dim=1).min() > 2 * split.clip


def test_server_pass_reads_only_the_real_rows() -> None:
    rows = np.random.default_rng(9).normal(size=(10, 8)) * 0.2
    model = _tiny_model(rows, layers=2)
    ids = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    x = model.embeddings.word_embeddings(ids).detach()
    junk = x.clone()
    junk[0, 3:] = 50.0
    assert torch.allclose(server_pass(model, x, mask), server_pass(model, junk, mask), atol=1e-6)
    with torch.no_grad():
        hidden = model(input_ids=ids[1:], attention_mask=mask[1:]).last_hidden_state.mean(dim=1)
    assert torch.allclose(server_pass(model, x[1:], mask[1:]), hidden, atol=1e-5)


def test_bad_options() -> None:
    model = _tiny_model(np.eye(3))
    with pytest.raises(ValueError, match="sampler"):
        _split(model, "gaussian", 1.0)
    with pytest.raises(ValueError, match="eta"):
        _split(model, "dchi", 0.0)
    with pytest.raises(ValueError, match="dimension"):
        coordinate_rows(3, 1, 1.0, torch.Generator())
