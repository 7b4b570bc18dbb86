"""Issue 42 item 3: the audit checks which way a mechanism's audit score points, and says so.

A plugin whose event states an eighth of its Gaussian's true sensitivity (true cost 8 times its claim)
and whose ``audit_scores`` returns the pair's scores reversed used to audit at 0.000, "pass". The
convention (a larger score means "released from the pair's second input") is now checked on the
audit's own draws and on a copy of the mechanism at epsilon 100, where any sound score separates its
pair; a score that breaks it is refused with the convention in the message. ``ldpfed audit`` exits 1
when a claim is violated.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

import ldpfed
from ldpfed.fed.plugins.entry_points import PLUGINS
from ldpfed.fed.privacy.events import GaussianEvent
from ldpfed.fed.randomizers import RANDOMIZERS, register_randomizer
from ldpfed.fed.randomizers.auditing import (
    DIRECTION_Z, PROBE_EPSILON, AuditScoreError, auditable, build_for_audit, check_direction, judge, separation,
)
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.simulations.cli import main


@pytest.fixture
def restored() -> Iterator[None]:
    """The randomizer registry as it was before the test."""
    saved, plugins = dict(RANDOMIZERS), {group: dict(names) for group, names in PLUGINS.items()}
    yield
    RANDOMIZERS.clear()
    RANDOMIZERS.update(saved)
    for group, names in plugins.items():
        PLUGINS[group].clear()
        PLUGINS[group].update(names)


class Undercounted(GaussianRandomizer):
    """The Gaussian, stating (and calibrating to) an eighth of its true sensitivity 2C: its true cost is 8 times its claim."""

    name = "undercounted-by-8"
    float_safe = True

    @classmethod
    def _calibrate(cls, target, options):  # type: ignore[no-untyped-def]
        return cls(options["clip"], target.gaussian_sigma(options["clip"] / 4))

    @property
    def event(self) -> GaussianEvent:
        return GaussianEvent(sensitivity=self.clip / 4, sigma=self.sigma)


class Reversed(Undercounted):
    """The same, its audit score pointing the other way (the pair's scores returned as (x1's, x0's))."""

    name = "undercounted-reversed"

    def audit_scores(self, dim):  # type: ignore[no-untyped-def]
        scores = super().audit_scores(dim)
        return lambda n, rng: scores(n, rng)[::-1]


class Blind(Undercounted):
    """The same, scoring every release 0: it tells nothing, so it would pass any claim."""

    name = "undercounted-blind"

    def audit_scores(self, dim):  # type: ignore[no-untyped-def]
        return lambda n, rng: (np.zeros(n), np.zeros(n))


def test_a_reversed_score_is_refused_with_the_convention_not_passed(restored: None) -> None:
    register_randomizer(Reversed)
    with pytest.raises(AuditScoreError, match="points the wrong way at epsilon 100") as error:
        ldpfed.audit("undercounted-reversed", 3.0, dim=8, samples=20_000, progress=False)
    assert "a larger score meaning 'released from x1'" in str(error.value) and "docs/plugins.md" in str(error.value)


def test_a_score_that_separates_nothing_is_refused(restored: None) -> None:
    register_randomizer(Blind)
    with pytest.raises(AuditScoreError, match="no better than chance"):
        ldpfed.audit("undercounted-blind", 3.0, dim=8, samples=20_000, progress=False)


def test_the_honest_score_catches_the_under_report_and_the_command_exits_1(
    restored: None, capsys: pytest.CaptureFixture[str]
) -> None:
    register_randomizer(Undercounted)
    status = main(["audit", "--mechanism", "undercounted-by-8", "--epsilon", "3", "--dim", "8", "--samples", "20000", "--json"])
    (row,) = json.loads(capsys.readouterr().out)
    assert row["accounted_epsilon"] == pytest.approx(3.0, rel=1e-6)  # what it states
    assert row["audited_lower_bound"] > 3.0 and row["verdict"] == "claim violated"
    assert status == 1
    assert main(["audit", "--mechanism", "gaussian", "--epsilon", "3", "--dim", "8", "--samples", "5000", "--json"]) == 0


def test_the_audits_own_draws_are_checked_too() -> None:
    """A reversed score whose probe is not built (fed code calling judge directly) still fails on its draws."""
    case = build_for_audit("gaussian", 8.0, 1e-5, 4)
    null, alt = case.scores(5000, np.random.default_rng(0))
    assert judge(case, 1e-5, null, alt).lower_bound > 2
    with pytest.raises(AuditScoreError, match="points the wrong way"):
        judge(case, 1e-5, alt, null)
    z, share = separation(null, alt)
    assert z > DIRECTION_Z and share > 0.8
    assert separation(np.zeros(50), np.zeros(50)) == (0.0, 0.5)


@pytest.mark.parametrize("mechanism", auditable())
def test_every_built_in_score_points_the_audits_way(mechanism: str) -> None:
    checked = check_direction(mechanism, 1e-5, 16, {"clip": 1.0})
    assert checked == (None if mechanism in ("ome", "texthide") else PROBE_EPSILON)  # fixed parameters: nothing larger
