"""--evaluate-every: rounds between evaluations still train; only they skip the fit and the evaluation exchange."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ldpfed.clients.app import app as client_app
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.strategies.app import app as server_app
from ldpfed.strategies.strategy import LdpStrategy
from tests.local_grid import run_local


def test_rounds_between_evaluations_train_but_record_no_accuracy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []  # (round, evaluation messages)
    configure_evaluate = LdpStrategy.configure_evaluate

    def counted(self: LdpStrategy, server_round: int, *args: Any) -> list:
        messages = list(configure_evaluate(self, server_round, *args))
        sent.append((server_round, len(messages)))
        return messages

    monkeypatch.setattr(LdpStrategy, "configure_evaluate", counted)
    out = tmp_path / "run"
    config = RunSpec.of(
        data="generated:600", public="none", dim=0, users=6, nodes=2, rounds=3, evaluate_every=2,
        releases_per_record=0, out=str(out), nonprivate_baseline=False,
    )
    run_local(server_app, client_app, 2, config.to_mapping())
    assert sent == [(1, 0), (2, 2), (3, 2)]  # round 2: every 2nd; round 3: the last
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["round"] for row in rounds] == [1, 2, 3]
    assert all(row["reports_received"] > 0 and row["epsilon_sentence_max"] > 0 for row in rounds)
    first, second, last = rounds
    assert "accuracy_local" not in first and "classifier_coordinates" not in first and "seconds" in first
    assert isinstance(second["accuracy_local"], float) and isinstance(last["accuracy_local"], float)
    assert last["reports_total"] == sum(row["reports_received"] for row in rounds)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy_local"] == last["accuracy_local"]
