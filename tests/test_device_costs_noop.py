"""The plumbing of the same-SuperNode comparison (issue 39 item 13), without a SuperNode.

``python -m ldpfed.simulations.benchmarks.device_costs --supernode`` serves a no-op app and ldpfed's app with the
same flower-supernode command and prints what ldpfed adds. Here: the no-op app runs its message sequence
through the in-process grid, its FAB builds as the registry serves it, and the difference and the goals
come out right on canned figures.
"""

from __future__ import annotations

import json
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from ldpfed.simulations.benchmarks.device_costs import benchmark
from ldpfed.simulations.benchmarks.device_costs.compare import GOALS, compare, comparison_lines, main, pooled
from ldpfed.simulations.benchmarks.device_costs.supernode import MESSAGES
from ldpfed.simulations.benchmarks.noop_flower import APP_DIR
from ldpfed.simulations.benchmarks.noop_flower import noop_flower_apps as noop
from ldpfed.simulations.local_grid import LocalGrid

ROUNDS = 3


def test_the_noop_app_answers_ldpfeds_message_sequence_at_once(tmp_path: Path) -> None:
    seen: list[tuple[str, RecordDict]] = []

    def client(message, context):  # noqa: ANN001, ANN202 (Flower's call)
        reply = noop.client(message, context)
        seen.append((message.metadata.message_type, reply.content))
        return reply

    config = {"nodes": 1, "rounds": ROUNDS, "dim": 16, "out": str(tmp_path), "round-timeout": 10.0}
    grid = LocalGrid(client, 1, config, engine=False)
    noop.server(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    kinds = [kind for kind, _ in seen]
    assert kinds == ["query.setup", *["train", "evaluate"] * ROUNDS, "query.ledger"]  # as ldpfed's run in the benchmark
    assert set(kinds) == set(MESSAGES) == set(noop.SEQUENCE)  # the stages the SuperNode's log is read for
    (report,) = [content["reports"].to_numpy_ndarrays()[0] for kind, content in seen if kind == "train"][:1]
    assert report.shape == (1, 16) and report.dtype == np.float32  # one tiny report, as ldpfed's reply carries one
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["reports_received"], r["errors"]) for r in rows] == [(i, 1, 0) for i in range(1, ROUNDS + 1)]


def test_the_noop_fab_holds_only_the_noop_app() -> None:
    from ldpfed.simulations.commands.device import build_fab

    names = set(zipfile.ZipFile(BytesIO(build_fab(APP_DIR))).namelist())
    assert {"noop_flower_apps.py", "pyproject.toml"} <= names
    assert not any(name.startswith(("fed/", "clients/", "strategies/")) for name in names)  # Flower alone, no ldpfed code


def _node(walls: dict[str, list[float]], peaks_mib: dict[str, list[float]], first_report: float, cpu: float) -> dict:
    processes = [
        {"pid": i, "kind": "flwr-clientapp", "message": f"{kind} message", "VmHWM_kB": mib * 1024, "cpu_s": cpu + i / 100}
        for i, (kind, mib) in enumerate((kind, mib) for kind, values in peaks_mib.items() for mib in values)
    ]
    processes.append({"pid": 99, "kind": "flower-supernode", "message": "start", "VmHWM_kB": 500 * 1024})  # not a message process
    return {
        "message_walls_s": walls,
        "memory": {"processes": processes},
        "time_to_first_report": {"connected": 2.0, "first_report_sent": first_report},
        "load_average": {"before": ["1.00", "1.50", "2.00"], "after": ["1.20", "1.40", "1.90"]},
    }


