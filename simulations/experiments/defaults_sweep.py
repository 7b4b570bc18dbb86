"""Defaults against a sweep of the tool's own options (issue 29, item 4).

Per dataset and epsilon, one run with the defaults (only --data, --users and --epsilon given, plus
the reductions below: public 'generated', dim 16, clip 3), one with the opt-in ``--dim auto``, and
one run per grid cell (--public, --dim, --clip); the report gives the accuracy of the defaults and
of auto, the best cell, each gap and whether it is within 3 points. Every run
is the real ServerApp and ClientApp on the in-process grid (simulations/experiments/local_run.py), local
inference, one seed. Results go to simulations/reports/defaults/results.json as each run ends;
a rerun skips the cells already there (delete a key to rerun it).

    python -m simulations.experiments.defaults_sweep                # run what is missing
    python -m simulations.experiments.defaults_sweep --report-only  # rewrite the README from results.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.experiments.local_run import run_in_process, single_threaded_blas

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
REPORT = Path(__file__).resolve().parents[1] / "reports" / "defaults"
DATASETS = {
    "SST-2": "sst2",
    "SNIPS": "snips",
    "AG News": "ag_news:train=alps_train10k,test=test",
    "TweetEval sentiment": "tweeteval/sentiment:train=test,test=dev",
}
"""Dataset name -> spec under the data folder. TweetEval sentiment ships no train file: its 12,284-record
test file is the training split and its 2,000-record dev file the evaluation split."""
GRID: dict[str, dict[str, Any]] = {
    "defaults": {},
    "auto": {"dim": "auto"},
    "public none, dim 0": {"public": "none", "dim": 0},
    "generated, dim 8": {"dim": 8},
    "generated, dim 64": {"dim": 64},
    "generated, dim 8, clip 1": {"dim": 8, "clip": 1.0},
    "generated, dim 16, clip 1": {"dim": 16, "clip": 1.0},
    "generated, dim 32, clip 1": {"dim": 32, "clip": 1.0},
    "generated, dim 64, clip 1": {"dim": 64, "clip": 1.0},
    "generated, dim 128, clip 1": {"dim": 128, "clip": 1.0},
    "generated, dim 384, clip 1": {"dim": 384, "clip": 1.0},
}
"""Cells run on every dataset at the first epsilon; the 'defaults' cell gives only the base options (the
CLI defaults: public 'generated', dim 16, clip 3), 'auto' adds the opt-in --dim auto.
No '--public none --dim 0 --clip 1' cell: MiniLM's encodings have L2 norms near 5.7, so every record is
clipped at both 1 and 3 and the noise scales with the clip: the same run up to scale (measured on
SST-2 at epsilon 8, the same accuracy to the last digit)."""
# No other mechanism: the Gaussian ones differ only in calibration ('gaussian' is calibrated exactly in GDP,
# the least noise of the three for one release), and a Laplace cell (SST-2, epsilon 8, dim 16) had not
# finished its one round after 5 minutes here.
LATER_CELLS = ("defaults", "auto", "public none, dim 0", "generated, dim 8", "generated, dim 64")
"""The cells run at the later epsilons (fewer, for time)."""
OTHER_PUBLIC = {"SST-2": ("mr", "public mr")}
"""Public data from the task's domain that the package does not ship (reported apart from the goal)."""
GOAL = 0.03


def cells(
    datasets: list[str], epsilons: list[float], only: list[str] | None = None
) -> list[tuple[str, float, str, dict[str, Any]]]:
    """(dataset, epsilon, cell name, options) in run order: every dataset at the first epsilon first;
    with ``only``, just the cells of those names."""
    out = []
    for epsilon in epsilons:
        for name in datasets:
            grid = {c: o for c, o in GRID.items() if epsilon == epsilons[0] or c in LATER_CELLS}
            if name in OTHER_PUBLIC and epsilon == epsilons[0]:
                folder, label = OTHER_PUBLIC[name]
                public = str(SHARED / folder)
                grid |= {f"{label}, dim auto": {"public": public, "dim": "auto"}, f"{label}, dim 16": {"public": public}}
            out += [(name, epsilon, cell, options) for cell, options in grid.items() if not only or cell in only]
    return out


def key(name: str, epsilon: float, cell: str) -> str:
    """The results.json key of one run."""
    return f"{name} | eps {epsilon:g} | {cell}"


