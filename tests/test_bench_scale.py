"""ldpfed.simulations.benchmarks.bench_scale on synthetic inputs: steady-state figures, noise-bound fraction, plot.

No simulation is launched here (the benchmark itself is run by hand).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from ldpfed.simulations.benchmarks.bench_scale import (
    PROFILES,
    Run,
    build_parser,
    noise_fraction,
    normals_per_second,
    print_tables,
    read_metrics,
    steady_state,
    write_plot,
)


def _ldpfed_row(round_: int, users: int, seconds: float, refused: int = 0, ledger: float | None = None) -> dict:
    row = {"round": round_, "users_sampled": users, "reports_received": users - refused, "users_refused": refused, "seconds": seconds}
    if ledger is not None:
        row["ledger_seconds"] = ledger
    return row


def test_steady_state_skips_the_warmup_round(tmp_path: Path) -> None:
    rows = [_ldpfed_row(1, 1000, 5.0), _ldpfed_row(2, 1000, 0.5), _ldpfed_row(3, 1000, 0.25, refused=100), _ldpfed_row(4, 1000, 0.25)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in reversed(rows)) + "\n" + '{"round": 5, "sec')  # row 5 half-written
    steady = steady_state(read_metrics(path))
    assert steady.rounds == 3 and steady.first_round_seconds == 5.0
    assert steady.user_rounds == 2900 and steady.reports == 2900
    assert steady.seconds == pytest.approx(1.0)
    assert steady.user_rounds_per_s == pytest.approx(2900.0)
    assert steady.seconds_per_round == pytest.approx(1 / 3)
    assert steady.ledger_seconds is None and steady.ledger_seconds_per_round is None  # field absent: blank
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_steady_state_ledger_seconds_and_plain_flower_rows() -> None:
    rows = [_ldpfed_row(r, 10, 1.0, ledger=0.1 * r) for r in (1, 2, 3)]
    assert steady_state(rows).ledger_seconds_per_round == pytest.approx(0.25)
    plain = [{"round": r, "nodes": 100, "replies": 98 if r == 3 else 100, "errors": 0, "seconds": 2.0} for r in (1, 2, 3)]
    steady = steady_state(plain)
    assert steady.user_rounds == 198 and steady.user_rounds_per_s == pytest.approx(49.5)
    with pytest.raises(ValueError, match="steady state"):
        steady_state(rows[:1])


def test_noise_fraction_and_a_measured_bound() -> None:
    # 15,000 user-rounds/s of one 16-d report against 85 M normals/s
    assert noise_fraction(15_000, PROFILES["16"].dims, 85e6) == pytest.approx(15_000 * 16 / 85e6)
    # 5,000 user-rounds/s of 16 x 384: 30.7 M normals/s
    assert noise_fraction(5_000 * PROFILES["384"].records, PROFILES["384"].dims, 85e6) == pytest.approx(30.72e6 / 85e6)
    assert normals_per_second("numpy", "float64", threads=2, seconds=0.05, block=1 << 14) > 1e5


def test_tables_and_plot_are_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(kind: str, users: int, seconds: float, profile: str = "") -> dict:
        nodes = users if kind == "plain Flower" else 2
        out = asdict(Run(kind, users, nodes, 4, "", [], status="completed", data=f"generated:{5 * users}", profile=profile))
        out.update(seconds_per_round=seconds, user_rounds_per_s=users / seconds)
        return out

    report = {
        "settings": {"nodes": 2},
        "machine": {"cpus": 2},
        "noise_bounds": [{"library": "torch", "dtype": "float32", "threads": 1, "normals_per_s": 85e6}],
        "noise_bound_best": {"normals_per_s": 85e6},
        "plain_flower": [run("plain Flower", 2, 0.05), run("plain Flower", 1000, 6.0)],
        "ldpfed": [run("ldpfed", u, u / 3000, "16") for u in (1_000, 10_000, 100_000)] + [run("ldpfed", 1000, 2.0, "384")],
    }
    print_tables(report)
    printed = capsys.readouterr().out
    assert "100,000" in printed and "16 x 384" in printed and "75" in printed  # 3,000 / 40 user-rounds/s
    path = tmp_path / "plots" / "bench_scale.png"
    write_plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_options() -> None:
    args = build_parser().parse_args(["--users", "1000,10_000", "--profile", "16,384", "--plain-nodes", "100"])
    assert args.users == [1000, 10_000] and args.profile == ["16", "384"] and args.plain_nodes == [100]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--profile", "32"])


def test_steady_state_counts_the_wall_clock_between_rounds_when_rows_carry_it() -> None:
    """With ``elapsed`` (seconds since round 1 began) the work between rounds counts: here 0.5 s
    after round 3's evaluation that no round's own ``seconds`` holds."""
    rows = [{**_ldpfed_row(r, 100, 1.0), "elapsed": e} for r, e in ((1, 4.0), (2, 5.0), (3, 6.0), (4, 7.5))]
    steady = steady_state(rows)
    assert steady.rounds == 3 and steady.seconds == pytest.approx(3.5) and steady.user_rounds_per_s == pytest.approx(300 / 3.5)
    assert steady_state([{k: v for k, v in row.items() if k != "elapsed"} for row in rows]).seconds == pytest.approx(3.0)
