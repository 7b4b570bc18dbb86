"""Tests for the privacy mutations that survived the suite outside issue 26's list
(``python -m ldpfed.simulations.checks.mutation_check``, docs/mutation_check.md): each fails on its mutation.

- ``copies-not-deduplicated``: records sharing a ledger column released together, each checked
  as if it were the column's only release;
- ``laplace-clips-in-l2``: Laplace randomizers clipping in L2, whose L1 diameter is 2C sqrt(d),
  not the 2C their event states;
- ``bitflip-one-sided-ratio``: a bit's cost read from the output 1 only;
- ``noise-calibration-ignores-the-label-cost``: Laplace, d_chi, bit-encoding and mixup noise
  calibrated as if the label releases charged beside it cost nothing.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma
from ldpfed.fed.privacy.ledger import Budget, Ledger
from ldpfed.fed.randomizers.bits import OMERandomizer, OUERandomizer, SUERandomizer
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.instance_encoding import DPInstanceEncodingLaplace
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.randomizers.laplace import LaplaceRandomizer
from ldpfed.fed.runtime.requests import ReleaseRequest
from ldpfed.fed.runtime.user import BudgetExhausted, User, UserRecords, UserState

DELTA = 1e-5


def test_records_sharing_a_column_leave_once_per_step_and_never_past_the_budget() -> None:
    """Records 0 and 1 share one column (the same record id): one release of it fits the budget, not two."""
    sigma = calibrate_gaussian_sigma(3.0, DELTA, 1, 2.0)  # one release costs a record 3.0
    rng = np.random.default_rng(0)
    records = UserRecords(rng.normal(size=(3, 4)), np.array([0, 1, 0]), rng.normal(size=(1, 4)), np.array([1]))
    budget = Budget(3.0, DELTA)
    ledger = Ledger(4, budget, columns=np.array([0, 0, 1, 2]))
    user = User(5, records, budget, PublicLabels(2), seed=None, state=UserState(ledger))
    request = ReleaseRequest((5,), GaussianRandomizer(1.0, sigma), 0)
    release = user.release("train", request)
    assert len(release.reports) == 2  # one report per column: the shared one and record 2's
    assert ledger.record_counts()[0, :3].tolist() == [1, 1, 1]  # the shared column charged once, seen from both records
    assert ledger.sentence_epsilon() <= 3.0 * (1 + 1e-9)
    with pytest.raises(BudgetExhausted):
        user.release("train", request)


@pytest.mark.parametrize(
    "randomizer",
    [LaplaceRandomizer(clip=1.0, scale=2.0), DPInstanceEncodingLaplace(k=4, max_coefficient=1.0, masks=0, clip=1.0, scale=8.0)],
    ids=["laplace", "dpie-laplace"],
)
def test_laplace_inputs_lie_in_the_l1_ball_whose_diameter_the_event_states(randomizer: LaplaceRandomizer | DPInstanceEncodingLaplace) -> None:
    """The event's L1 sensitivity 2C holds only if rows are clipped to L1 radius C (an L2 clip leaves
    L1 norms up to C sqrt(d): seed 002's mistake)."""
    x = np.ones((4, 64)) * np.array([[1.0], [0.5], [0.1], [0.001]])  # L1 norms 64, 32, 6.4, 0.064
    clipped = randomizer.preprocess(x)
    assert np.abs(clipped).sum(axis=1).max() <= randomizer.clip * (1 + 1e-12)
    np.testing.assert_allclose(clipped[3], x[3])  # a row inside the ball is left as it is


def _brute_force_epsilon(p: np.ndarray, q: np.ndarray) -> float:
    """max over two input bit vectors and one output vector of |log P(y | b) / P(y | b')|, by enumeration."""
    n = len(p)
    worst = 0.0
    vectors = [np.array(v) for v in itertools.product([0, 1], repeat=n)]
    for b in vectors:
        one = np.where(b == 1, p, q)  # P(reported 1) per bit
        for b2 in vectors:
            one2 = np.where(b2 == 1, p, q)
            for y in vectors:
                log_ratio = np.sum(np.where(y == 1, np.log(one) - np.log(one2), np.log1p(-one) - np.log1p(-one2)))
                worst = max(worst, abs(float(log_ratio)))
    return worst


@pytest.mark.parametrize(
    "randomizer",
    [
        OMERandomizer(1.0, 1, integer_bits=1, fraction_bits=1, lam=0.5),
        OMERandomizer(1.0, 1, integer_bits=1, fraction_bits=1, lam=100.0),
        OUERandomizer(2.0, 1, integer_bits=1, fraction_bits=1),
        SUERandomizer(2.0, 1, integer_bits=1, fraction_bits=1),
    ],
    ids=["ome-lambda-0.5", "ome-lambda-100", "oue", "sue"],
)
def test_bit_flip_true_epsilon_is_the_worst_log_ratio_over_every_output(randomizer: OMERandomizer) -> None:
    """Independent of per_bit_epsilon: every pair of 3-bit inputs and every 3-bit output, enumerated."""
    assert randomizer.num_bits == 3
    expected = _brute_force_epsilon(randomizer.p, randomizer.q)
    assert randomizer.true_epsilon == pytest.approx(expected, rel=1e-9)
    assert randomizer.event.epsilon == pytest.approx(expected, rel=1e-9)
    assert math.isfinite(expected) and expected > 0


@pytest.mark.parametrize(
    "mechanism,options",
    [
        ("laplace", {"clip": 1.0}),
        ("dchi", {"clip": 1.0}),
        ("sue", {"dim": 4}),
        ("dpie-laplace", {"k": 4, "max_coefficient": 1.0, "masks": 0, "clip": 1.0}),
    ],
)
def test_a_calibration_with_the_labels_cost_meets_the_target_with_it(mechanism: str, options: dict) -> None:
    """Mechanisms solved for a privacy parameter (fed.privacy.calibration.calibrate_parameter) count the label
    releases charged beside them."""
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.privacy.events import RandomizedResponseEvent
    from ldpfed.fed.randomizers import RANDOMIZERS

    labels = RandomizedResponseEvent(1.0, 2)
    randomizer = RANDOMIZERS[mechanism].calibrated(3.0, DELTA, 2, options, {labels: 2})
    achieved = compose_epsilon({randomizer.event: 2, labels: 2}, DELTA)
    assert 2.99 <= achieved <= 3.0

