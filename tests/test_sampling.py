"""Training sampling (seed 000 Alg. 2): Poisson and fixed-size, the ledger and its step log,
amplified enforcement, run options and calibration per accountant."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.plan import make_plan
from ldpfed.fed.privacy.accountants import amplified, clt, enforced, worst_case
from ldpfed.fed.privacy.accountants.base import Schedule
from ldpfed.fed.privacy.accountants.calibration import ACCOUNTANTS, calibrate_noise_multiplier
from ldpfed.fed.privacy.composition import compose_epsilon
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.runtime.requests import ClientLimits, RequestRefused, parse_release_request
from ldpfed.fed.privacy.sampling import TrainSampling, UpSampling
from ldpfed.fed.runtime.user import BudgetExhausted, User, UserRecords

DELTA = 1e-5
CLIP = 1.0


def _user(n_train: int, epsilon: float = 1e6, enforce: str = "worst-case", seed: int = 3) -> User:
    rng = np.random.default_rng(seed)
    records = UserRecords(rng.normal(size=(n_train, 4)), rng.integers(0, 2, n_train), rng.normal(size=(3, 4)), np.zeros(3, int))
    return User(5, records, Budget(epsilon, DELTA), PublicLabels(2), seed=seed, enforce=enforce)


def _request(sigma: float, sampling: str, records: int = 0) -> dict:
    return {
        "users": [5],
        "randomizer": json.dumps({"mechanism": "gaussian", "clip": CLIP, "sigma": sigma}),
        "records": records,
        "sampling": sampling,
    }


def _limits(sigma: float, sampling: str) -> ClientLimits:
    return ClientLimits(compose_epsilon({GaussianEvent(2 * CLIP, sigma): 1}, DELTA), DELTA, sampling=sampling)


def _parse(sigma: float, sampling: str, records: int = 0):
    return parse_release_request(_request(sigma, sampling, records), _limits(sigma, sampling))


def test_poisson_sampling_rate_is_statistically_right() -> None:
    p, n, steps = 0.2, 500, 8
    user = _user(n)
    request = _parse(5.0, f"poisson:{p!r}")
    sizes = [len(user.release("train", request).reports) for _ in range(steps)]
    counts = user.state.ledger.counts[0, :n]
    # each step is Binomial(n, p); all steps together are Binomial(n * steps, p)
    assert binomtest(int(sum(sizes)), n * steps, p).pvalue > 1e-4
    # each record is released Binomial(steps, p) times, independently of the others
    observed = np.bincount(counts, minlength=steps + 1)
    expected = n * binom.pmf(np.arange(steps + 1), steps, p)
    top = 4  # pool the tail so every cell expects at least a few records
    chi2 = sum((observed[k] - expected[k]) ** 2 / expected[k] for k in range(top))
    chi2 += (observed[top:].sum() - expected[top:].sum()) ** 2 / expected[top:].sum()
    assert chi2 < 25  # about p = 5e-5 at 4 degrees of freedom


def test_fixed_size_sampling_releases_exactly_m_distinct_records() -> None:
    user = _user(40)
    request = _parse(5.0, "fixed:7")
    release = user.release("train", request)
    assert len(release.reports) == 7
    assert user.state.ledger.counts.sum() == 7 and user.state.ledger.counts.max() == 1


def test_ledger_counts_only_actual_releases_and_logs_the_sampling() -> None:
    user = _user(300)
    request = _parse(5.0, "poisson:0.1")
    released = sum(len(user.release("train", request).reports) for _ in range(5))
    ledger = user.state.ledger
    assert ledger.releases() == released < 300 * 5
    assert (ledger.counts[0, 300:] == 0).all()  # query records untouched
    (spec, event, steps), = ledger.step_log("train")
    assert spec == "poisson:0.1" and steps == 5 and event == GaussianEvent(2 * CLIP, 5.0)
    rebuilt = Ledger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert rebuilt.step_log("train") == ledger.step_log("train") and rebuilt.releases() == released
    # worst-case figure: exactly the composition of each record's own releases (sampling never lowers it)
    worst = max(int(c) for c in ledger.counts[0])
    assert ledger.sentence_epsilon() == pytest.approx(compose_epsilon({event: worst}, DELTA))


def test_an_empty_poisson_step_is_a_step_not_a_refusal() -> None:
    user = _user(3)
    request = _parse(5.0, "poisson:1e-09")
    release = user.release("train", request)
    assert release.reports.shape == (0, 4) and user.state.ledger.releases() == 0
    assert user.state.ledger.step_log("train")[0][2] == 1


@pytest.mark.parametrize(
    "request_sampling,records,reason",
    [("all", 0, "not this run's sampling"), ("poisson:0.5", 0, "not this run's sampling"), ("poisson:0.1", 3, "must be 0")],
)
def test_sampling_in_a_request_is_refused_at_parse_before_any_user_sees_it(request_sampling: str, records: int, reason: str) -> None:
    with pytest.raises(RequestRefused, match=reason):
        parse_release_request(_request(5.0, request_sampling, records), _limits(5.0, "poisson:0.1"))


def test_worst_case_enforcement_ignores_sampling() -> None:
    sigma = 2 * CLIP / 0.5  # mu = 0.5 per release
    budget = compose_epsilon({GaussianEvent(2 * CLIP, sigma): 3}, DELTA)
    user = _user(50, epsilon=budget * (1 + 1e-9))
    request = _parse(sigma, "poisson:0.5")
    for _ in range(40):
        try:
            user.release("train", request)
        except BudgetExhausted:
            break
    assert user.state.ledger.counts.max() == 3  # no record past 3 releases, however sparse the sampling


def test_amplified_enforcement_serves_exactly_the_calibrated_steps() -> None:
    epsilon, p, steps = 2.0, 0.5, 3
    z = calibrate_noise_multiplier("pld", epsilon, DELTA, steps, p).noise_multiplier
    user = _user(30, epsilon=epsilon, enforce="amplified")
    request = _parse(z * 2 * CLIP, f"poisson:{p!r}")
    for _ in range(steps):
        user.release("train", request)
    with pytest.raises(BudgetExhausted, match="amplified"):
        user.release("train", request)
    ledger = user.state.ledger
    assert sum(n for *_, n in ledger.step_log("train")) == steps
    assert user.amplified_epsilon() <= epsilon
    assert enforced.pld_epsilon(((p, z, steps + 1),), DELTA) > epsilon
    # the worst-case ledger still counts every actual release, beyond what the amplified bound allows
    assert ledger.sentence_epsilon() > 0 and ledger.releases() == int(ledger.counts.sum())


def test_amplified_cost_is_the_pld_of_the_steps_served() -> None:
    z, p = 1.5, 0.25
    groups = enforced.entries([(f"poisson:{p!r}", GaussianEvent(2.0, 2.0 * z), 4), ("poisson:0.25", GaussianEvent(2.0, 3.0), 2)])
    assert groups == ((p, z, 6),)
    assert enforced.pld_epsilon(groups, DELTA) == amplified.pld_epsilon(Schedule(z, p, 6, DELTA))
    with pytest.raises(ValueError, match="fixed-size"):
        enforced.entries([("fixed:3", GaussianEvent(2.0, 2.0), 1)])
    mixed = enforced.entries([("poisson:0.25", GaussianEvent(2.0, 3.0), 2), ("all", GaussianEvent(2.0, 8.0), 1)])
    assert enforced.pld_epsilon(mixed, DELTA) > enforced.pld_epsilon(((0.25, 1.5, 2),), DELTA)


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
def test_calibration_round_trip_per_accountant(accountant: str) -> None:
    epsilon, steps, p = 3.0, 20, 0.2
    result = calibrate_noise_multiplier(accountant, epsilon, DELTA, steps, p)
    schedule = Schedule(result.noise_multiplier, p, steps, DELTA)
    recomputed = {
        "worst-case": lambda: worst_case.epsilon_for_releases(result.noise_multiplier, result.releases, DELTA),
        "clt": lambda: clt.epsilon(schedule),
        "pld": lambda: amplified.pld_epsilon(schedule),
        "rdp": lambda: amplified.rdp_epsilon(schedule),
    }[accountant]()
    assert recomputed == pytest.approx(result.epsilon)
    assert epsilon * 0.99 <= recomputed <= epsilon


@pytest.mark.parametrize("enforce", ["worst-case", "amplified"])
def test_plan_calibrates_against_the_enforced_accountant(enforce: str) -> None:
    config = RunSpec.of(epsilon=2.0, rounds=5, sampling="poisson:0.3", enforce=enforce, upsampling_q=0.5, p_query=0.5, answers=2)
    plan = make_plan(config, 2, 10)
    for kind, randomizer in (("train", plan.train), ("query", plan.query)):
        c = plan.calibrations[kind]
        z = randomizer.event.sigma / randomizer.event.sensitivity
        assert c["noise_multiplier"] == z and c["accountant"] == ("pld" if enforce == "amplified" else "worst-case")
        if enforce == "amplified":
            recomputed = amplified.pld_epsilon(Schedule(z, c["rate"], c["steps"], DELTA))
        else:
            recomputed = compose_epsilon({randomizer.event: c["releases"]}, DELTA)
        assert recomputed == pytest.approx(c["epsilon"]) and 2.0 * 0.99 <= recomputed <= 2.0
    assert plan.query_steps == UpSampling(0.5, 0.5, 2).planned_steps(10)
    assert plan.limits("query").sampling == "upsample:0.5:0.5:2"


def test_run_options_reject_unboundable_combinations() -> None:
    with pytest.raises(ValueError, match="fixed-size"):
        RunSpec.of(sampling="fixed:3", enforce="amplified")
    with pytest.raises(ValueError, match="labels public"):
        RunSpec.of(sampling="poisson:0.1", enforce="amplified", labels="rr:2")
    with pytest.raises(ValueError, match="fixed:<m>"):
        RunSpec.of(sampling="poisson:0.1", records_per_user_round=3)
    for bad in ("poisson:0", "poisson:1.5", "fixed:0", "fixed:2.5", "some", "poisson:nan"):
        with pytest.raises(ValueError):
            RunSpec.of(sampling=bad)
    with pytest.raises(ValueError):
        RunSpec.of(upsampling_q=0.0)
    assert TrainSampling.parse("poisson:0.25").spec == "poisson:0.25"
    assert UpSampling().spec == "all" and UpSampling.parse(UpSampling(0.2, 0.1, 3).spec) == UpSampling(0.2, 0.1, 3)
