"""ldpfed reproduce: discovery, resumable cells, and the accounting each reproduction puts beside the paper."""

from __future__ import annotations

import math

import pytest

from ldpfed.simulations import reproductions
from ldpfed.simulations.cli import main
from ldpfed.simulations.reproductions._cells import Results, fmt_spread, run_cells


def test_list_names_every_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in ("seed000_tables", "seed002_dpie", "seed004_bits"):
        assert name in reproductions.names()
        assert name in listed
        assert reproductions.description(reproductions.load(name))


def test_unknown_reproduction_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["reproduce", "seed999"])
    assert exit_info.value.code == 2
    assert "no reproduction named 'seed999'" in capsys.readouterr().err


def test_finished_cells_are_skipped_and_kept(tmp_path) -> None:  # noqa: ANN001
    calls: list[tuple[str, int]] = []

    def compute(setting: dict, seed: int) -> dict:
        calls.append((setting["row"], seed))
        return {"accuracy": 0.5 + seed / 10}

    cells = [({"row": r}, seed) for r in ("a", "b") for seed in range(2)]
    results = Results(tmp_path, {"data": "x"})
    run_cells(results, cells[:3], compute, "test")
    assert len(calls) == 3
    resumed = Results(tmp_path, {"data": "x"})
    run_cells(resumed, cells, compute, "test")
    assert calls[3:] == [("b", 1)]
    assert resumed.values({"row": "a"}, "accuracy") == [0.5, 0.6]
    assert fmt_spread(resumed.values({"row": "a"}, "accuracy")) == "55.00 [50.00, 60.00] (n=2)"


def test_cells_of_another_setup_are_refused(tmp_path) -> None:  # noqa: ANN001
    Results(tmp_path, {"data": "x"}).put({"row": "a"}, 0, {"accuracy": 1.0})
    with pytest.raises(ValueError, match="another setup .*data"):
        Results(tmp_path, {"data": "y"})
    assert Results(tmp_path, {"data": "y"}, fresh=True).cells == {}


def test_seed004_paper_accounting_states_its_true_cost() -> None:
    import numpy as np

    from ldpfed.simulations.reproductions.seed004_bits import build

    mean, std = np.zeros(8), np.ones(8)
    # The paper's Delta f = 2r gives SUE a per-bit budget l/2 = 5 times the strict one.
    paper = build("sue", "paper", 1.0, None, 8, mean, std)
    strict = build("sue", "strict", 1.0, None, 8, mean, std)
    assert paper.true_epsilon == pytest.approx(5.0)
    assert strict.true_epsilon <= 1.0 + 1e-9
    assert build("ome", "paper", 1.0, 100.0, 8, mean, std).true_epsilon > 100
    with pytest.raises(ValueError, match="cannot meet epsilon 1"):
        build("ome", "strict", 1.0, 100.0, 8, mean, std)


def test_seed002_paper_laplace_costs_sqrt_d_times_k_more() -> None:
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.simulations.reproductions.seed002_dpie import DELTA, K, build

    dim = 384
    paper = build("dpie-laplace", "paper", 1.0, dim)
    assert compose_epsilon({paper.event: 1}, DELTA) == pytest.approx(K * math.sqrt(dim), rel=1e-3)
    strict = build("dpie-laplace", "strict", 1.0, dim)
    assert compose_epsilon({strict.event: 1}, DELTA) <= 1.0 + 1e-6
    gaussian = build("dpie-gaussian", "strict", 1.0, dim)
    assert compose_epsilon({gaussian.event: 1}, DELTA) <= 1.0 + 1e-6


def test_seed000_learners_take_batches_as_one_release() -> None:
    """The LDA fed batch by batch (no rows kept) fits as the LDA fed all the batches' rows at once."""
    import numpy as np

    from ldpfed.fed.learning.classifier import NoiseAwareLDA, class_means, within_class_covariance
    from ldpfed.fed.randomizers.gaussian import clip_l2
    from ldpfed.simulations.reproductions.seed000_tables import Learners

    rng = np.random.default_rng(0)
    own, y_own = rng.normal(size=(60, 4)), rng.integers(0, 2, 60)
    batches = [(rng.normal(size=(30, 4)) + 0.5, rng.integers(0, 2, 30)) for _ in range(5)]
    learners = Learners(4, own, y_own, 0.5, seed=0)
    for rows, labels in batches:
        learners.add_batch(rows, labels, 0.3)
    x_test = rng.normal(size=(200, 4))
    learners.accuracies(x_test, rng.integers(0, 2, 200))
    clipped = clip_l2(own, 0.5)
    once = NoiseAwareLDA(4, 2, -1.0, within_class_covariance(clipped, y_own, 2), class_means(clipped, y_own, 2), "auto")
    once.update(np.concatenate([r for r, _ in batches]), np.concatenate([y for _, y in batches]), 0.3)
    x = clip_l2(x_test, 0.5)
    assert len(learners.lda.groups) == 1
    np.testing.assert_allclose(learners.lda.fit().scores(x), once.fit().scores(x), rtol=1e-9, atol=1e-9)