def test_the_difference_is_ldpfed_minus_noop_and_each_goal_is_judged_on_it() -> None:
    noop_node = _node({"train": [1.0, 1.2, 1.1], "evaluate": [1.0]}, {"train": [120.0, 121.0], "evaluate": [119.0]}, 11.0, 1.8)
    ldpfed = _node({"train": [1.5, 1.3, 1.35], "evaluate": [1.1]}, {"train": [191.0, 158.0], "evaluate": [138.0]}, 13.5, 2.2)
    result = compare(noop_node, ldpfed)
    diff, goals = result["difference"], result["goals"]
    assert diff["train_message_median_s"] == pytest.approx(1.35 - 1.1)
    assert diff["clientapp_peak_MiB"] == pytest.approx(191.0 - 121.0)  # the largest message process of each, not the SuperNode
    assert diff["time_to_first_report_s"] == pytest.approx(2.5)
    assert diff["train_message_cpu_median_s"] == pytest.approx(0.4)  # CPU seconds of a message's process, beside the wall
    assert diff["clientapp_peak_by_message_MiB"] == {"train message": pytest.approx(70.0), "evaluate message": pytest.approx(19.0)}
    assert {key: goal["met"] for key, goal in goals.items()} == {
        "train_message_median_s": True, "clientapp_peak_MiB": False, "time_to_first_report_s": True,
    }
    assert {key: goal["goal"] for key, goal in goals.items()} == GOALS == {
        "train_message_median_s": 0.3, "clientapp_peak_MiB": 50.0, "time_to_first_report_s": 3.0,
    }
    text = "\n".join(comparison_lines(result))
    assert "+70" in text and "NO" in text and "1.00 1.50 2.00 before launch" in text
    json.dumps(result)  # the report's JSON holds it as is
    missing = compare(noop_node, {**ldpfed, "time_to_first_report": {"first_report_sent": None}})
    assert missing["difference"]["time_to_first_report_s"] is None and not missing["goals"]["time_to_first_report_s"]["met"]


def test_pooled_pairs_take_the_median_over_every_train_message_and_judge_the_goal_on_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One pair whose ldpfed replies all caught the later 0.5 s poll, one where the no-op's did: per pair +0.5 and
    -0.5, pooled the medians of all ten messages."""
    late = compare(_node({"train": [1.5, 1.5, 1.5, 1.5, 2.0]}, {"train": [120.0]}, 11.0, 1.8),
                   _node({"train": [2.0, 2.0, 2.0, 1.5, 2.0]}, {"train": [150.0]}, 12.0, 1.6))
    early = compare(_node({"train": [2.0, 2.0, 2.0, 1.5, 2.0]}, {"train": [120.0]}, 11.0, 1.8),
                    _node({"train": [1.5, 1.5, 1.5, 2.0, 1.5]}, {"train": [150.0]}, 12.0, 1.6))
    figures = pooled([late, early])
    assert figures["per_pair_added_median_s"] == [pytest.approx(0.5), pytest.approx(-0.5)]
    assert figures["train_messages"] == {"noop": 10, "ldpfed": 10}
    assert figures["median_s"] == {"noop": pytest.approx(1.75), "ldpfed": pytest.approx(1.75)}
    assert figures["added_median_s"] == pytest.approx(0.0) and figures["met"]
    assert figures["added_mean_s"] == pytest.approx(0.0)
    assert not pooled([late])["met"]  # one pair alone: +0.5 s, above the goal
    reports = []
    for i, (noop_walls, ldpfed_walls) in enumerate((([1.5] * 5, [2.0] * 5), ([1.5] * 5, [2.0] * 5))):
        path = tmp_path / f"pair{i}.json"
        ldpfed_node = _node({"train": ldpfed_walls}, {"train": [150.0]}, 12.0, 1.6)
        path.write_text(json.dumps({"supernode": {**ldpfed_node, "noop": _node({"train": noop_walls}, {"train": [120.0]}, 11.0, 1.8)}}))
        reports.append(str(path))
    assert main([*reports, "--out", str(tmp_path / "pooled.json")]) == 0
    assert "added +0.50 s (goal <= 0.3: NOT met)" in capsys.readouterr().out
    assert json.loads((tmp_path / "pooled.json").read_text())["added_median_s"] == pytest.approx(0.5)
    (tmp_path / "alone.json").write_text(json.dumps({"supernode": _node({"train": [1.5]}, {"train": [150.0]}, 12.0, 1.6)}))
    with pytest.raises(SystemExit):
        main([str(tmp_path / "alone.json")])


def test_the_noop_comparison_is_on_by_default_with_supernode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        benchmark.main(["--skip-noop"])
    assert done.value.code == 2 and "--supernode" in capsys.readouterr().err
