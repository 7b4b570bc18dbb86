"""Costs just above and just below a limit, and figures remembered under one set of parameters but asked
under another (issue 39, item 12).

Each test probes a limit from both sides, by an amount far smaller than a plausible slip of the code (a
slack of 1%, a check left out, a memo or stored figure keyed without one of its parameters), and where it
can checks the figure against an independent computation: the closed-form Gaussian-DP curve solved here
with SciPy, or dp_accounting's own PLD accountant.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import dp_accounting
import numpy as np
import pytest
from scipy import optimize
from scipy.stats import norm

from ldpfed.fed.device.policy import DevicePolicy
from ldpfed.fed.learning.classifier import LinearModel
from ldpfed.fed.privacy import composition, figure_cache
from ldpfed.fed.privacy.accountants import enforced
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent, RandomizedResponseEvent
from ldpfed.fed.privacy.figure_cache import FIGURES_FILE
from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.sampling import UpSampling
from ldpfed.fed.privacy.store import LedgerStore
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.runtime.node import NodeHost
from ldpfed.fed.runtime.requests import ClientLimits, ReleaseRequest, RequestRefused, parse_release_request
from ldpfed.fed.runtime.user import BudgetExhausted, QueriesDone, User, UserRecords
from ldpfed.fed.configuration.plan import PrivacyPlan

DELTA = 1e-5
CLIP = 1.0
SIGMA = 3.0
EVENT = GaussianEvent(2 * CLIP, SIGMA)
KEY = bytes(range(32))
EDGE = 1e-4
"""How far past (or short of) a limit a probe goes, relative: far below any slack a slip could add."""


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at ``delta`` of mu-GDP, from its closed form (Dong, Roth and Su, Corollary 2.13), solved here."""

    def excess(epsilon: float) -> float:
        return norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2) - delta

    return float(optimize.brentq(excess, 0.0, 200.0, xtol=1e-14, rtol=1e-14))


def gaussian_epsilon(releases: int, sigma: float = SIGMA, sensitivity: float = 2 * CLIP, delta: float = DELTA) -> float:
    """Independent epsilon of ``releases`` Gaussian releases: mu = sqrt(n) * sensitivity / sigma."""
    return gdp_epsilon(math.sqrt(releases) * sensitivity / sigma, delta)


@pytest.fixture()
def no_store() -> Iterator[None]:
    """No figure store and no figure in this process's caches, before or after the test."""
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    yield
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()


def _new_process_on_a_device(path: Path) -> None:
    """What a device's next message starts from: a store in its state folder, nothing in memory."""
    figure_cache.stop_store()
    composition._compose_cached.cache_clear()
    figure_cache.use_store(path, KEY)


# -- the noise floor of one release (fed/runtime/requests.py) ----------------------------------------------
def _request(floor: float) -> ReleaseRequest:
    raw = {"users": [0], "randomizer": json.dumps({"mechanism": "gaussian", "clip": CLIP, "sigma": SIGMA}), "records": 0}
    return parse_release_request(raw, ClientLimits(floor, DELTA))


def test_a_release_costing_just_above_the_noise_floor_is_refused() -> None:
    cost = gaussian_epsilon(1)
    assert compose_epsilon({EVENT: 1}, DELTA) == pytest.approx(cost, rel=1e-9)  # the ledger's figure, checked
    assert _request(cost * (1 + EDGE)).randomizer.event == EVENT  # just below the floor: served
    with pytest.raises(RequestRefused, match="noise too low"):
        _request(cost * (1 - EDGE))  # just above: refused


# -- the user-level budget of a training release (fed/privacy/cohort_ledger.py) ---------------------------
def _train_user(epsilon_user: float, train: int = 6) -> User:
    rng = np.random.default_rng(0)
    records = UserRecords(rng.normal(size=(train, 4)), rng.integers(0, 2, train), rng.normal(size=(2, 4)), np.array([0, 1]))
    return User(0, records, Budget(1e6, DELTA, epsilon_user), PublicLabels(2), seed=1)