def main(argv: list[str] | None = None) -> int:
    """Run the missing cells, then write the README."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, default=SHARED)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--epsilons", type=float, nargs="+", default=[8.0, 1.0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--train-limit", type=int, default=8000, help="seeded sample of each training split (0: all)")
    parser.add_argument("--out", type=Path, default=REPORT)
    parser.add_argument("--cells", nargs="+", default=None, help="run only the cells of these names (default: all)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    command = " ".join(["python -m simulations.experiments.defaults_sweep", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    results_path = args.out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.is_file() else {}
    base = {"users": args.users, "train_limit": args.train_limit}
    if not args.report_only:
        single_threaded_blas()
        for name, epsilon, cell, options in cells(args.datasets, args.epsilons, args.cells):
            if key(name, epsilon, cell) in results:
                continue
            values = {"data": str(args.data_root / DATASETS[name]), "epsilon": epsilon, **base, **options}
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="ldpfed-defaults-") as temp:
                _, summary = run_in_process({**values, "out": str(Path(temp) / "run")})
                config = json.loads((Path(temp) / "run" / "config.json").read_text())
            results[key(name, epsilon, cell)] = {
                "options": options,
                "accuracy": summary["accuracy_local"],
                "accuracy_nonprivate": summary.get("accuracy_nonprivate"),
                "epsilon_sentence_max": summary.get("epsilon_sentence_max"),
                "dim_used": config["dim"],
                "dim_auto": summary.get("dim_auto"),
                "seconds": round(time.monotonic() - started, 1),
                "command": command,
            }
            args.out.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{key(name, epsilon, cell)}: {summary['accuracy_local']:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "README.md").write_text(report(results, args))
    print((args.out / "README.md").read_text())
    return 0


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    """Per dataset and epsilon: the defaults (dim 16) and --dim auto against the best cell of the sweep."""
    lines = [
        "# Defaults against a sweep of the tool's options (issue 29, item 4)",
        "",
        "Commands that made results.json (resumable: finished cells are skipped; run from the checkout with",
        "PYTHONPATH=$PWD; `--report-only` rewrites this file):",
        "",
        "```bash",
        *dict.fromkeys(r.get("command", "python -m simulations.experiments.defaults_sweep") for r in results.values()),
        "```",
        "",
        *(
            ["The cell names in these commands are those the runs were made under: their 'defaults' ran while the "
             "default was --dim auto (now the 'auto' cell) and their 'generated, dim 16' is the 'defaults' cell now "
             "(the same options as today's defaults); results.json keeps each such run's 'relabelled' note.", ""]
            if any("relabelled" in r for r in results.values()) else []
        ),
        f"Reduced setting (2 shared CPU cores): {args.users} users (dirichlet:0.5 partition, the default), a seeded "
        f"{args.train_limit:,} records of each training split (0: all) as the reports, one release per record "
        "(worst-case sentence-level epsilon, delta 1e-5), one seed, MiniLM, local inference on the whole "
        "evaluation split. 'defaults' gives only --data, --users and --epsilon (and --train-limit): public "
        "'generated', dim 16, clip 3. 'auto' adds the opt-in `--dim auto`. The gaps compare each with the best "
        "cell using the data the package ships (public 'generated' or none); rows with other public data "
        "(e.g. MR for SST-2) are shown apart.",
        "",
        "| dataset | epsilon | defaults (dim 16) | gap | auto (dim chosen) | gap | best cell (shipped data) | its accuracy "
        "| within 3 points: defaults / auto | best with other public data |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    gaps: dict[tuple[float, str], dict[str, float]] = {}
    for epsilon in args.epsilons:
        for name in args.datasets:
            rows = {k.split(" | ")[2]: v for k, v in results.items() if k.startswith(f"{name} | eps {epsilon:g} | ")}
            shipped = {c: r for c, r in rows.items() if not any(c.startswith(label) for _, label in OTHER_PUBLIC.values())}
            if not shipped:
                lines.append(f"| {name} | {epsilon:g} | not run | | | | | | | |")
                continue
            other = {c: r for c, r in rows.items() if c not in shipped}
            best = max(shipped, key=lambda c: (shipped[c]["accuracy"], c not in ("defaults", "auto")))  # ties name a grid cell
            found = gaps.setdefault((epsilon, name), {})
            cells_text = []
            for cell in ("defaults", "auto"):
                if cell in rows:
                    found[cell] = shipped[best]["accuracy"] - rows[cell]["accuracy"]
                    cells_text += [f"{rows[cell]['accuracy']:.3f} ({rows[cell]['dim_used']})", f"{found[cell]:+.3f}"]
                else:
                    cells_text += ["not run", ""]
            within = " / ".join(("yes" if found[c] <= GOAL else "no") if c in found else "-" for c in ("defaults", "auto"))
            extra = max(other.items(), key=lambda kv: kv[1]["accuracy"], default=None)
            lines.append(
                f"| {name} | {epsilon:g} | " + " | ".join(cells_text) + f" | {best} | {shipped[best]['accuracy']:.3f} | "
                f"{within} | " + (f"{extra[1]['accuracy']:.3f} ({extra[0]})" if extra else "-") + " |"
            )
    lines += _verdict(results, args, gaps)
    lines += ["", "Every cell (accuracy; dimension used):", ""]
    seen = {k.split(" | ")[2] for k in results}
    names = [c for c in GRID if c in seen] + sorted(seen - set(GRID))
    header = [f"{n} eps {e:g}" for e in args.epsilons for n in args.datasets]
    lines += ["| cell | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for cell in names:
        row = []
        for epsilon in args.epsilons:
            for name in args.datasets:
                r = results.get(key(name, epsilon, cell))
                row.append("" if r is None else f"{r['accuracy']:.3f} ({r['dim_used']})")
        lines.append(f"| {cell} | " + " | ".join(row) + " |")
    choices = [(k, v["dim_auto"]) for k, v in results.items() if v.get("dim_auto")]
    if choices:
        lines += ["", "What --dim auto simulated on the public data (held-out public accuracy by dimension; 0: none):", ""]
        for k, choice in choices:
            accuracy = ", ".join(f"{d}: {a:.3f}" for d, a in sorted(choice["accuracy"].items(), key=lambda da: int(da[0])))
            simulated = choice.get("simulated", choice["reports"])
            lines.append(
                f"- {k}: chose {choice['dim']} for {choice['reports']:,} planned reports "
                f"({simulated:,} simulated; {accuracy}); {choice['reason']}"
            )
    non_private = {k.split(" | ")[0]: v["accuracy_nonprivate"] for k, v in results.items() if k.endswith("public none, dim 0")}
    if non_private:
        lines += ["", "Non-private ceiling (clean encodings, no projection): "
                  + ", ".join(f"{n} {a:.3f}" for n, a in non_private.items() if a is not None) + "."]
    return "\n".join(lines) + "\n"


def _verdict(
    results: dict[str, Any], args: argparse.Namespace, gaps: dict[tuple[float, str], dict[str, float]]
) -> list[str]:
    """The gaps at the first epsilon in one sentence each for the defaults and auto, whether either meets the
    goal on every dataset, and how the clip changes the defaults' accuracy."""
    epsilon = args.epsilons[0]
    lines = [""]
    met = {}
    for cell, label in (("defaults", "With the defaults (dim 16)"), ("auto", "With `--dim auto`")):
        found = {name: gaps.get((epsilon, name), {}).get(cell) for name in args.datasets}
        parts = [f"{name} {gap * 100:+.1f}" if gap is not None else f"{name} not run" for name, gap in found.items()]
        met[cell] = all(gap is not None and gap <= GOAL for gap in found.values())
        lines.append(f"{label}, the gaps to the best cell at epsilon {epsilon:g} are (points): {', '.join(parts)}.")
    if not any(met.values()):
        lines.append(f"Neither meets the issue's goal of {GOAL * 100:g} points on all {len(args.datasets)} datasets.")
    else:
        lines.append("Within the goal on every dataset: " + ", ".join(c for c, ok in met.items() if ok) + ".")
    lines.append(
        "Why: one fixed dimension cannot suit tasks whose best projection differs, and `--dim auto` sees public data "
        "only, so at the same noise and report count it makes the same choice on every task (its simulations below), "
        "while the tasks differ in whether their signal lies in the public data's leading directions. Neither "
        "chooses the clip."
    )
    clip = []
    for name in args.datasets:
        one, three = results.get(key(name, epsilon, "generated, dim 16, clip 1")), results.get(key(name, epsilon, "defaults"))
        if one and three:
            clip.append(f"{name} {one['accuracy']:.3f} against {three['accuracy']:.3f}")
    if clip:
        lines.append(f"The clip matters once projected: 'generated, dim 16, clip 1' against the defaults (clip 3): {'; '.join(clip)}.")
    return lines

if __name__ == "__main__":
    raise SystemExit(main())