def test_snd_report_sets_the_seeds_schedule_beside_a_longer_one(tmp_path) -> None:  # noqa: ANN001
    """The seed 003 report shows each run's denoiser steps and adds the longer-training section only when given."""
    import json
    from pathlib import Path

    from ldpfed.simulations.reproductions._seed003_snd_report import write_report
    from ldpfed.simulations.reproductions.seed003_snd import REPORT_DIR, main as snd_main

    main_run, longer = REPORT_DIR / "full" / "results.json", REPORT_DIR / "full_epochs16" / "results.json"
    steps = {json.loads(p.read_text())["denoisers"]["coordinate-50,100/with_output"]["steps"] for p in (main_run, longer)}
    assert len(steps) == 2  # the two runs differ in training length
    text = write_report(main_run, tmp_path, longer).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| authors' per-coordinate | 50 | ")]
    assert any(f"| {min(steps)} / {min(steps)} |" in row for row in rows)
    assert any(f"| {max(steps)} / {max(steps)} |" in row for row in rows)
    without = write_report(main_run, tmp_path / "alone", tmp_path / "missing.json").read_text()
    assert "Denoiser training length" in text and "Denoiser training length" not in without
    with pytest.raises(ValueError, match="names none of the setting's groups"):
        snd_main(["run", "--setting", "reduced", "--groups", "nope", "--model", str(Path(tmp_path)), "--out", str(tmp_path)])


@pytest.mark.parametrize("sampler", ["dchi", "coordinate"])
def test_snd_strict_eta_is_the_largest_the_strict_ledger_allows(sampler: str) -> None:
    """The strict rows' eta: a record of the longest pair's tokens costs at most the budget, and 1% more eta exceeds it."""
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.privacy.events import CoordinateMetricDPEvent, MetricDPEvent
    from ldpfed.simulations.reproductions._seed003_strict import round_down, strict_eta

    kind, diameter, tokens = (MetricDPEvent, 3.39, 194) if sampler == "dchi" else (CoordinateMetricDPEvent, 52.2, 194)
    eta = round_down(strict_eta(10.0, tokens, diameter, sampler))
    assert compose_epsilon({kind(eta, diameter, tokens): 1}, 1e-5) <= 10.0
    assert compose_epsilon({kind(eta * 1.01, diameter, tokens): 1}, 1e-5) > 10.0
    assert eta > 10.0 / (tokens * diameter)  # composition over the tokens allows more than eta x tokens x diameter = 10


def test_snd_report_adds_the_strict_rows_only_when_run(tmp_path) -> None:  # noqa: ANN001
    """The strict section renders each sampler's eta, its composed per-record epsilon and every method's row."""
    import json

    from ldpfed.simulations.reproductions._seed003_snd_report import write_report
    from ldpfed.simulations.reproductions.seed003_snd import REPORT_DIR

    main_run = REPORT_DIR / "full" / "results.json"
    strict = json.loads(main_run.read_text())
    strict["config"]["strict_epsilon"] = 10.0
    strict["units"] = {k: {**u, "eta": 0.00277 if u["sampler"] == "coordinate" else 0.0427}
                       for k, u in strict["units"].items() if u["eta"] in (50.0,)}
    path = tmp_path / "strict.json"
    path.write_text(json.dumps(strict))
    text = write_report(main_run, tmp_path / "with", None, path).read_text()
    section = text.split("under ldpfed's strict accounting (per-record epsilon 10)")[1]
    assert "| authors' per-coordinate | 0.00277 | QQP | auc |" in section and "| text's d_chi | 0.0427 | RTE | accuracy |" in section
    assert "strict accounting (per-record epsilon 10)" not in write_report(main_run, tmp_path / "without", None, tmp_path / "no.json").read_text()