def test_a_training_release_costing_just_above_the_user_budget_is_refused_and_just_below_served() -> None:
    n = 6
    true = gaussian_epsilon(n)  # one Gaussian report per record at user level
    request = ReleaseRequest((0,), GaussianRandomizer(CLIP, SIGMA), 0)
    above = _train_user(true * (1 - EDGE), n)
    with pytest.raises(BudgetExhausted):
        above.release("train", request)
    assert above.state.ledger.releases() == 0 and above.state.ledger.user_epsilon() == 0
    below = _train_user(true * (1 + EDGE), n)
    assert len(below.release("train", request).reports) == n
    assert below.state.ledger.user_epsilon() == pytest.approx(true, rel=1e-9)


# -- the user-level budget of a query step (fed/runtime/user.py) ------------------------------------------
QUERIES = 12


def _query_user(epsilon_user: float) -> User:
    rng = np.random.default_rng(2)
    query = rng.normal(size=(QUERIES, 4)) * 3
    records = UserRecords(rng.normal(size=(5, 4)), rng.integers(0, 2, 5), query, rng.integers(0, 2, QUERIES))
    return User(1, records, Budget(1e6, DELTA, epsilon_user), PublicLabels(2), seed=4)


def _query_steps(user: User, up: UpSampling) -> tuple[int, BaseException]:
    """Serve query steps (each answered) until the user stops; (steps served, why it stopped)."""
    raw = {"users": [1], "randomizer": json.dumps({"mechanism": "gaussian", "clip": CLIP, "sigma": SIGMA}), "records": 0, "sampling": up.spec}
    request = parse_release_request(raw, ClientLimits(compose_epsilon({EVENT: 1}, DELTA), DELTA, sampling=up.spec))
    for steps in range(10):
        try:
            release = user.release("query", request)
        except (BudgetExhausted, QueriesDone) as stop:
            return steps, stop
        scores = np.zeros((len(release.slots), 2))
        user.take_answers(release.slots, scores, up.k)
    raise AssertionError("the user never stopped")


@pytest.mark.parametrize("side", ["just-above", "just-below"])
def test_a_query_step_past_the_user_budget_is_refused(side: str) -> None:
    """q = p = 1: each step releases all 12 true queries, no fictitious one. Three steps are asked (k = 3); the
    user budget allows 24 releases (just below: two steps), or falls just short of them (one step)."""
    up = UpSampling(1.0, 1.0, 3)
    two_steps = gaussian_epsilon(2 * QUERIES)
    budget = two_steps * (1 + EDGE) if side == "just-below" else two_steps * (1 - EDGE)
    user = _query_user(budget)
    steps, stop = _query_steps(user, up)
    assert isinstance(stop, BudgetExhausted), f"served {steps} steps, then: {stop!r}"
    assert steps == (2 if side == "just-below" else 1)
    ledger = user.state.ledger
    assert ledger.user_epsilon() == pytest.approx(gaussian_epsilon(steps * QUERIES), rel=1e-9)
    assert ledger.user_epsilon() <= budget


# -- device evaluation at user level (fed/runtime/node.py) ------------------------------------------------
EVAL_QUERIES = 6
BIT = RandomizedResponseEvent(1.0, 2)


def _evaluating_device(folder: Path, epsilon_user: float) -> NodeHost:
    """A device hosting one user with 6 queries; the owner lets outcomes leave through rr:1.0 under a user budget."""
    rng = np.random.default_rng(3)
    records = UserRecords(rng.normal(size=(4, 4)), rng.integers(0, 2, 4), rng.normal(size=(EVAL_QUERIES, 4)), rng.integers(0, 2, EVAL_QUERIES))
    randomizer = GaussianRandomizer(CLIP, 5.0)
    plan = PrivacyPlan(randomizer, randomizer, PublicLabels(2), Budget(math.inf, DELTA))
    policy = DevicePolicy(
        math.inf, epsilon_user, DELTA, mechanisms=("gaussian",), labels="rr:1.0", evaluation="rr:1.0", memoize=False, max_events=8
    )
    store = LedgerStore(folder / "ledgers.sqlite", durable=False)
    return NodeHost({0: records}, plan, policy, store, lambda uid: f"user-{uid}", seed=None, simulation=False)


