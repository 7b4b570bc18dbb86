"""The one root solver (fed.privacy.solver) and the calibrations behind it: never on the wrong side of a target.

A calibrated noise must never be less than the target needs (the solver keeps the private side of
its bracket and checks its answer), and no more than the solve's tolerance above it.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from ldpfed.fed.privacy import gdp
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma, calibrate_parameter
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, LaplaceEvent, RandomizedResponseEvent
from ldpfed.fed.privacy.figure_cache import ACCOUNTING_SOURCES
from ldpfed.fed.privacy.shuffle import TOLERANCE, shuffled_delta, shuffled_epsilon
from ldpfed.fed.privacy.solver import least_integer, within
from ldpfed.fed.privacy.validators import check_delta, check_int
from ldpfed.fed.randomizers.gaussian_variants import analytic_sigma

DELTA = 1e-5


def _boundary(inside, lo: float, hi: float) -> float:
    """The edge of {inside} between lo (one side) and hi (the other), by 200 float bisections (reference)."""
    inside_lo = inside(lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        if inside(mid) == inside_lo:
            lo = mid
        else:
            hi = mid
    return lo if inside_lo else hi


@pytest.mark.parametrize("increasing", [True, False])
def test_within_answers_inside_the_budget_even_for_a_step_cost(increasing: bool) -> None:
    """A cost in steps (as a PLD's epsilon is) makes Brent's root land on either side; the answer is always inside."""
    rng = np.random.default_rng(0)
    for _ in range(60):
        grid, scale = rng.uniform(1e-4, 1e-2), rng.uniform(0.5, 5.0)
        if increasing:
            cost = lambda x, g=grid, s=scale: math.ceil(s * x / g) * g  # noqa: E731
        else:
            cost = lambda x, g=grid, s=scale: math.ceil(s / x / g) * g  # noqa: E731
        budget = rng.uniform(0.3, 3.0)
        x = within(cost, budget, rng.uniform(0.1, 10.0), increasing=increasing, rel_tol=1e-6)
        assert cost(x) <= budget
        edge = _boundary(lambda v: cost(v) <= budget, 1e-9 if increasing else 1e9, 1e9 if increasing else 1e-9)
        assert abs(x - edge) <= 4e-6 * edge, (x, edge)


def test_within_with_a_floor_and_at_the_ends() -> None:
    # smooth, decreasing from a known outside floor: sqrt-shaped, as delta(epsilon) of a GDP mechanism
    x = within(lambda e: math.exp(-e), 1e-3, 1.0, increasing=False, floor=0.0, xtol=1e-12, rel_tol=1e-15)
    assert math.exp(-x) <= 1e-3 and x == pytest.approx(-math.log(1e-3), rel=1e-12)
    # within budget at the floor of a decreasing cost: the floor itself
    assert within(lambda s: 1 / (1 + s), 2.0, 1.0, increasing=False, floor=0.0) == 0.0
    # every x within budget (effectively free), and a target no x meets
    assert within(lambda x: 0.0, 1.0, 1.0, increasing=True) > 1e14
    with pytest.raises(ValueError, match="cannot be met"):
        within(lambda s: 5.0, 1.0, 1.0, increasing=False, name="sigma")


def test_least_integer_matches_a_scan() -> None:
    for edge in (1, 2, 3, 17, 64, 1000, 12345):
        assert least_integer(lambda n, e=edge: n >= e, 0, 1, grow=True) == edge
        assert least_integer(lambda n, e=edge: n >= e, edge - 1, 2 * edge + 5) == edge


@pytest.mark.parametrize(
    "epsilon,releases,labels", [(3.0, 1, False), (8.0, 2, False), (3.0, 1, True), (6.0, 3, True), (8.0, 2, True)]
)
def test_gaussian_calibration_is_private_and_no_noisier_than_its_tolerance(epsilon: float, releases: int, labels: bool) -> None:
    other = {RandomizedResponseEvent(1.0, 2): releases} if labels else {}
    sigma = calibrate_gaussian_sigma(epsilon, DELTA, releases, 2.0, other)

    def cost(s: float) -> float:
        return compose_epsilon({**other, GaussianEvent(2.0, s): releases}, DELTA)

    assert cost(sigma) <= epsilon
    # a sigma smaller by the old tolerance (bisection to 1e-6) already costs more than the target
    assert cost(sigma * (1 - 2e-6)) > epsilon


def test_privacy_parameter_calibration_is_private_and_tight() -> None:
    other = {RandomizedResponseEvent(1.0, 2): 2}
    for epsilon, extra in ((0.5, {}), (3.0, {}), (3.0, other)):
        inverse = calibrate_parameter(lambda x: LaplaceEvent(2.0, 1 / x), epsilon, DELTA, 2, extra, 0.1)

        def cost(x: float, extra=extra) -> float:
            return compose_epsilon({**extra, LaplaceEvent(2.0, 1 / x): 2}, DELTA)

        assert cost(inverse) <= epsilon
        assert cost(inverse * (1 + 2e-6)) > epsilon


def test_gdp_conversions_round_toward_privacy() -> None:
    for epsilon in (0.1, 0.5, 1.0, 3.0, 8.0, 30.0):
        mu = gdp.mu_for_epsilon(epsilon, DELTA)
        assert gdp.delta_for_epsilon(mu, epsilon) <= DELTA  # a mu no larger than the exact one
        assert gdp.delta_for_epsilon(mu * (1 + 1e-12), epsilon) > DELTA
    for mu in (0.05, 0.5, 1.0, 3.0, 10.0):
        epsilon = gdp.epsilon_for_delta(mu, DELTA)
        assert gdp.delta_for_epsilon(mu, epsilon) <= DELTA  # an epsilon no smaller than the exact one
        assert gdp.delta_for_epsilon(mu, epsilon * (1 - 1e-11)) > DELTA


@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-5), (1.0, 1e-5), (1.0, 0.3), (3.0, 0.3), (8.0, 1e-5)])
def test_analytic_gaussian_sigma_is_never_below_the_least_private_sigma(epsilon: float, delta: float) -> None:
    """Balle and Wang's exact delta of a Gaussian (their Theorem 8) at the returned sigma is within delta."""
    from scipy.stats import norm

    sigma = analytic_sigma(epsilon, delta, 2.0)

    def exact_delta(s: float) -> float:
        a = 2.0 / (2 * s)
        b = epsilon * s / 2.0
        return norm.cdf(a - b) - math.exp(epsilon) * norm.cdf(-a - b)

    assert exact_delta(sigma) <= delta * (1 + 1e-9)
    assert exact_delta(sigma * (1 - 1e-9)) > delta * (1 - 1e-9) or exact_delta(sigma * (1 - 1e-6)) > delta


@pytest.mark.parametrize(
    "n,eps0,delta", [(1, 3.0, 1e-6), (10, 0.5, 1e-3), (240, 2.0, 1e-5), (240, 4.0, 1e-8), (5000, 1.0, 1e-6), (5000, 8.0, 1e-5 / 3)]
)
def test_shuffled_epsilon_is_private_and_tight(n: int, eps0: float, delta: float) -> None:
    """The shuffle bound's inversion: its epsilon's delta is within the target, and a little less epsilon is not."""
    epsilon = shuffled_epsilon(n, eps0, delta)
    assert 0 < epsilon < eps0 and shuffled_delta(n, eps0, epsilon) <= delta
    assert shuffled_delta(n, eps0, epsilon - 4 * TOLERANCE * eps0) > delta


def test_validators_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got 1.5"):
        check_delta(1.5)
    with pytest.raises(ValueError, match=r"--x must be in \(0, 1\)"):
        check_delta("nan", name="--x")
    for bad in (True, 2.5, "3", math.nan, 0):
        with pytest.raises(ValueError, match="releases must be an integer >= 1"):
            check_int("releases", bad)
    assert check_int("k", 3.0) == 3 and check_int("bits", np.int64(0), 0) == 0


def test_accounting_sources_cover_every_privacy_module_a_cached_figure_runs() -> None:
    """ldpfed.fed.privacy.figure_cache keys cached figures by the source of the modules that compute them: every
    fed.privacy module those modules import (transitively) must be among them, or changed code reads old figures."""
    folder = Path(__file__).resolve().parents[1] / "fed" / "privacy"
    todo, seen = ["calibration.py", "composition.py", "gdp.py"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((folder / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ldpfed.fed.privacy"):
                parts = node.module.split(".")[2:]
                names = parts[:1] or [alias.name for alias in node.names]
                todo.extend(f"{n}.py" for n in names if (folder / f"{n}.py").exists())
    assert seen <= set(ACCOUNTING_SOURCES), sorted(seen - set(ACCOUNTING_SOURCES))
