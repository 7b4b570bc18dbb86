"""What ldpfed adds on a real SuperNode: the no-op app's figures against ldpfed's, and the goals of issue 39 item 13.

Both apps are served by the same ``flower-supernode`` command (same device folder, node config, keys,
trusted signers and Flower settings), each launched fresh against a fresh SuperLink, back to back
(``supernode.measure_supernode`` with ``noop=True``). Flower's own floor (a 3 s sleep after an
empty pull, a 0.5 s reply poll, one new ``flwr-clientapp`` process per message) is in both; the
difference is ldpfed's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1024.0
GOALS = {"train_message_median_s": 0.3, "clientapp_peak_MiB": 50.0, "time_to_first_report_s": 3.0}
"""ldpfed's added cost at most: median seconds per train message (received to answered), peak memory
of a message's ``flwr-clientapp`` process (VmHWM), seconds from launch to the first report."""


def app_figures(node: dict[str, Any]) -> dict[str, Any]:
    """The three compared figures of one app's SuperNode measurement, and their parts."""
    walls = node["message_walls_s"]
    every = [w for values in walls.values() for w in values]
    processes = [p for p in node["memory"]["processes"] if p["kind"] == "flwr-clientapp"]
    by_message: dict[str, list[float]] = {}
    cpu_by_message: dict[str, list[float]] = {}
    for process in processes:
        by_message.setdefault(process["message"], []).append(process.get("VmHWM_kB", 0) / MiB)
        if "cpu_s" in process:
            cpu_by_message.setdefault(process["message"], []).append(process["cpu_s"])
    lifetimes: dict[str, list[float]] = {}
    for process in processes:
        if "last_seen_s" in process:
            lifetimes.setdefault(process["message"], []).append(process["last_seen_s"] - process["first_seen_s"])
    return {
        "train_message_median_s": _median(walls.get("train", [])),
        "train_message_walls_s": list(walls.get("train", [])),
        "train_process_lifetime_median_s": _median(lifetimes.get("train message", [])),
        "any_message_median_s": _median(every),
        "message_median_s": {kind: _median(values) for kind, values in walls.items()},
        "clientapp_peak_MiB": max((p.get("VmHWM_kB", 0) / MiB for p in processes), default=None),
        "clientapp_peak_by_message_MiB": {kind: max(values) for kind, values in by_message.items()},
        "clientapp_median_by_message_MiB": {kind: float(np.median(values)) for kind, values in by_message.items()},
        "clientapp_processes": len(processes),
        "train_message_cpu_median_s": _median(cpu_by_message.get("train message", [])),
        "any_message_cpu_median_s": _median([c for values in cpu_by_message.values() for c in values]),
        "clientapp_cpu_median_by_message_s": {kind: _median(values) for kind, values in cpu_by_message.items()},
        "time_to_first_report_s": node["time_to_first_report"].get("first_report_sent"),
        "stages_s": dict(node["time_to_first_report"]),
        "load_average": node.get("load_average"),
    }