@pytest.mark.parametrize("side", ["just-above", "just-below"])
def test_device_evaluation_charges_the_user_account_one_bit_per_query_and_model(tmp_path: Path, side: str) -> None:
    """Three models, 6 queries: each model's outcome is 6 randomized bits. A user budget of exactly 12 bits
    serves two models; one a hair smaller serves one. Nothing leaves past the budget."""
    models = {f"m{i}": LinearModel(np.random.default_rng(i).normal(size=(4, 2)), np.zeros(2)) for i in range(3)}
    twelve = compose_epsilon({BIT: 2 * EVAL_QUERIES}, DELTA)
    budget = twelve if side == "just-below" else twelve * (1 - EDGE)
    host = _evaluating_device(tmp_path, budget)
    outcomes = host.evaluate(models)
    released = sum(outcomes.total.values())
    assert released == (2 if side == "just-below" else 1) * EVAL_QUERIES
    ledger = host.full_ledgers()[0]
    assert ledger.user_reports() == {BIT: released}  # one user-level charge per bit that left
    assert ledger.user_epsilon() == compose_epsilon({BIT: released}, DELTA) <= budget


# -- the amplified budget check's memo (fed/privacy/accountants/enforced.py) ------------------------------
def test_the_amplified_check_answers_each_budget_for_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """rate 0.5, z 4: 3 steps cost 0.90, 4 steps 1.04. Under budget 1.0, 4 steps are refused and 3 served,
    whatever another budget (8) was asked for the same (rate, z, delta) before."""
    monkeypatch.setattr(enforced, "_KNOWN", {})
    rate, z, budget = 0.5, 4.0, 1.0

    def steps(t: int) -> tuple[enforced.Entry, ...]:
        return ((rate, z, t),)

    # dp_accounting's own PLD accountant, independently of the enforced module (its grid differs a little)
    for t, side in ((3, -1), (4, 1)):
        accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        accountant.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z)), t)
        independent = accountant.get_epsilon(DELTA)
        assert (independent - budget) * side > 0.02, (t, independent)
        assert enforced.pld_epsilon(steps(t), DELTA) == pytest.approx(independent, abs=0.01)
    assert enforced.within_budget(steps(12), DELTA, 8.0)  # another budget first: its answer is remembered
    assert not enforced.within_budget(steps(4), DELTA, budget)
    assert enforced.within_budget(steps(3), DELTA, budget)
    assert enforced.within_budget(steps(12), DELTA, 8.0) and not enforced.within_budget(steps(5), DELTA, budget)


# -- stored figures (fed/privacy/composition.py, fed/privacy/calibration.py) ------------------------------
def test_a_stored_composition_figure_is_the_figure_at_its_own_delta(tmp_path: Path, no_store: None) -> None:
    """A device that composed a ledger at the run config's delta (1e-2) must not read that figure back at its
    policy's delta (1e-5): each delta's figure is the closed form's at that delta."""
    counts = {EVENT: 8}
    path = tmp_path / FIGURES_FILE
    _new_process_on_a_device(path)
    loose = compose_epsilon(counts, 1e-2)
    _new_process_on_a_device(path)
    strict = compose_epsilon(counts, DELTA)
    assert loose == pytest.approx(gaussian_epsilon(8, delta=1e-2), rel=1e-9)
    assert strict == pytest.approx(gaussian_epsilon(8, delta=DELTA), rel=1e-9)
    assert strict > 1.5 * loose


def test_a_stored_calibrated_sigma_is_the_sigma_for_its_own_counts(tmp_path: Path, no_store: None) -> None:
    """The same target and the same other event, once once and then three times: the second sigma must meet the
    target with three (independent GDP check), not be the first one read back."""
    epsilon, releases, sensitivity = 3.0, 3, 2.0
    other = GaussianEvent(2.0, 6.0)
    path = tmp_path / FIGURES_FILE
    sigmas = {}
    for n in (1, 3):
        _new_process_on_a_device(path)
        sigmas[n] = calibrate_gaussian_sigma(epsilon, DELTA, releases, sensitivity, {other: n})
    for n, sigma in sigmas.items():
        mu = math.sqrt(releases * (sensitivity / sigma) ** 2 + n * other.mu**2)
        assert gdp_epsilon(mu, DELTA) <= epsilon * (1 + 1e-9), (n, sigma)
        assert gdp_epsilon(mu, DELTA) == pytest.approx(epsilon, rel=1e-6)  # and no more noise than needed
    assert sigmas[3] > sigmas[1]
