"""The plot benchmark times each of a run's four plots, from the plot module it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldpfed.simulations.benchmarks import bench_plots


def test_the_benchmark_times_the_four_plots_of_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_plots.main(["--users", "6", "--repeat", "1", "--out", str(tmp_path / "plots.json")]) == 0
    report = json.loads((tmp_path / "plots.json").read_text())
    names = ["accuracy.png", "epsilon.png", "accuracy_users.png", "accuracy_epsilon.png"]
    assert list(report["cpu_seconds"]) == [*names, "all four"] and report["plots"].endswith("plots.py")
    assert all(value > 0 for value in report["cpu_seconds"].values())
    assert report["cpu_seconds"]["all four"] == pytest.approx(sum(report["cpu_seconds"][name] for name in names))
    assert "all four" in capsys.readouterr().out


def test_bad_counts_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench_plots.main(["--repeat", "0"])
