"""Whole runs through the real ClientApp and ServerApp (in-process grid) with training sampling
and inference up-sampling, under each enforcement mode: the report's first line, every
accountant in summary.json, and ledgers that match what was released."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.strategies.app import app as server_app
from tests.local_grid import run_local

ACCOUNTANT_KEYS = {
    "worst_case_actual", "worst_case_quantile", "worst_case_all_steps", "clt", "pld", "rdp",
    "prv_lower", "prv_estimate", "prv_upper", "advanced_composition", "basic_composition",
}
KINDS = {"enforced", "upper bound", "estimate", "lower bound"}


def _run(tmp_path: Path, **extra: object) -> tuple[Path, dict]:
    values = dict(
        data="generated:160", public="none", dim=0, users=4, nodes=2, rounds=2, epsilon=4.0, out=str(tmp_path / "run"),
        inference="remote", sampling="poisson:0.5", upsampling_q=0.5, p_query=0.5, answers=2,
        nonprivate_baseline=False,
    )
    values.update(extra)
    run_local(server_app, client_app, 2, RunSpec.from_mapping(values).to_mapping())
    out = tmp_path / "run"
    return out, json.loads((out / "summary.json").read_text())


def _query_and_train_releases(out: Path, summary: dict) -> tuple[int, int]:
    """Releases counted by the users' ledgers, per randomizer (training and query sigmas differ)."""
    assert summary["sigma_train"] != summary["sigma_query"]
    ledgers = json.loads((out / "ledgers.json").read_text())["users"]
    totals = {"train": 0, "query": 0}
    for data in ledgers.values():
        for entry in data["events"]:
            kind = "train" if entry["event"]["sigma"] == summary["sigma_train"] else "query"
            assert entry["event"]["sigma"] == summary[f"sigma_{kind}"]  # public labels: Gaussian events only
            totals[kind] += int(np.sum(entry["counts_per_record"]))
        assert {s["kind"]: s["sampling"] for s in data["steps"]}["train"] == summary["sampling"]
    return totals["train"], totals["query"]


@pytest.mark.parametrize("enforce", ["amplified", "worst-case"])
def test_run_reports_every_accountant_and_its_enforcement(tmp_path: Path, enforce: str) -> None:
    out, summary = _run(tmp_path, enforce=enforce)
    first = (out / "privacy_report.md").read_text().splitlines()[0]
    if enforce == "amplified":
        assert "AMPLIFIED PLD BOUND" in first and "--enforce amplified" in first
    else:
        assert "worst-case ledger" in first and "AMPLIFIED" not in first
    assert summary["errors"] == [] and summary["enforce"] == enforce
    for kind in ("train", "query"):
        figures = {f["key"]: f for f in summary["accountants"][kind]}
        assert ACCOUNTANT_KEYS <= set(figures)
        for f in figures.values():
            assert f["name"] and f["version"] and f["kind"] in KINDS and "assumption" in f and "parameters" in f
        assert figures["clt"]["kind"] == "estimate" and figures["pld"]["kind"] in ("upper bound",)
        enforced = [k for k, f in figures.items() if f["enforced"]]
        assert enforced == (["pld"] if enforce == "amplified" else ["worst_case_actual"])
    assert "clt_eq9_as_published" in {f["key"] for f in summary["accountants"]["query"]}
    assert summary["epsilon_enforced_max"] <= 4.0 + 1e-9
    if enforce == "amplified":
        assert summary["epsilon_amplified_pld_max"] <= 4.0 + 1e-9
        assert summary["calibration"]["train"]["accountant"] == "pld"
    else:
        assert summary["epsilon_sentence_max"] <= 4.0 + 1e-9
    # the ledgers count every actual release and nothing else
    train, query = _query_and_train_releases(out, summary)
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert train == rounds[-1]["reports_total"]
    inference = summary["remote_inference"]
    assert query == inference["releases_true"] == inference["answers"]
    assert inference["releases_fictitious"] > 0
    assert inference["reports"] == inference["releases_true"] + inference["releases_fictitious"]
    assert summary["releases"] == train + query
    if enforce == "worst-case":
        assert inference["queries_with_k_answers"] == inference["queries"]
