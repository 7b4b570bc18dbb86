"""ldpfed.simulations.benchmarks.peer_pfl's plumbing on canned figures: options, torch's pin, the report's lines.

Nothing is built or run here (the benchmark builds pfl's environment and runs both simulators by hand).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldpfed.simulations.benchmarks import peer_pfl, peer_pfl_loop
from ldpfed.simulations.benchmarks.peer_pfl import (
    build_parser,
    default_venv,
    format_lines,
    format_markdown,
    installed_versions,
    summarise,
    torch_constraint,
    wait_for_quiet,
)


def _canned(ldpfed: float = 7_481.0, before: float = 1_849.0, after: float = 1_700.0, fraction: float = 0.086) -> dict:
    def pfl(rate: float, loads: tuple[float, float]) -> dict:
        return {"user_rounds_per_s": rate, "torch_threads": 2, "step_load_before": loads[0], "step_load_after": loads[1]}

    return {
        "created": "2026-11-28T23:00:00+00:00",
        "command": ["python", "-m", "ldpfed.simulations.benchmarks.peer_pfl"],
        "machine": {"cpus": 2, "platform": "Linux", "python": "3.11.7"},
        "settings": {"users": 5000, "rounds": 10, "warmup": 2, "evaluate_every": 1, "records": 16, "dims": 384},
        "pfl_version": "0.6.0",
        "pfl_torch": "2.13.0+cpu",
        "pfl_before": pfl(before, (0.61, 1.02)),
        "pfl_after": pfl(after, (1.13, 0.97)),
        "ldpfed": [
            {
                "label": "this checkout", "commit": "abc1234", "step_load_before": 1.02, "step_load_after": 1.13,
                "run": {"user_rounds_per_s": ldpfed, "seconds_per_round": 5000 / ldpfed, "noise_bound_fraction": fraction},
                "noise_bound_best": {"library": "torch", "dtype": "float32", "threads": 2, "normals_per_s": 5.0e8},
            }
        ],
    }


def test_defaults_are_the_issues_setting() -> None:
    args = build_parser().parse_args([])
    assert (args.users, args.rounds, args.warmup, args.evaluate_every) == (5000, 10, 2, [1])
    assert (args.pfl_version, args.torch_version, args.records, args.dims) == ("0.6.0", "2.13.0", 16, 384)
    assert args.venv is None and args.quiet_load is None
    loop = peer_pfl_loop.build_parser().parse_args(["--out", "x.json"])
    assert (loop.users, loop.rounds, loop.warmup, loop.records, loop.dims) == (5000, 10, 2, 16, 384)
    with pytest.raises(SystemExit):
        peer_pfl.main(["--rounds", "2", "--warmup", "2"])


def test_only_torchs_pin_is_taken_from_the_constraints(tmp_path: Path) -> None:
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# pins\ndp-accounting==0.6.0\ntorch==2.13.0+cpu\nnumpy==2.4.6\n")
    assert torch_constraint(constraints, "2.13.0") == "torch==2.13.0+cpu"
    assert torch_constraint(constraints, "2.14.0") == "torch==2.14.0"  # another version: no local pin applies
    assert torch_constraint(tmp_path / "missing.txt", "2.13.0") == "torch==2.13.0"


def test_the_environment_lives_in_the_cache_and_a_missing_one_has_no_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_venv("0.6.0") == tmp_path / "ldpfed-peer" / "pfl-0.6.0"
    assert installed_versions(tmp_path / "nowhere") == {}
    assert wait_for_quiet(None, 0.0, print) >= 0.0  # no threshold: no wait


def test_figures_ratios_and_goals_from_canned_numbers() -> None:
    figures = summarise(_canned())
    assert figures["ratio_before"] == pytest.approx(7_481 / 1_849)
    assert figures["ratio_after"] == pytest.approx(7_481 / 1_700)
    assert figures["ratio_least"] == pytest.approx(7_481 / 1_849)
    assert figures["ratio_mean_pfl"] == pytest.approx(7_481 / 1_774.5)
    assert not figures["ratio_met"] and not figures["noise_met"]
    met = summarise(_canned(ldpfed=20_000.0, fraction=0.31))
    assert met["ratio_met"] and met["noise_met"]
    assert not summarise(_canned(ldpfed=18_000.0))["ratio_met"]  # 10.6x the after run, 9.7x the before run: each must pass


def test_the_printed_lines_and_markdown_carry_every_figure_and_load() -> None:
    lines = format_lines(_canned())
    assert lines[0] == "pfl-research 0.6.0, before: 1,849 user-rounds/s (load 0.61 / 1.02)"
    assert lines[1] == (
        "ldpfed, this checkout: 7,481 user-rounds/s, 0.668 s/round, 4.05x pfl at least, noise-bound fraction 0.086 (load 1.02 / 1.13)"
    )
    assert lines[2] == "pfl-research 0.6.0, after: 1,700 user-rounds/s (load 1.13 / 0.97)"
    assert "4.05x against before" in lines[3] and "4.40x against after" in lines[3] and "MISSED" in lines[3]
    assert lines[4].startswith("noise-bound fraction of ldpfed (this checkout): 0.086 of 500 M normals/s (torch float32, 2 thread(s); goal 0.30: MISSED")
    text = format_markdown(_canned())
    assert "| pfl-research, before | 1,849 | 2.704 |  |  | 0.61 / 1.02 |" in text
    assert "| ldpfed, this checkout (abc1234) | 7,481 | 0.668 | 4.05x | 0.086 | 1.02 / 1.13 |" in text
    assert "| pfl-research, after | 1,700 | 2.941 |  |  | 1.13 / 0.97 |" in text
    assert "5,000 users" in text and "16 records x 384 dims" in text and "2.13.0+cpu" in text


def test_several_checkouts_each_get_their_ratio_and_the_last_meets_the_goals(tmp_path: Path) -> None:
    report = _canned(ldpfed=20_000.0, fraction=0.31)
    before = {**report["ldpfed"][0], "label": "before", "commit": "", "run": {"user_rounds_per_s": 7_000.0, "seconds_per_round": 0.714, "noise_bound_fraction": 0.08}}
    report["ldpfed"].insert(0, before)
    figures = summarise(report)
    assert [run["label"] for run in figures["runs"]] == ["before", "this checkout"]
    assert figures["runs"][0]["ratio_least"] == pytest.approx(7_000 / 1_849) and figures["ratio_met"] and figures["noise_met"]
    lines = format_lines(report)
    assert lines[1].startswith("ldpfed, before: 7,000 user-rounds/s") and lines[2].startswith("ldpfed, this checkout: 20,000")
    assert "| ldpfed, before | 7,000 | 0.714 | 3.79x | 0.080 |" in format_markdown(report)
    args = build_parser().parse_args(["--checkout", f"old={peer_pfl.ROOT}"])
    assert args.checkout == [("old", peer_pfl.ROOT)]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--checkout", f"old={tmp_path}"])  # not a checkout


def test_each_checkout_runs_once_per_evaluation_frequency_in_order() -> None:
    args = build_parser().parse_args(["--evaluate-every", "10,1", "--checkout", f"old={peer_pfl.ROOT}", "--checkout", f"new={peer_pfl.ROOT}"])
    assert peer_pfl.ldpfed_runs(args) == [
        ("old, evaluating every 10 rounds", peer_pfl.ROOT, 10), ("old, evaluating every round", peer_pfl.ROOT, 1),
        ("new, evaluating every 10 rounds", peer_pfl.ROOT, 10), ("new, evaluating every round", peer_pfl.ROOT, 1),
    ]
    assert peer_pfl.ldpfed_runs(build_parser().parse_args(["--evaluate-every", "5"])) == [("this checkout", peer_pfl.ROOT, 5)]
    for bad in ("0", "10,x", "", "1,-2"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--evaluate-every", bad])


def test_report_only_rewrites_the_markdown_from_the_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "peer.json"
    report = _canned()
    report["command"] = ["python", "-m", "ldpfed.simulations.benchmarks.peer_pfl", "--checkout", "before (abc)=/tmp/x"]
    report["pfl_before"]["round_ends_s"] = [3.0, 5.5, 8.25]
    report["ldpfed"][0]["round_seconds"] = [1.5, 0.61, 0.7]
    out.write_text(json.dumps(report))
    assert peer_pfl.main(["--report-only", "--out", str(out)]) == 0
    text = out.with_suffix(".md").read_text()
    assert "--checkout 'before (abc)=/tmp/x'" in text  # the command as it can be pasted
    assert "- pfl-research, before: 3.00 2.50 2.75" in text and "- ldpfed, this checkout: 1.50 0.61 0.70" in text
    assert "[peer] ldpfed, this checkout: 7,481 user-rounds/s" in capsys.readouterr().out
