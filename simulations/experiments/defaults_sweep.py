"""Defaults against a sweep of the tool's own options (issue 29, item 4).

Per dataset and epsilon, one run with the defaults (only --data, --users and --epsilon given, plus
the reductions below: public 'generated'; the Gaussian's dim by epsilon, class count and record count, and clip 1), one with the defaults
before them (dim 16, clip 3), one with the opt-in ``--dim auto`` (at clip 3), and one run per grid cell
(--public, --dim, --clip); the report gives the accuracy of these three, the best cell, each gap and whether
it is within 3 points, and every cell run on all datasets taken as a fixed default (its largest gap). Every run
is the real ServerApp and ClientApp on the in-process grid (simulations/experiments/local_run.py), local
inference, one seed. Results go to simulations/reports/defaults/results.json as each run ends;
a rerun skips the cells already there (delete a key to rerun it). The projected norms the clip meets
(public and task records) go to norms.json beside it, measured once when missing.

    python -m ldpfed.simulations.experiments.defaults_sweep                # run what is missing
    python -m ldpfed.simulations.experiments.defaults_sweep --report-only  # rewrite the README from results.json
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

import numpy as np

from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.simulations.experiments.local_run import SHARED, run_in_process, single_threaded_blas, sweep_parser

REPORT = Path(__file__).resolve().parents[1] / "reports" / "defaults"
DATASETS = {
    "SST-2": "sst2",
    "SNIPS": "snips",
    "AG News": "ag_news:train=alps_train10k,test=test",
    "TweetEval sentiment": "tweeteval/sentiment:train=test,test=dev",
}
"""Dataset name -> spec under the data folder. TweetEval sentiment ships no train file: its 12,284-record
test file is the training split and its 2,000-record dev file the evaluation split."""
OLD_DEFAULTS = "old defaults (dim 16, clip 3)"
"""The cell of the defaults until the Gaussian's dim by epsilon and clip 1 became them."""
GRID: dict[str, dict[str, Any]] = {
    "defaults": {},
    OLD_DEFAULTS: {"dim": 16, "clip": 3.0},
    "auto": {"dim": "auto", "clip": 3.0},
    "public none, dim 0": {"public": "none", "dim": 0, "clip": 3.0},
    "generated, dim 8": {"dim": 8, "clip": 3.0},
    "generated, dim 64": {"dim": 64, "clip": 3.0},
    "generated, dim 8, clip 1": {"dim": 8, "clip": 1.0},
    "generated, dim 16, clip 1": {"dim": 16, "clip": 1.0},
    "generated, dim 32, clip 1": {"dim": 32, "clip": 1.0},
    "generated, dim 64, clip 1": {"dim": 64, "clip": 1.0},
    "generated, dim 128, clip 1": {"dim": 128, "clip": 1.0},
    "generated, dim 384, clip 1": {"dim": 384, "clip": 1.0},
}
"""Cells run on every dataset at the first epsilon; the 'defaults' cell gives only the base options (the
CLI defaults: public 'generated', the Gaussian's dim by epsilon, class count and record count, clip 1), 'auto' the opt-in --dim auto at clip 3
(the clip when it ran); the cells without a clip in their name ran at clip 3.
No '--public none --dim 0 --clip 1' cell: MiniLM's encodings have L2 norms near 5.7, so every record is
clipped at both 1 and 3 and the noise scales with the clip: the same run up to scale (measured on
SST-2 at epsilon 8, the same accuracy to the last digit)."""
# No other mechanism: the Gaussian ones differ only in calibration ('gaussian' is calibrated exactly in GDP,
# the least noise of the three for one release), and a Laplace cell (SST-2, epsilon 8, dim 16) had not
# finished its one round after 5 minutes here.
LATER_CELLS = (
    "defaults", OLD_DEFAULTS, "auto", "public none, dim 0", "generated, dim 8", "generated, dim 64",
    "generated, dim 8, clip 1", "generated, dim 16, clip 1", "generated, dim 32, clip 1", "generated, dim 64, clip 1",
    "generated, dim 128, clip 1",
)
"""The cells run at the later epsilons (fewer, for time): the defaults, the old defaults, auto, no projection, dim 8 and 64 at clip 3
and dim 8 to 128 at clip 1 (not dim 384 at clip 1: below no projection on all four tasks at epsilon 8)."""
NORM_DIMS = (8, 16, 32, 64, 128)
NORM_QUANTILES = (0.05, 0.5, 0.95)
OTHER_PUBLIC = {"SST-2": ("mr", "public mr")}
"""Public data from the task's domain that the package does not ship (reported apart from the goal)."""
GOAL = 0.03
COMPARED = ("defaults", OLD_DEFAULTS, "auto")
"""The cells the report sets against the best one."""


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
    parser = sweep_parser(__doc__, list(DATASETS), REPORT)
    parser.add_argument("--cells", nargs="+", default=None, help="run only the cells of these names (default: all)")
    args = parser.parse_args(argv)
    command = " ".join(["python -m ldpfed.simulations.experiments.defaults_sweep", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
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
    norms_path = args.out / "norms.json"
    if not norms_path.is_file():
        norms_path.write_text(json.dumps(projected_norms(args), indent=1) + "\n")
    (args.out / "README.md").write_text(report(results, args, json.loads(norms_path.read_text())))
    print((args.out / "README.md").read_text())
    return 0


def projected_norms(args: argparse.Namespace, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Quantiles (NORM_QUANTILES) of the L2 norms after the projection fitted on the default public data, per
    dimension (NORM_DIMS): of the public records themselves (what a clip set from public norms would read) and
    of each task's training records, the same seeded --train-limit sample a run takes (what the clip meets)."""
    from ldpfed.fed.data.corpus import generate_public_corpus
    from ldpfed.fed.data.loaders import load_dataset
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.encoders.projection import PCAProjection
    from ldpfed.fed.runtime.assets import PUBLIC_GENERATED_SIZE, default_cache_dir
    from ldpfed.fed.configuration.run_spec import RunSpec

    cache = default_cache_dir(RunSpec.from_mapping({"data": "generated"}))
    encoder = make_encoder("minilm")
    public = encode_cached(encoder, generate_public_corpus(PUBLIC_GENERATED_SIZE, seed=seed), cache)
    rows = {"public 'generated'": public}
    for name in args.datasets:
        train = load_dataset(str(args.data_root / DATASETS[name]), "train")
        if args.train_limit and args.train_limit < len(train):
            train = train.subset(np.sort(np.random.default_rng(seed).choice(len(train), args.train_limit, replace=False)))
        rows[name] = encode_cached(encoder, train, cache)
    out: dict[str, dict[str, list[float]]] = {}
    for dim in NORM_DIMS:
        projection = PCAProjection.fit(public, dim)
        for name, x in rows.items():
            norms = np.linalg.norm(projection.apply(x), axis=1)
            out.setdefault(name, {})[str(dim)] = [round(float(q), 3) for q in np.quantile(norms, NORM_QUANTILES)]
    return out


def fixed_rules(results: dict[str, Any], epsilon: float, datasets: list[str]) -> list[tuple[float, str, dict[str, float]]]:
    """Every cell (shipped data) run on all ``datasets`` at ``epsilon`` as a fixed default: (its largest gap to the
    best cell, the cell, its gap per dataset), smallest largest gap first."""
    best: dict[str, float] = {}
    by_cell: dict[str, dict[str, float]] = {}
    for k, r in results.items():
        name, eps, cell = k.split(" | ")
        if eps != f"eps {epsilon:g}" or name not in datasets or any(cell.startswith(l) for _, l in OTHER_PUBLIC.values()):
            continue
        best[name] = max(best.get(name, 0.0), r["accuracy"])
        by_cell.setdefault(cell, {})[name] = r["accuracy"]
    rules = [
        (max(gaps.values()), cell, gaps)
        for cell, accuracy in by_cell.items() if len(accuracy) == len(datasets)
        for gaps in [{n: best[n] - accuracy[n] for n in datasets}]
    ]
    return sorted(rules, key=lambda rule: rule[0])


def report(results: dict[str, Any], args: argparse.Namespace, norms: dict[str, dict[str, list[float]]]) -> str:
    """Per dataset and epsilon: the defaults, the old defaults and --dim auto against the best cell of the sweep."""
    lines = [
        "# Defaults against a sweep of the tool's options (issue 29, item 4)",
        "",
        "Commands that made results.json (resumable: finished cells are skipped; run from the checkout with",
        "PYTHONPATH=$PWD; `--report-only` rewrites this file):",
        "",
        "```bash",
        *dict.fromkeys(r.get("command", "python -m ldpfed.simulations.experiments.defaults_sweep") for r in results.values()),
        "```",
        "",
        *(
            ["The cell names in these commands are those the runs were made under: their 'defaults' ran while the "
             "default was --dim auto (now the 'auto' cell), their 'generated, dim 16' became 'defaults' and then, when "
             f"the defaults changed, '{OLD_DEFAULTS}'; results.json keeps each such run's 'relabelled' note.", ""]
            if any("relabelled" in r for r in results.values()) else []
        ),
        f"Reduced setting (2 shared CPU cores): {args.users} users (dirichlet:0.5 partition, the default), a seeded "
        f"{args.train_limit:,} records of each training split (0: all) as the reports, one release per record "
        "(worst-case sentence-level epsilon, delta 1e-5), one seed, MiniLM, local inference on the whole "
        "evaluation split. 'defaults' gives only --data, --users and --epsilon (and --train-limit): public "
        "'generated', the Gaussian's dim by epsilon, class count and record count ("
        f"{GaussianRandomizer.default_dim_text()}) and clip 1; 'old defaults' "
        "dim 16 and clip 3; 'auto' the opt-in `--dim auto` at clip 3. The gaps compare each with the best "
        "cell using the data the package ships (public 'generated' or none); rows with other public data "
        "(e.g. MR for SST-2) are shown apart.",
        "",
        "| dataset | epsilon | defaults (dim) | gap | old defaults (dim 16, clip 3) | gap | auto (dim chosen) | gap "
        "| best cell (shipped data) | its accuracy | within 3 points: defaults / old / auto | best with other public data |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gaps: dict[tuple[float, str], dict[str, float]] = {}
    for epsilon in args.epsilons:
        for name in args.datasets:
            rows = {k.split(" | ")[2]: v for k, v in results.items() if k.startswith(f"{name} | eps {epsilon:g} | ")}
            shipped = {c: r for c, r in rows.items() if not any(c.startswith(label) for _, label in OTHER_PUBLIC.values())}
            if not shipped:
                lines.append(f"| {name} | {epsilon:g} | not run | | | | | | | | | |")
                continue
            other = {c: r for c, r in rows.items() if c not in shipped}
            best = max(shipped, key=lambda c: (shipped[c]["accuracy"], c not in COMPARED))  # ties name a grid cell
            found = gaps.setdefault((epsilon, name), {})
            cells_text = []
            for cell in COMPARED:
                if cell in rows:
                    found[cell] = shipped[best]["accuracy"] - rows[cell]["accuracy"]
                    cells_text += [f"{rows[cell]['accuracy']:.3f} ({rows[cell]['dim_used']})", f"{found[cell]:+.3f}"]
                else:
                    cells_text += ["not run", ""]
            within = " / ".join(("yes" if found[c] <= GOAL else "no") if c in found else "-" for c in COMPARED)
            extra = max(other.items(), key=lambda kv: kv[1]["accuracy"], default=None)
            lines.append(
                f"| {name} | {epsilon:g} | " + " | ".join(cells_text) + f" | {best} | {shipped[best]['accuracy']:.3f} | "
                f"{within} | " + (f"{extra[1]['accuracy']:.3f} ({extra[0]})" if extra else "-") + " |"
            )
    lines += _verdict(results, args, gaps)
    lines += _defaults_as_cells(results, args)
    if (args.out / "seeds.md").is_file():
        lines += ["", "One seed on 8,000 records spreads by 1 to 5 points: the defaults against the clip-1 cells over several "
                  "seeds on every record, with the same apps, are in seeds.md beside this file "
                  "(simulations/experiments/defaults_seeds.py), and offline over 5 and 10 seeds and on five held-out tasks "
                  "in default_rule.md (simulations/experiments/default_rule.py)."]
    if (args.out / "pilot.md").is_file():
        lines += ["", "A pilot of the users' own charged reports choosing the dimension (the task's statistics from a share "
                  "of the releases, noise-corrected) was tested offline over several seeds and not built: pilot.md beside this "
                  "file (simulations/experiments/pilot_dim.py)."]
    if (args.out / "broad_corpus.md").is_file():
        lines += ["", "A projection fitted on a broad public corpus of real sentences (none from these tasks or their sources) "
                  "was tested offline over several seeds and for real at dims 32 and 64, and not shipped: broad_corpus.md beside "
                  "this file (simulations/experiments/broad_corpus.py)."]
    lines += _norms(norms, args.train_limit)
    seen = {k.split(" | ")[2] for k in results}
    names = [c for c in GRID if c in seen] + sorted(seen - set(GRID))
    for epsilon in args.epsilons:
        lines += ["", f"Every cell at epsilon {epsilon:g} (accuracy; dimension used):", ""]
        lines += ["| cell | " + " | ".join(args.datasets) + " |", "|---" * (len(args.datasets) + 1) + "|"]
        for cell in names:
            row = [results.get(key(name, epsilon, cell)) for name in args.datasets]
            if any(row):
                lines.append(f"| {cell} | " + " | ".join("" if r is None else f"{r['accuracy']:.3f} ({r['dim_used']})" for r in row) + " |")
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
    """Per epsilon: the gaps of the defaults and of auto, whether either meets the goal on every dataset, the
    fixed cells with the smallest largest gap (each a candidate default), and how the clip changes the defaults."""
    lines = []
    for epsilon in args.epsilons:
        lines.append("")
        met = {}
        for cell, label in zip(COMPARED, ("With the defaults (dim by epsilon, classes and records, clip 1)", "With the old defaults (dim 16, clip 3)",
                                          "With `--dim auto` (clip 3)")):
            found = {name: gaps.get((epsilon, name), {}).get(cell) for name in args.datasets}
            if all(gap is None for gap in found.values()):
                continue
            parts = [f"{name} {gap * 100:+.1f}" if gap is not None else f"{name} not run" for name, gap in found.items()]
            met[cell] = all(gap is not None and gap <= GOAL for gap in found.values())
            lines.append(f"{label}, the gaps to the best cell at epsilon {epsilon:g} are (points): {', '.join(parts)}.")
        if met:
            ok = [c for c, good in met.items() if good]
            lines.append(
                f"Within {GOAL * 100:g} points on all {len(args.datasets)} datasets: " + (", ".join(ok) if ok else "none") + "."
            )
        rules = fixed_rules(results, epsilon, args.datasets)
        if rules:
            within = [cell for worst, cell, _ in rules if worst <= GOAL]
            lines += [
                "",
                f"Each cell run on all {len(args.datasets)} datasets at epsilon {epsilon:g}, taken as a fixed default: its gap "
                f"to the best cell per dataset (points), largest gap first; within {GOAL * 100:g} on all: "
                + (", ".join(f"'{c}'" for c in within) if within else "none") + ".",
                "",
                "| cell as the default | largest gap | " + " | ".join(args.datasets) + " |",
                "|---" * (len(args.datasets) + 2) + "|",
                *(
                    f"| {cell} | {worst * 100:+.1f} | " + " | ".join(f"{g[n] * 100:+.1f}" for n in args.datasets) + " |"
                    for worst, cell, g in rules
                ),
                "",
                f"A rule that reads only the public data, the epsilon and the record counts makes one pick for all "
                f"{len(args.datasets)} tasks here (the same public data, epsilon and {args.train_limit:,} reports); among these "
                f"cells the best such pick at epsilon {epsilon:g} is '{rules[0][1]}', its largest gap {rules[0][0] * 100:.1f} "
                f"points ({max(rules[0][2], key=rules[0][2].get)}).",
            ]
        clip = []
        for name in args.datasets:
            one, three = results.get(key(name, epsilon, "generated, dim 16, clip 1")), results.get(key(name, epsilon, OLD_DEFAULTS))
            if one and three:
                clip.append(f"{name} {one['accuracy']:.3f} against {three['accuracy']:.3f}")
        if clip:
            lines += ["", f"The clip at epsilon {epsilon:g}: 'generated, dim 16, clip 1' against the old defaults (clip 3): {'; '.join(clip)}."]
    return lines


def _defaults_as_cells(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """Whether each 'defaults' run gave the accuracy of the grid cell with its options ('generated, dim D, clip 1'):
    the same options and seed must give the same run."""
    pairs = []
    for epsilon in args.epsilons:
        for name in args.datasets:
            run = results.get(key(name, epsilon, "defaults"))
            cell = run and results.get(key(name, epsilon, f"generated, dim {run['dim_used']}, clip 1"))
            if cell:
                pairs.append((f"{name} at epsilon {epsilon:g}", run["accuracy"], cell["accuracy"]))
    if not pairs:
        return []
    differ = [f"{what} ({a:.4f} against {b:.4f})" for what, a, b in pairs if a != b]
    return ["", f"The defaults are the grid cell 'generated, dim D, clip 1' at their dimension D, run again: equal accuracy "
            f"in {len(pairs) - len(differ)} of {len(pairs)} pairs" + (f"; they differ in {', '.join(differ)}." if differ else ".")]


def _norms(norms: dict[str, dict[str, list[float]]], train_limit: int) -> list[str]:
    """The projected norms as a table."""
    if not norms:
        return []
    head = ", ".join(f"{q:g}" for q in NORM_QUANTILES)
    return [
        "",
        f"L2 norms after the projection fitted on public 'generated' ({head} quantiles; the task rows: the run's "
        f"seeded {train_limit:,} training records (0: all); norms.json, written by the sweep when missing):",
        "",
        "| records | " + " | ".join(f"dim {d}" for d in NORM_DIMS) + " |",
        "|---" * (len(NORM_DIMS) + 1) + "|",
        *(
            f"| {name} | " + " | ".join(" / ".join(f"{v:.2f}" for v in by_dim[str(d)]) for d in NORM_DIMS) + " |"
            for name, by_dim in norms.items()
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
