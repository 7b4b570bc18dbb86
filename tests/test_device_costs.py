"""ldpfed.simulations.benchmarks.device_costs without a SuperLink: latency per release and bytes per report, through
the real device path (outside the simulation engine, durable ledger), with a handful of releases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ldpfed.fed.privacy.noise import ENGINE_SAMPLER
from ldpfed.simulations.benchmarks.device_costs import benchmark

RELEASES = 3
PARTS = ("encode", "clip_noise", "charge", "commit", "message", "encode_plus_message")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return benchmark.run_benchmark(
        tmp_path_factory.mktemp("device-costs"), data="generated:24", public="generated:20", releases=RELEASES,
        full_dim=False, token_block_releases=1,
    )


def _positive(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_latency_parts_are_measured_on_the_device_path_and_fit_in_the_whole(results: dict) -> None:
    assert results["settings"]["in_simulation_engine"] is False and results["settings"]["durable_ledger"] is True
    default = results["latency"]["default"]
    assert default["report_dim"] == 16 and default["mechanism"]["mechanism"] == "gaussian"
    assert default["device_sampler"] and default["device_sampler"] != ENGINE_SAMPLER  # the device's own, OS-keyed
    parts = default["parts"]
    assert set(parts) == set(PARTS)
    for name in PARTS:
        part = parts[name]
        assert part["n"] == RELEASES, name
        assert all(_positive(part[k]) for k in ("median_ms", "p95_ms", "mean_ms", "min_ms", "max_ms")), (name, part)
        assert part["min_ms"] <= part["median_ms"] <= part["p95_ms"] <= part["max_ms"], (name, part)
    # Sample by sample the commit is inside its transaction and encode + message holds both, so
    # every order statistic keeps the order.
    for key in ("min_ms", "median_ms", "p95_ms", "max_ms"):
        assert parts["commit"][key] <= parts["charge"][key]
        assert parts["encode_plus_message"][key] >= max(parts["encode"][key], parts["message"][key])
    # A train message releases (clip + noise) and charges (one durable transaction), and more.
    assert parts["clip_noise"]["min_ms"] + parts["charge"]["min_ms"] <= parts["message"]["max_ms"]
    assert _positive(default["first_train_message_s"]) and _positive(default["encoder_first_call_s"])
    block = results["token_block"]
    assert block["shape"] == [16, 384] and _positive(block["clip_noise"]["median_ms"])


def test_bytes_per_report_count_the_report_inside_the_message(results: dict) -> None:
    sizes = results["bytes"]["default"]
    assert sizes["reports_per_message"] == 1
    assert sizes["report_raw_bytes"] == 16 * 4  # one float32 report of 16 dimensions
    assert sizes["arrays"]["reports"] == {"dtype": "float32", "shape": [1, 16], "raw_bytes": 64}
    assert sizes["arrays_raw_bytes"] >= sizes["report_raw_bytes"]
    assert sizes["flower_objects_bytes"] > sizes["arrays_raw_bytes"]
    assert sizes["flower_objects_bytes"] == sum(kind["bytes"] for kind in sizes["flower_objects"].values())
    assert {"Message", "RecordDict", "ArrayRecord", "ConfigRecord", "Array"} <= set(sizes["flower_objects"])
    assert sizes["protobuf_total_bytes"] == sizes["protobuf_push_messages_bytes"] + sizes["protobuf_push_object_bytes"]
    assert sizes["protobuf_push_object_bytes"] > sizes["flower_objects_bytes"]
    assert sizes["http_requests"] == 1 + sum(kind["count"] for kind in sizes["flower_objects"].values())


def test_figures_print_as_a_table_and_serialize_as_json(results: dict, tmp_path: Path) -> None:
    text = benchmark.table(results)
    for label in ("encode one sentence", "clip + noise", "durable charge", "train message", "bytes per report"):
        assert label in text
    path = tmp_path / "figures.json"
    path.write_text(json.dumps(results, default=benchmark._json_default))
    assert json.loads(path.read_text())["latency"]["default"]["parts"]["message"]["n"] == RELEASES
    assert "supernode" not in results  # the SuperNode part runs only with --supernode


def test_help_names_the_supernode_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        benchmark.main(["--help"])
    assert done.value.code == 0
    assert "--supernode" in capsys.readouterr().out
