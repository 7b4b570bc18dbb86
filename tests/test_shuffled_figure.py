"""The shuffle model's published central epsilon (strategies/app.py ``shuffled_figure``; issue 39, item 12).

eps0, the local epsilon that FMT21's bound takes, is the largest pure epsilon one training report costs over the
run's plans (privacy tiers), the label's randomized response composed in; a report that is not pure LDP (a
Gaussian) gets no figure. Each figure is checked against eps0 computed here from the randomizers' parameters
(Laplace: 2 C1 / b) and the bound of fed.privacy.shuffle, itself checked against the paper in tests/test_shuffle.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ldpfed.fed.privacy.ledger import Budget
from ldpfed.fed.privacy.shuffle import shuffled_epsilon
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.randomizers.labels import PublicLabels, RandomizedResponse
from ldpfed.fed.randomizers.laplace import LaplaceRandomizer
from ldpfed.fed.configuration.plan import PrivacyPlan
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.strategies.app import shuffled_figure

DELTA = 1e-5
BATCHES = [400, 300]


def _config(labels: str) -> RunSpec:
    return RunSpec.of(data="generated:400", public="none", dim=0, mechanism="laplace", labels=labels, privacy_model="shuffle", delta=DELTA)


def _plan(randomizer: object, label_epsilon: float | None) -> PrivacyPlan:
    labels = PublicLabels(2) if label_epsilon is None else RandomizedResponse(label_epsilon, 2)
    return PrivacyPlan(randomizer, randomizer, labels, Budget(8.0, DELTA))  # type: ignore[arg-type]


def _strategy(*plans: PrivacyPlan) -> SimpleNamespace:
    """What shuffled_figure reads of the strategy: its plans (one per tier) and the shuffled batch sizes."""
    return SimpleNamespace(plans=list(plans), shuffled=list(BATCHES))


def _expected(eps0: float) -> float:
    """FMT21 per round at delta / rounds, rounds composed by basic composition."""
    return sum(shuffled_epsilon(n, eps0, DELTA / len(BATCHES)) for n in BATCHES)


def test_eps0_composes_the_randomized_response_labels_epsilon() -> None:
    clip, scale, label_epsilon = 1.0, 2.0, 0.5
    config = _config(f"rr:{label_epsilon}")
    assert config.privacy.label_epsilon == label_epsilon
    figure = shuffled_figure(config, _strategy(_plan(LaplaceRandomizer(clip, scale), label_epsilon)))
    eps0 = 2 * clip / scale + label_epsilon  # the report's Laplace epsilon, and its label's
    assert figure.eps0 == pytest.approx(eps0, rel=1e-12)
    assert figure.epsilon == pytest.approx(_expected(eps0), rel=1e-9)
    assert figure.epsilon > _expected(2 * clip / scale) * (1 + 1e-3)  # leaving the label out under-states it


def test_eps0_is_the_largest_over_the_plans() -> None:
    """Two privacy tiers: the noisier tier's reports cost 0.5 each, the other's 2.0; the bound holds for the
    shuffled batch only at the larger eps0 (every report in it must be eps0-LDP)."""
    config = _config("public")
    assert config.privacy.label_epsilon is None
    tiers = _strategy(_plan(LaplaceRandomizer(1.0, 4.0), None), _plan(LaplaceRandomizer(1.0, 1.0), None))
    figure = shuffled_figure(config, tiers)
    assert figure.eps0 == pytest.approx(2.0, rel=1e-12)
    assert figure.epsilon == pytest.approx(_expected(2.0), rel=1e-9)
    assert figure.epsilon > _expected(0.5) * 2


@pytest.mark.parametrize("tiers", [1, 2])
def test_a_gaussian_report_gets_no_shuffled_figure(tiers: int) -> None:
    """A Gaussian report is (epsilon, delta)-LDP, not pure: FMT21's pure-LDP bound does not apply, whatever its
    one-release epsilon; one Gaussian tier among pure ones is enough to withhold the figure."""
    config = _config("public")
    gaussian = _plan(GaussianRandomizer(1.0, 4.0), None)
    plans = [gaussian] if tiers == 1 else [_plan(LaplaceRandomizer(1.0, 2.0), None), gaussian]
    figure = shuffled_figure(config, _strategy(*plans))
    assert figure.epsilon is None and figure.eps0 is None
    assert "not pure" in figure.note and figure.batches == BATCHES
    pure = shuffled_figure(config, _strategy(_plan(LaplaceRandomizer(1.0, 2.0), None)))
    assert pure.epsilon == pytest.approx(_expected(1.0), rel=1e-9)  # the same run with a pure report has one
