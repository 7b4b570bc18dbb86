"""Seed 000's report compares the paper's CLT epsilon with the PLD bound at the paper's own sensitivity C
(issue 40, item 4): close below epsilon 12, above the bound at 25; the factor of about 2.4 at epsilon 1 is
ldpfed's sensitivity 2C."""

from __future__ import annotations

import pytest

from ldpfed.simulations.reproductions._seed000_tables_report import _pld_at_paper_sensitivity, clt_note
from ldpfed.simulations.reproductions.seed000_tables import PAPER

DELTA = 1 / 60_614  # SST-2's users' records in the report
P, STEPS = 0.1, 100


def test_the_paper_schedule_costs_close_to_its_clt_figure_at_sensitivity_c() -> None:
    bounds = {eps: _pld_at_paper_sensitivity(eps, DELTA, P, STEPS) for eps in PAPER["sst2"]["table4"]}
    assert bounds == pytest.approx({1.0: 1.045, 2.3: 2.523, 3.5: 3.971, 12.0: 12.94, 25.0: 20.92}, abs=0.01)
    note = clt_note(PAPER["sst2"]["table4"], lambda eps: bounds[eps])
    assert "below the bound at epsilon 1, 2.3, 3.5, 12 (under-states it by at most 12%)" in note
    assert "at or above it at 25 (over-states it by up to 20%)" in note
    assert "sensitivity 2C" in note and "under-states the amplified epsilon at finite T" not in note


def test_without_paper_rows_the_note_claims_nothing() -> None:
    assert clt_note({1.0: None}, lambda eps: None).startswith("- The paper's CLT figure is an estimate, not a bound;")
