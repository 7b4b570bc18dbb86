"""A run's report with randomized-response labels: every accountant row composes the label
released with each training report, or says that it leaves the labels out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.fed.configuration.plan import PrivacyPlan, make_plan
from ldpfed.fed.privacy.ledger import Ledger
from ldpfed.fed.randomizers.labels import PublicLabels
from ldpfed.fed.reporting.report import LedgerFigures, privacy_report, summary

NUM_LABELS = 4
EPSILON = 4.0
TRAIN, QUERY = 6, 2
CANNOT_COMPOSE_LABELS = {"clt", "rdp", "prv_lower", "prv_estimate", "prv_upper"}


def _config(labels: str) -> RunSpec:
    return RunSpec.from_mapping(
        dict(data="generated:160", rounds=2, sampling="poisson:0.5", epsilon=EPSILON, labels=labels, users=2)
    )


def _run(config: RunSpec, plan: PrivacyPlan) -> tuple[dict[str, Any], str]:
    """summary.json and privacy_report.md of two users who served two training steps, each
    releasing three records once (with their labels through the plan's label channel)."""
    events = [plan.train.event, *([plan.labels.event] if plan.labels.event is not None else [])]
    ledgers = {}
    for uid in (0, 1):
        ledger = Ledger(TRAIN + QUERY, plan.budget)
        for chosen in (np.arange(0, 3), np.arange(3, TRAIN)):
            ledger.charge(events, chosen)
            ledger.log_step("train", plan.train_sampling.spec, plan.train.event)
        ledgers[uid] = ledger.to_json()
    train_counts = {uid: TRAIN for uid in ledgers}
    figures = LedgerFigures.from_ledgers(ledgers, train_counts)
    result = summary(config, plan, figures, {}, 0.0, train_counts=train_counts)
    return result, privacy_report(config, plan, figures, result)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[dict[str, Any], str]]:
    config = _config("rr:2")
    plan = make_plan(config, NUM_LABELS)
    # the same reports with labels declared public: every difference is the labels' cost
    public = replace(plan, labels=PublicLabels(NUM_LABELS))
    return {"rr": _run(config, plan), "public": _run(_config("public"), public)}


def test_worst_case_rows_are_at_least_the_enforced_ledger(runs: dict[str, tuple[dict[str, Any], str]]) -> None:
    result, _ = runs["rr"]
    enforced = result["epsilon_sentence_max"]
    assert enforced == pytest.approx(EPSILON, rel=1e-5)  # one release with its label spends the whole budget
    rows = [f for f in result["accountants"]["train"] if f["key"].startswith("worst_case")]
    assert {f["key"] for f in rows} == {"worst_case_actual", "worst_case_quantile", "worst_case_all_steps"}
    for f in rows:
        assert f["epsilon"] >= enforced * (1 - 1e-9), f["name"]
    actual = next(f for f in rows if f["key"] == "worst_case_actual")
    assert actual["enforced"] and actual["epsilon"] == pytest.approx(enforced, rel=1e-9)


def test_each_row_includes_the_labels_or_says_it_leaves_them_out(
    runs: dict[str, tuple[dict[str, Any], str]],
) -> None:
    (rr, report), (public, public_report) = runs["rr"], runs["public"]
    public_rows = {f["key"]: f for f in public["accountants"]["train"]}
    excluded = set()
    for f in rr["accountants"]["train"]:
        same = public_rows[f["key"]]
        if f["labels_excluded"]:
            excluded.add(f["key"])
            assert "labels EXCLUDED" in f["name"] and "labels excluded" in f["note"]
            assert f["name"] in report
            assert f["epsilon"] == same["epsilon"]  # the reports alone, as for public labels
        else:
            assert f["epsilon"] > same["epsilon"], f["name"]
    assert excluded == CANNOT_COMPOSE_LABELS
    assert set(rr["accountants_excluding_labels"]["train"]) == excluded
    assert "## Labels in the accountants" in report
    assert not public["accountants_excluding_labels"]
    assert "labels EXCLUDED" not in public_report and "## Labels in the accountants" not in public_report


def test_amplified_per_user_figure_includes_the_labels(runs: dict[str, tuple[dict[str, Any], str]]) -> None:
    rr, public = runs["rr"][0], runs["public"][0]
    assert rr["epsilon_amplified_pld_max"] > public["epsilon_amplified_pld_max"]
    pld = next(f for f in rr["accountants"]["train"] if f["key"] == "pld")
    assert rr["epsilon_amplified_pld_max"] == pytest.approx(pld["epsilon"], rel=1e-9)  # same T, rate and labels
