"""Wall time per run of a study, each run alone against the shared worker, and each run's hash (issue 41, item 2).

Each step is ``NAME=RUNNER:FOLDER``: the study run into FOLDER with ``ldpfed study --runner RUNNER`` (the machine's
load read before and after), or with RUNNER ``done`` a folder some earlier command filled (its runs' times are read
from their markers). Per step: the runs complete, the wall time per run (each run's marker: its own ``ldpfed
simulate`` process, or its turn in the shared worker, the worker's start included in the first run's), the step's
wall time, and the hash of each run's results (simulations/benchmarks/run_hashes.py: ledgers and per-round metrics;
and of its summary): the runs two steps share must hash the same.

Usage, from the repository root::

    python -m ldpfed.simulations.benchmarks.bench_study CONFIG --step before=alone:DIR1 --step after=shared:DIR2 \\
        --out simulations/reports/scale/study_shared.json

writes the JSON report and the Markdown beside it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ldpfed.simulations.benchmarks.run_hashes import run_directory_hash, summary_hash
from ldpfed.simulations.study import MARKER, load_study, run_state


def load_average() -> float:
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def collect(config: Path, folder: Path) -> dict[str, dict[str, Any]]:
    """Every complete run of the study in ``folder``: its marker's seconds and its hashes."""
    runs = {}
    for run in load_study(config).runs():
        directory = folder / run.name
        if run_state(directory, run) != "complete":
            continue
        marker = json.loads((directory / MARKER).read_text())
        runs[run.name] = {
            "seconds": marker["seconds"], "hash": run_directory_hash(directory), "summary_hash": summary_hash(directory),
        }
    return runs


def step(config: Path, name: str, spec: str) -> dict[str, Any]:
    """Run (or read) one step ``RUNNER:FOLDER``."""
    runner, _, folder = spec.partition(":")
    if runner not in ("alone", "shared", "done") or not folder:
        raise SystemExit(f"--step {name}={spec}: expected NAME=alone|shared|done:FOLDER")
    result: dict[str, Any] = {"name": name, "runner": runner, "folder": folder}
    if runner != "done":
        command = [sys.executable, "-P", "-m", "ldpfed.simulations.cli", "study", str(config), "--out", folder,
                   "--runner", runner]
        result.update(command=shlex.join(["ldpfed", *command[4:]]), load_before=load_average(),
                      started=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        result.update(wall_seconds=time.monotonic() - began, load_after=load_average(), exit=done.returncode)
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
    runs = collect(config, Path(folder))
    seconds = [run["seconds"] for run in runs.values()]
    result.update(
        runs=runs, complete=len(runs),
        seconds_per_run_mean=statistics.fmean(seconds) if seconds else None,
        seconds_per_run_median=statistics.median(seconds) if seconds else None,
    )
    return result


def compare(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs each later step shares with the first, and whether their hashes agree."""
    first = steps[0]
    out = {}
    for other in steps[1:]:
        common = sorted(set(first["runs"]) & set(other["runs"]))
        differ = [n for n in common if (first["runs"][n]["hash"], first["runs"][n]["summary_hash"])
                  != (other["runs"][n]["hash"], other["runs"][n]["summary_hash"])]
        ratio = None
        if first["seconds_per_run_mean"] and other["seconds_per_run_mean"]:
            ratio = first["seconds_per_run_mean"] / other["seconds_per_run_mean"]
        out[other["name"]] = {"common": len(common), "identical": len(common) - len(differ), "differ": differ,
                              "speedup_per_run": ratio}
    return out


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown."""
    lines = [f"# Study wall time per run: each run alone against one shared worker ({report['created']})", "",
             f"Study `{report['config']}`: {report['runs']} runs. Created by `{report['command']}` on "
             f"{report['cpus']} CPUs. The load is the machine's 1-minute load average (shared with other work).", "",
             "| step | runner | runs complete | s per run (mean) | s per run (median) | step wall s | load before / after |",
             "|---|---|---|---|---|---|---|"]
    for s in report["steps"]:
        wall = f"{s['wall_seconds']:.0f}" if "wall_seconds" in s else "-"
        load = f"{s['load_before']:.2f} / {s['load_after']:.2f}" if "load_before" in s else s.get("load", "-")
        mean, median = s["seconds_per_run_mean"], s["seconds_per_run_median"]
        lines.append(f"| {s['name']} | {s['runner']} | {s['complete']} | {mean:.1f} | {median:.1f} | {wall} | {load} |"
                     if mean is not None else f"| {s['name']} | {s['runner']} | 0 | - | - | {wall} | {load} |")
    lines.append("")
    for name, c in report["comparison"].items():
        ratio = f"{c['speedup_per_run']:.1f}x" if c["speedup_per_run"] else "-"
        lines.append(f"- {name} against {report['steps'][0]['name']}: {ratio} lower wall time per run; "
                     f"{c['identical']} of {c['common']} common runs hash the same"
                     + (f" (differ: {', '.join(c['differ'])})" if c["differ"] else ""))
    for s in report["steps"]:
        if "command" in s:
            lines.append(f"- {s['name']}: `{s['command']}`")
    lines += ["", "Per run: seconds and hash (ledgers and metrics, run_hashes.run_directory_hash) in each step:", "",
              "| run | " + " | ".join(f"{s['name']} s | {s['name']} hash" for s in report["steps"]) + " |",
              "|---|" + "---|---|" * len(report["steps"])]
    names = sorted({n for s in report["steps"] for n in s["runs"]})
    for n in names:
        cells = []
        for s in report["steps"]:
            run = s["runs"].get(n)
            cells += [f"{run['seconds']:.1f}", run["hash"][:12]] if run else ["-", "-"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--step", action="append", required=True, metavar="NAME=RUNNER:FOLDER")
    parser.add_argument("--load", action="append", default=[], metavar="NAME=TEXT",
                        help="the load during a 'done' step, as text (read when it ran)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    loads = dict(item.split("=", 1) for item in args.load)
    steps = []
    for item in args.step:
        name, _, spec = item.partition("=")
        steps.append(step(args.config, name, spec))
        if name in loads:
            steps[-1]["load"] = loads[name]
    report = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", "ldpfed.simulations.benchmarks.bench_study", *(argv or sys.argv[1:])]),
        "config": str(args.config), "runs": len(load_study(args.config).runs()), "cpus": os.cpu_count(),
        "steps": steps, "comparison": compare(steps),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
