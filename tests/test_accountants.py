"""Accountants for the amplified model beside the worst-case ledger; calibration; the privacy command."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from dp_accounting.pld import privacy_loss_distribution
from scipy.stats import norm

from ldpfed.fed.privacy.accountants import (
    Schedule,
    _with_clt_gap,
    all_figures,
    amplified,
    clt,
    composition_baselines,
    enforced,
    prv,
    worst_case,
)
from ldpfed.fed.privacy.accountants.calibration import ACCOUNTANTS, calibrate_noise_multiplier
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, RandomizedResponseEvent
from ldpfed.simulations.cli import main
from ldpfed.simulations.commands.privacy import plot_schedule

DELTA = 1e-5
EXAMPLE = "privacy --mechanism gaussian --noise-multiplier 1.0 --p 0.01 --steps 1000 --delta 1e-5 --json".split()


def by_key(schedule: Schedule) -> dict[str, float | None]:
    return {f.key: f.epsilon for f in all_figures(schedule)}


def test_clt_matches_seed_equations_by_hand() -> None:
    z, p, t = 1.0, 0.01, 1000
    mu_tot = p * math.sqrt(t * (math.exp(1 / z**2) - 1))  # eq. 8
    assert clt.mu_total(z, p, t) == pytest.approx(mu_tot, rel=1e-12)
    eps = clt.epsilon(Schedule(z, p, t, DELTA))
    # eq. 5 at the reported epsilon gives back delta
    delta = norm.cdf(-eps / mu_tot + mu_tot / 2) - math.exp(eps) * norm.cdf(-eps / mu_tot - mu_tot / 2)
    assert delta == pytest.approx(DELTA, rel=1e-6)
    # eq. 9: only q*p matters
    assert clt.epsilon(Schedule(z, 0.02, t, DELTA, q=0.5)) == pytest.approx(eps, rel=1e-12)


def test_clt_gives_an_infinite_estimate_instead_of_overflowing_for_almost_no_noise() -> None:
    # a run at epsilon 1000 calibrates z of about 0.01: exp(1/z^2) is past the float range
    assert clt.mu_total(0.01, 0.5, 10) == math.inf and clt.epsilon(Schedule(0.01, 0.5, 10, DELTA)) == math.inf
    assert clt.mu_total(0.01, 0.0, 10) == 0.0
    assert clt.mu_total(0.0376, 0.5, 10) < math.inf
    # the composition baselines too: log(1 + r (e^eps - 1)) is computed without forming e^eps
    assert composition_baselines.basic_epsilon(Schedule(0.01, 0.5, 10, DELTA)) > 1000
    assert composition_baselines.advanced_epsilon(Schedule(0.01, 0.5, 10, DELTA)) == math.inf


def test_pld_matches_dp_accounting_built_directly() -> None:
    direct = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=1.5, sampling_prob=0.02, value_discretization_interval=1e-4
    ).self_compose(200)
    ours = amplified.pld_epsilon(Schedule(1.5, 0.02, 200, DELTA))
    assert ours == pytest.approx(direct.get_epsilon_for_delta(DELTA), rel=1e-9)
    # a GaussianEvent's own dp_accounting event gives the same noise multiplier (sigma / diameter)
    assert GaussianEvent(sensitivity=2.0, sigma=1.6).to_dp_event().noise_multiplier == pytest.approx(0.8)


@pytest.mark.parametrize(("z", "steps"), [(1.0, 10), (1.0, 1000), (2.0, 300)])
def test_rdp_is_a_looser_upper_bound_than_pld(z: float, steps: int) -> None:
    schedule = Schedule(z, 0.01, steps, DELTA)
    assert amplified.rdp_epsilon(schedule) >= amplified.pld_epsilon(schedule)


def test_basic_composition_exceeds_advanced_at_large_t() -> None:
    schedule = Schedule(5.0, 0.01, 10_000, DELTA)
    assert composition_baselines.basic_epsilon(schedule) > 5 * composition_baselines.advanced_epsilon(schedule)


def test_worst_case_ledger_exceeds_amplified_pld() -> None:
    schedule = Schedule(1.0, 0.01, 300, DELTA, releases=3)
    eps = by_key(schedule)
    k = worst_case.quantile_releases(schedule)
    assert eps["worst_case_quantile"] == compose_epsilon({GaussianEvent(1.0, 1.0): k}, DELTA)
    for key in ("worst_case_actual", "worst_case_quantile", "worst_case_all_steps"):
        assert eps[key] > eps["pld"]


def test_clt_understates_pld_by_about_11_percent_at_t_1000_and_80_percent_at_t_1() -> None:
    ratio = clt.epsilon(Schedule(1.0, 0.01, 1000, DELTA)) / amplified.pld_epsilon(Schedule(1.0, 0.01, 1000, DELTA))
    assert 0.86 < ratio < 0.91  # measured 0.885
    ratio_1 = clt.epsilon(Schedule(1.0, 0.01, 1, DELTA)) / amplified.pld_epsilon(Schedule(1.0, 0.01, 1, DELTA))
    assert ratio_1 < 0.25  # measured 0.18


def test_clt_is_not_one_sided() -> None:
    # small T, large epsilon: the CLT over-states the PLD upper bound (measured 13.0 vs 12.7);
    # a coarse PLD is more pessimistic, so this holds a fortiori at the default discretization
    schedule = Schedule(0.3948, 0.01, 100, DELTA)
    assert clt.epsilon(schedule) > amplified.pld_epsilon(schedule, value_discretization_interval=1e-3)


def test_clt_note_says_above_or_below_the_pld_bound() -> None:
    # issue 42 item 9c: a CLT figure above the bound read "-192.5% below the PLD upper bound"
    figure = clt.figure(Schedule(1.0, 0.01, 10, DELTA))
    pld = replace(figure, key="pld", epsilon=2.0)
    for epsilon, words in ((5.85, "here 192.5% above the PLD"), (1.5, "here 25.0% below the PLD")):
        assert words in _with_clt_gap(replace(figure, epsilon=epsilon), [pld]).note


def test_prv_brackets_pld() -> None:
    low, estimate, high = prv.epsilons(Schedule(1.0, 0.01, 300, DELTA))
    pld = amplified.pld_epsilon(Schedule(1.0, 0.01, 300, DELTA))
    assert low <= estimate <= high
    assert low - 1e-3 <= pld <= high + 1e-3


def test_prv_missing_is_reported_not_faked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prv_accountant", None)
    figures = prv.figures(Schedule(1.0, 0.01, 10, DELTA))
    assert [f.epsilon for f in figures] == [None, None, None]
    assert all("not installed" in (f.unavailable or "") for f in figures)


def test_fixed_size_sampling_uses_rdp_and_says_pld_is_unavailable() -> None:
    figures = {f.key: f for f in amplified.figures(Schedule(2.0, 0.01, 100, DELTA, dataset_size=1000))}
    assert figures["rdp_fixed_size"].parameters["sample_size"] == 10
    assert math.isfinite(figures["rdp_fixed_size"].epsilon)
    assert figures["pld_fixed_size"].epsilon is None and figures["pld_fixed_size"].unavailable


def test_poisson_sampling_a_release_matches_dp_accountings_sampled_gaussian() -> None:
    # the construction behind labelled steps, run on a Gaussian release alone
    release = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=0.7, value_discretization_interval=1e-4, use_connect_dots=False
    )
    ours = amplified.poisson_sampled(release, 0.5).self_compose(10)
    direct = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=0.7, sampling_prob=0.5, value_discretization_interval=1e-4
    ).self_compose(10)
    for epsilon in (0.0, 1.0, 5.0):
        theirs = direct.get_delta_for_epsilon(epsilon)
        assert theirs <= ours.get_delta_for_epsilon(epsilon) <= theirs * (1 + 1e-3)
    assert ours.get_epsilon_for_delta(DELTA) == pytest.approx(direct.get_epsilon_for_delta(DELTA), rel=1e-3)


def test_labelled_pld_lies_between_the_reports_alone_and_the_worst_case_ledger() -> None:
    reports = Schedule(1.0, 0.2, 4, DELTA)
    labels = RandomizedResponseEvent(1.0, 4)
    labelled = replace(reports, labels=labels)
    ledger = compose_epsilon({GaussianEvent(1.0, 1.0): 4, labels: 4}, DELTA)
    assert amplified.pld_epsilon(replace(labelled, p=1.0)) == pytest.approx(ledger, rel=1e-4)  # no sampling
    assert amplified.pld_epsilon(reports) < amplified.pld_epsilon(labelled) < ledger
    faint = replace(reports, labels=RandomizedResponseEvent(1e-6, 2))  # a label that tells nothing
    assert amplified.pld_epsilon(faint) == pytest.approx(amplified.pld_epsilon(reports), rel=1e-3)
    assert worst_case.epsilon_for_releases(1.0, 4, DELTA, labels) == ledger


def test_enforced_groups_compose_as_dp_accountings_pld_accountant() -> None:
    groups = ((0.25, 1.5, 2), (1.0, 4.0, 1))
    accountant = amplified.pld_accountant()
    for rate, z, steps in groups:
        accountant.compose(amplified.poisson_event(Schedule(z, rate, steps, DELTA)))
    assert enforced.pld_epsilon(groups, DELTA) == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-9)


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_calibration_round_trip(accountant: str) -> None:
    result = calibrate_noise_multiplier(accountant, 2.0, DELTA, 50, 0.1)
    schedule = Schedule(result.noise_multiplier, 0.1, 50, DELTA)
    recompute = {
        "worst-case": lambda s: worst_case.epsilon_for_releases(s.noise_multiplier, result.releases, DELTA),
        "clt": clt.epsilon,
        "pld": amplified.pld_epsilon,
        "rdp": amplified.rdp_epsilon,
    }[accountant]
    assert recompute(schedule) == result.epsilon <= 2.0
    assert result.epsilon > 2.0 * (1 - 1e-3)
    less_noise = Schedule(result.noise_multiplier * 0.999, 0.1, 50, DELTA)
    assert recompute(less_noise) > 2.0


def test_cli_example_prints_every_accountant_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(EXAMPLE) == 0
    output = json.loads(capsys.readouterr().out)
    figures = {f["key"]: f for f in output["figures"]}
    expected = {
        "worst_case_quantile", "worst_case_all_steps", "clt", "pld", "rdp",
        "prv_lower", "prv_estimate", "prv_upper", "advanced_composition", "basic_composition",
    }  # fmt: skip
    assert expected <= set(figures)
    for f in figures.values():
        assert {"name", "version", "parameters", "kind", "epsilon", "delta", "assumption"} <= set(f)
        assert (f["epsilon"] is None) == bool(f["unavailable"])
    for key in (
        "worst_case_quantile",
        "worst_case_all_steps",
        "clt",
        "pld",
        "rdp",
        "prv_upper",
        "advanced_composition",
    ):
        assert figures[key]["epsilon"] > 0
    assert figures["clt"]["kind"] == "estimate" and "not a bound" in figures["clt"]["note"]
    assert figures["pld"]["kind"] == "upper bound" and "cannot link" in figures["pld"]["assumption"]
    # issue 42 item 9b: the names the run's privacy report gives them, not "enforced" twice
    assert figures["worst_case_quantile"]["kind"] == "estimate"
    assert figures["worst_case_all_steps"]["kind"] == "upper bound"


def test_cli_sigma_and_sensitivity_match_noise_multiplier(capsys: pytest.CaptureFixture[str]) -> None:
    main("privacy --sigma 3.0 --sensitivity 2.0 --p 0.05 --steps 20 --json".split())
    with_sigma = json.loads(capsys.readouterr().out)["figures"]
    main("privacy --noise-multiplier 1.5 --p 0.05 --steps 20 --json".split())
    with_z = json.loads(capsys.readouterr().out)["figures"]
    assert [f["epsilon"] for f in with_sigma] == [f["epsilon"] for f in with_z]


def test_cli_calibrate_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main("privacy --calibrate 1 --p 0.05 --steps 50 --sensitivity 2 --json".split())
    calibration = json.loads(capsys.readouterr().out)["calibration"]
    assert [c["accountant"] for c in calibration] == list(ACCOUNTANTS)
    assert all(c["epsilon"] <= 1 and c["sigma"] == 2 * c["noise_multiplier"] for c in calibration)
    path = plot_schedule(Schedule(2.0, 0.05, 50, DELTA), tmp_path / "eps.png", points=4)
    assert path.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--p -0.1", "p must be"),
        ("--p 1.5", "p must be"),
        ("--p nan", "p must be"),
        ("--p 0.01 --delta nan", "delta must be"),
        ("--p 0.01 --q 0", "q must be"),
        ("--p 0.01 --calibrate nan", "epsilon must be"),
    ],
)
def test_cli_bad_input_exits_2(flags: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(f"privacy --noise-multiplier 1 --steps 10 {flags}".split())
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_noise_multiplier_nan_and_missing_noise_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ("privacy --noise-multiplier nan --p 0.1 --steps 10", "privacy --p 0.1 --steps 10"):
        with pytest.raises(SystemExit) as exit_info:
            main(argv.split())
        assert exit_info.value.code == 2
    assert "noise_multiplier must be" in capsys.readouterr().err


def test_cli_human_output_labels_clt_as_an_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["privacy", "--noise-multiplier", "2", "--p", "0.05", "--steps", "20"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "GDP + CLT" in out and "estimate" in out and "upper bound" in out and "unlinkable" in out
    assert "enforced" not in out  # nothing is enforced without a run's actual release count