def compare(noop: dict[str, Any], ldpfed: dict[str, Any]) -> dict[str, Any]:
    """Each app's figures, ldpfed minus no-op, and whether each difference meets its goal."""
    a, b = app_figures(noop), app_figures(ldpfed)
    keys = (
        "train_message_median_s", "any_message_median_s", "clientapp_peak_MiB", "time_to_first_report_s",
        "train_message_cpu_median_s", "any_message_cpu_median_s", "train_process_lifetime_median_s",
    )
    difference = {key: _minus(b[key], a[key]) for key in keys}
    difference["clientapp_peak_by_message_MiB"] = {
        kind: _minus(value, a["clientapp_peak_by_message_MiB"].get(kind)) for kind, value in b["clientapp_peak_by_message_MiB"].items()
    }
    goals = {
        key: {"goal": limit, "added": difference[key], "met": difference[key] is not None and difference[key] <= limit}
        for key, limit in GOALS.items()
    }
    return {"noop": a, "ldpfed": b, "difference": difference, "goals": goals}


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    """The comparison as table lines: no-op, ldpfed, ldpfed minus no-op, the goal and whether it is met."""
    a, b, goals = comparison["noop"], comparison["ldpfed"], comparison["goals"]
    rows = [
        ("train message, received to answered (median)", "train_message_median_s", "s", 2),
        ("flwr-clientapp peak VmHWM (largest process)", "clientapp_peak_MiB", "MiB", 0),
        ("time to first report from launch", "time_to_first_report_s", "s", 1),
    ]
    lines = [f"  {'':<52}{'no-op':>10}{'ldpfed':>10}{'added':>10}{'goal':>10}  met"]
    for text, key, unit, digits in rows:
        goal = goals[key]
        cells = [_fmt(a[key], digits), _fmt(b[key], digits), _fmt(goal["added"], digits, sign=True), f"<= {goal['goal']:g}"]
        lines.append(f"  {text + ' (' + unit + ')':<52}" + "".join(f"{c:>10}" for c in cells) + f"  {'yes' if goal['met'] else 'NO'}")
    lines.append(
        f"  {'any message, received to answered (median, s)':<52}{_fmt(a['any_message_median_s'], 2):>10}{_fmt(b['any_message_median_s'], 2):>10}"
        f"{_fmt(comparison['difference']['any_message_median_s'], 2, sign=True):>10}"
    )
    for text, key in (
        ("train message process, CPU s (median)", "train_message_cpu_median_s"),
        ("any message process, CPU s (median)", "any_message_cpu_median_s"),
        ("train message process, seen alive for (median, s)", "train_process_lifetime_median_s"),
    ):
        lines.append(
            f"  {text:<52}{_fmt(a.get(key), 2):>10}{_fmt(b.get(key), 2):>10}{_fmt(comparison['difference'].get(key), 2, sign=True):>10}"
        )
    for kind, value in comparison["difference"]["clientapp_peak_by_message_MiB"].items():
        lines.append(
            f"  {'  peak VmHWM serving ' + kind + ' (MiB)':<52}{_fmt(a['clientapp_peak_by_message_MiB'].get(kind), 0):>10}"
            f"{_fmt(b['clientapp_peak_by_message_MiB'][kind], 0):>10}{_fmt(value, 0, sign=True):>10}"
        )
    for name, figures in (("no-op", a), ("ldpfed", b)):
        load = figures.get("load_average") or {}
        lines.append(
            f"  load average while serving {name}: {' '.join(load.get('before', ['?']))} before launch, "
            f"{' '.join(load.get('after', ['?']))} after the run"
        )
    return lines


def pooled(comparisons: list[dict[str, Any]]) -> dict[str, Any]:
    """The train messages of several pairs pooled: each app's median and mean received-to-answered seconds over all
    of them, ldpfed minus no-op, and the per-pair medians. A reply waits for the SuperNode's 0.5 s poll, so one pair's
    median of 5 lands on one poll or the next for either app; pooling pairs run at different moments averages the
    phase out."""
    walls = {app: [w for c in comparisons for w in c[app]["train_message_walls_s"]] for app in ("noop", "ldpfed")}
    medians = {app: _median(values) for app, values in walls.items()}
    means = {app: float(np.mean(values)) if values else None for app, values in walls.items()}
    added = _minus(medians["ldpfed"], medians["noop"])
    return {
        "pairs": len(comparisons),
        "train_messages": {app: len(values) for app, values in walls.items()},
        "median_s": medians,
        "mean_s": means,
        "added_median_s": added,
        "added_mean_s": _minus(means["ldpfed"], means["noop"]),
        "goal_s": GOALS["train_message_median_s"],
        "met": added is not None and added <= GOALS["train_message_median_s"],
        "per_pair_added_median_s": [c["difference"]["train_message_median_s"] for c in comparisons],
    }


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _minus(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None else float(x - y)


def _fmt(value: float | None, digits: int, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    """``python -m ldpfed.simulations.benchmarks.device_costs.compare REPORT...``: the train messages of several
    ``--supernode`` reports pooled (:func:`pooled`), printed and optionally written as JSON."""
    parser = argparse.ArgumentParser(description="pool the train messages of several no-op / ldpfed SuperNode pairs")
    parser.add_argument("reports", nargs="+", type=Path, help="JSON reports of device_costs --supernode (with the no-op)")
    parser.add_argument("--out", type=Path, default=None, help="write the pooled figures here as JSON")
    args = parser.parse_args(argv)
    comparisons = []
    for path in args.reports:
        node = json.loads(path.read_text()).get("supernode") or {}
        if "noop" not in node:
            parser.error(f"{path} has no no-op pair (run device_costs --supernode without --skip-noop)")
        comparisons.append(compare(node["noop"], node))
    figures = {"reports": [str(p) for p in args.reports], **pooled(comparisons)}
    print(
        f"{figures['pairs']} pairs, {figures['train_messages']['noop']} / {figures['train_messages']['ldpfed']} train messages "
        f"(no-op / ldpfed): median {_fmt(figures['median_s']['noop'], 2)} / {_fmt(figures['median_s']['ldpfed'], 2)} s, "
        f"added {_fmt(figures['added_median_s'], 2, sign=True)} s (goal <= {figures['goal_s']:g}: {'met' if figures['met'] else 'NOT met'}); "
        f"mean added {_fmt(figures['added_mean_s'], 2, sign=True)} s; per pair "
        + ", ".join(_fmt(x, 2, sign=True) for x in figures["per_pair_added_median_s"])
    )
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
