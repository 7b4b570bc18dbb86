"""Offline test of a broad public corpus for the default projection (issue 29, item 4): does a PCA fitted on real
sentences from many domains, none of them an evaluated task or its source, give one fixed default (dimension and
clip) within 3 points of the best cell on SST-2, SNIPS, AG News and TweetEval sentiment?

The corpus (fixed before any task accuracy was seen): a seeded sample of distinct, non-empty first sentences from
each source in SOURCES (numpy default_rng([0, source index]) picks the records, without replacement), in SOURCES
order. 'broad' is all of it; 'broad-ship' only the sources a package may redistribute (SHIPPABLE). Excluded as
evaluated tasks or sharing their source: sst2, mr (Rotten Tomatoes, SST-2's source), snips, ag_news, tweeteval
sentiment. Each cell fits the tool's PCAProjection on the corpus's MiniLM encodings (encode_cached) and runs the
offline release of pilot_dim (the run's calibrated Gaussian from make_plan, ReportAggregator's noise-aware LDA,
5 seeds). The clip is 1, or the median L2 norm of the public corpus after the projection ('clip public median':
not a tool option; it tests whether a clip read from public norms helps). Every fixed cell of pilot_dim
(public 'generated') runs again with the same seeds, so the best cell per task is taken over all cells.

Offline, not the ServerApp: same reduced setting as pilot_dim (seeded 8,000 training records, one release per
record, worst-case epsilon, delta 1e-5, no partition, local inference on the whole evaluation split).

    python -m ldpfed.simulations.experiments.broad_corpus --epsilons 8 3 1 --seeds 5
    python -m ldpfed.simulations.experiments.broad_corpus --real-epsilons 8 3 1  # REAL_CELLS through the ServerApp, seed 0
    python -m ldpfed.simulations.experiments.broad_corpus --real-epsilons 8 --real-seeds 1 2 3 4  # SEEDED_CELLS, more seeds
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.fed.data.dataset import TextDataset
from ldpfed.fed.data.loaders import read_tsv
from ldpfed.fed.encoders.cache import encode_cached
from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.encoders.projection import PCAProjection
from ldpfed.fed.runtime.assets import default_cache_dir
from ldpfed.fed.configuration.run_spec import RunSpec
from ldpfed.simulations.experiments.defaults_sweep import DATASETS, REPORT
from ldpfed.simulations.experiments.local_run import run_in_process, single_threaded_blas, sweep_parser
from ldpfed.simulations.experiments.pilot_dim import CANDIDATES, CELLS, fixed_cell, generated_public, randomizer, task_encodings

SOURCES: tuple[tuple[str, int], ...] = (
    ("banking77/train.tsv", 3000),
    ("sms_spam/all.tsv", 2500),
    ("sentiment_labelled_sentences/amazon_cells_labelled.tsv", 900),
    ("sentiment_labelled_sentences/imdb_labelled.tsv", 900),
    ("sentiment_labelled_sentences/yelp_labelled.tsv", 900),
    ("tweeteval/emotion/train.tsv", 800),
    ("tweeteval/hate/train.tsv", 800),
    ("tweeteval/irony/train.tsv", 800),
    ("tweeteval/offensive/train.tsv", 800),
    ("tweeteval/emoji/train.tsv", 800),
    ("qqp/train.tsv", 1500),
    ("cola/train.tsv", 1500),
    ("rte/train.tsv", 750),
    ("mrpc/train.tsv", 750),
)
"""(file under the data folder, records sampled): the broad corpus's recipe, 16,700 sentences (8,200 of them shippable)."""
SHIPPABLE = frozenset(("banking77", "sms_spam", "sentiment_labelled_sentences"))
"""Sources whose licence lets a package redistribute them (SOURCES.md): BANKING77 CC BY 4.0; SMS Spam Collection
free to use with citation; Sentiment Labelled Sentences (UCI, CC BY 4.0 as usually listed, not verified here)."""
CORPORA = {"broad": None, "broad-ship": SHIPPABLE}
"""Corpus name -> the sources it keeps (None: all)."""
HALF = "broad half"
HALF_DIMS = (32, 64)
"""Dimensions run on seeded halves of 'broad' (how much the pick depends on the corpus's sample); these cells are
not candidates for the best cell."""
REAL_CELLS = {"broad, dim 32, clip 1": ("broad", 32), "broad, dim 64, clip 1": ("broad", 64),
              "broad-ship, dim 64, clip 1": ("broad-ship", 64)}
"""Cells also run for real (the ServerApp, the sweep's setting, seed 0) with --real-epsilons."""
SEEDED_CELLS = {"broad, dim 64, clip 1": ("broad", 64), "broad-ship, dim 64, clip 1": ("broad-ship", 64),
                **{f"generated, dim {d}, clip 1": ("generated", d) for d in CANDIDATES}}
"""Cells run for real at several seeds with --real-seeds: the broad candidates and the sweep's clip-1 cells."""


def broad_corpus(root: Path, keep: frozenset[str] | None = None) -> TextDataset:
    """The recipe's sample (label: the source's index in SOURCES), restricted to the sources in ``keep``."""
    texts: list[str] = []
    labels: list[int] = []
    for index, (file, size) in enumerate(SOURCES):
        distinct = list(dict.fromkeys(t.strip() for t in read_tsv(root / file)[0] if t.strip()))
        picked = np.random.default_rng([0, index]).choice(len(distinct), size, replace=False)
        if keep is None or file.split("/")[0] in keep:
            texts += [distinct[i] for i in np.sort(picked)]
            labels += [index] * size
    return TextDataset(name="broad", texts=tuple(texts), texts2=None, labels=np.array(labels),
                       label_names=tuple(file for file, _ in SOURCES))


def norms(x: np.ndarray) -> list[float]:
    """The 0.05, 0.5 and 0.95 quantiles of the rows' L2 norms."""
    return [float(q) for q in np.quantile(np.linalg.norm(x, axis=1), [0.05, 0.5, 0.95])]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every cell (pilot_dim's on public 'generated', and each corpus's) on every dataset, epsilon and seed;
    the norms after each projection."""
    cache = default_cache_dir(RunSpec.from_mapping({"data": "generated"}))
    encoder = make_encoder("minilm")
    broad = broad_corpus(args.data_root)
    encoded = encode_cached(encoder, broad, cache).astype(np.float64)
    publics = {"generated": generated_public(encoder, cache)}
    for corpus, keep in CORPORA.items():
        publics[corpus] = encoded[[keep is None or SOURCES[i][0].split("/")[0] in keep for i in broad.labels]]
    for r in range(1, args.halves + 1):
        publics[f"broad half {r}"] = encoded[np.sort(np.random.default_rng([r, 2]).choice(len(encoded), len(encoded) // 2, replace=False))]
    projections = {(p, d): PCAProjection.fit(x, d) for p, x in publics.items() for d in CANDIDATES}
    norm_table = {f"public '{p}' ({len(x):,} records)": {d: norms(projections[p, d].apply(x)) for d in CANDIDATES}
                  for p, x in publics.items()}
    cells: dict[str, tuple[str, int, float]] = {
        (f"generated, {cell}" if dim else "no projection, clip 1"): ("generated", dim, clip) for cell, (dim, clip) in CELLS.items()
    }
    for corpus in CORPORA:
        for d in CANDIDATES:
            cells[f"{corpus}, dim {d}, clip 1"] = (corpus, d, 1.0)
            cells[f"{corpus}, dim {d}, clip public median"] = (corpus, d, norm_table_median(norm_table, corpus, d))
    for r in range(1, args.halves + 1):
        cells |= {f"broad half {r}, dim {d}, clip 1": (f"broad half {r}", d, 1.0) for d in HALF_DIMS}
    results: dict[str, Any] = {}
    for name in args.datasets:
        x, y, xt, yt, c = task_encodings(name, args.data_root, args.train_limit, encoder, cache)
        feats = {key: (p.apply(x), p.apply(xt)) for key, p in projections.items()} | {("generated", 0): (x, xt)}
        for p in CORPORA:
            norm_table.setdefault(f"{name} under '{p}'", {d: norms(feats[p, d][0]) for d in CANDIDATES})
        for epsilon in args.epsilons:
            row = {cell: fixed_cell(feats[p, d], y, yt, randomizer(epsilon, clip, c), c, args.seeds)
                   for cell, (p, d, clip) in cells.items()}
            results[f"{name} | eps {epsilon:g}"] = row
            print(name, epsilon, {k: round(float(np.mean(v)), 3) for k, v in row.items()}, flush=True)
    return {"results": results, "norms": norm_table, "clips": {cell: clip for cell, (_, _, clip) in cells.items()},
            "corpus": {p: len(x) for p, x in publics.items()}}


def norm_table_median(table: dict[str, dict[int, list[float]]], corpus: str, d: int) -> float:
    """The median norm of public ``corpus`` after its projection to ``d`` dimensions, rounded to 2 decimals."""
    return round(next(v for k, v in table.items() if k.startswith(f"public '{corpus}'"))[d][1], 2)


def real_runs(args: argparse.Namespace, saved: dict[str, Any], path: Path, command: str, real_command: str) -> None:
    """Run cells for real (run_in_process: the ServerApp and ClientApps, the sweep's users and sample) with the corpus
    written as a public folder: REAL_CELLS at seed 0 into saved['real'], or with --real-seeds SEEDED_CELLS at those
    seeds into saved['real seeds']; each accuracy joins ``path`` as it finishes."""
    broad = broad_corpus(args.data_root)
    seeded = bool(args.real_seeds)
    store = saved.setdefault("real seeds" if seeded else "real", {})
    with tempfile.TemporaryDirectory(prefix="ldpfed-broad-") as temp:
        folders = {"generated": "generated"}
        for corpus, keep in CORPORA.items():
            folder = Path(temp) / corpus
            folder.mkdir()
            rows = [f"{t}\t{label}\n" for t, label in zip(broad.texts, broad.labels) if keep is None or SOURCES[label][0].split("/")[0] in keep]
            (folder / "train.tsv").write_text("sentence\tlabel\n" + "".join(rows), encoding="utf-8")
            folders[corpus] = str(folder)
        for epsilon in args.real_epsilons:
            for seed in args.real_seeds or [0]:
                for name in args.datasets:
                    for cell, (corpus, dim) in (SEEDED_CELLS if seeded else REAL_CELLS).items():
                        key = f"{name} | eps {epsilon:g} | {cell}" + (f" | seed {seed}" if seeded else "")
                        if key in store:
                            continue
                        out = Path(temp) / "run"
                        _, summary = run_in_process({
                            "data": str(args.data_root / DATASETS[name]), "epsilon": epsilon, "users": args.users, "seed": seed,
                            "train_limit": args.train_limit, "public": folders[corpus], "dim": dim, "clip": 1.0, "out": str(out)})
                        shutil.rmtree(out)
                        store[key] = {"accuracy": summary["accuracy_local"], "users": args.users, "command": real_command}
                        path.write_text(json.dumps({"command": command, **saved}, indent=1) + "\n")
                        print(f"{key}: {summary['accuracy_local']:.3f}", flush=True)


def seeded_report(saved: dict[str, Any], out: Path) -> list[str]:
    """Per epsilon: each SEEDED_CELLS mean over the seeds run for real (seed 0 from saved['real'] or the sweep's
    results.json where the seeded runs leave it out), its gap (points) to the best cell's mean per task."""
    runs = saved.get("real seeds", {})
    if not runs:
        return []
    sweep = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else {}
    lines = ["", "## Real runs over seeds", "",
             "SEEDED_CELLS run for real as above at --seed 1, 2, ... (the seed moves the task's 8,000-record sample, the "
             "partition, the noise and the generated public corpus; not the broad corpus), seed 0 taken from the runs above "
             "and the sweep's results.json. Mean (sd) over the seeds, gap (points) to the best cell's mean per task. "
             "Commands: " + ", ".join(f"`{c}`" for c in dict.fromkeys(v["command"] for v in runs.values())) + "."]
    for epsilon in dict.fromkeys(k.split(" | ")[1] for k in runs):
        names = list(dict.fromkeys(k.split(" | ")[0] for k in runs if k.split(" | ")[1] == epsilon))
        accs: dict[str, dict[str, list[float]]] = {}
        for name in names:
            for cell in SEEDED_CELLS:
                found = [v["accuracy"] for k, v in runs.items() if k.startswith(f"{name} | {epsilon} | {cell} | seed ")]
                zero = saved.get("real", {}).get(f"{name} | {epsilon} | {cell}") or sweep.get(f"{name} | {epsilon} | {cell}")
                accs.setdefault(cell, {})[name] = ([zero["accuracy"]] if zero else []) + found
        means = {c: {n: float(np.mean(v)) for n, v in row.items() if v} for c, row in accs.items()}
        best = {n: max(means, key=lambda c: means[c].get(n, -1.0)) for n in names}
        lines += ["", f"{epsilon.replace('eps', 'Epsilon')} ({len(accs[next(iter(accs))][names[0]])} seeds):", "",
                  "| cell | largest gap | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
        for cell in sorted(accs, key=lambda c: max(means[best[n]][n] - means[c][n] for n in names)):
            gap = {n: (means[best[n]][n] - means[cell][n]) * 100 for n in names}
            lines.append(f"| {cell} | {max(gap.values()):+.1f} | " + " | ".join(
                f"{means[cell][n]:.3f} ({np.std(accs[cell][n]):.3f}) {gap[n]:+.1f}" for n in names) + " |")
    return lines


def real_report(saved: dict[str, Any], out: Path) -> list[str]:
    """Per epsilon run for real: each REAL_CELLS accuracy against the best real run of the sweep (results.json:
    the cells on shipped data) and of these cells, and its gap (points)."""
    real = saved.get("real", {})
    sweep_path = out / "results.json"
    if not real or not sweep_path.is_file():
        return []
    sweep = {k: v["accuracy"] for k, v in json.loads(sweep_path.read_text()).items() if "public mr" not in k}
    lines = ["", "## Real runs", "",
             "The same corpora given as --public (a folder written from the recipe), through the ServerApp and ClientApps "
             "(run_in_process), in the sweep's setting (README.md: " + f"{next(iter(real.values()))['users']} users, "
             "dirichlet:0.5, seeded 8,000 records, one release per record, seed 0: one seed). Best: over the sweep's cells "
             "on shipped data (results.json) and these. Commands: " + ", ".join(f"`{c}`" for c in dict.fromkeys(v["command"] for v in real.values())) + "."]
    for epsilon in dict.fromkeys(k.split(" | ")[1] for k in real):
        names = list(dict.fromkeys(k.split(" | ")[0] for k in real if k.split(" | ")[1] == epsilon))
        lines += ["", f"{epsilon.replace('eps', 'Epsilon')}:", "",
                  "| dataset | " + " | ".join(REAL_CELLS) + " | best real cell | its accuracy |", "|---" * (len(REAL_CELLS) + 3) + "|"]
        worst = dict.fromkeys(REAL_CELLS, 0.0)
        for name in names:
            runs = {k.split(" | ")[2]: v for k, v in sweep.items() if k.startswith(f"{name} | {epsilon} | ")}
            runs |= {cell: real[f"{name} | {epsilon} | {cell}"]["accuracy"] for cell in REAL_CELLS if f"{name} | {epsilon} | {cell}" in real}
            best = max(runs, key=runs.get)
            cols = []
            for cell in REAL_CELLS:
                if cell in runs:
                    worst[cell] = max(worst[cell], (runs[best] - runs[cell]) * 100)
                    cols.append(f"{runs[cell]:.3f} ({(runs[best] - runs[cell]) * 100:+.1f})")
                else:
                    cols.append("")
            lines.append(f"| {name} | " + " | ".join(cols) + f" | {best} | {runs[best]:.3f} |")
        lines += ["", "Largest gap over these datasets: " + "; ".join(f"'{c}' {g:+.1f} points" for c, g in worst.items()) + "."]
    return lines


def gaps(results: dict[str, Any], epsilon: str) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """At ``epsilon`` ('eps 8'): each cell's gap (points) to the best cell's mean per dataset, and that best cell."""
    rows = {key.split(" | ")[0]: row for key, row in results.items() if key.split(" | ")[1] == epsilon}
    out: dict[str, dict[str, float]] = {}
    best: dict[str, str] = {}
    for name, row in rows.items():
        means = {cell: float(np.mean(v)) for cell, v in row.items()}
        best[name] = max((c for c in means if not c.startswith(HALF)), key=means.get)
        for cell, mean in means.items():
            out.setdefault(cell, {})[name] = (means[best[name]] - mean) * 100
    return out, best


def pilot_check(results: dict[str, Any], out: Path) -> str:
    """How the 'generated' cells compare with pilot.json's fixed cells (the same seeds: they should be equal)."""
    path = out / "pilot.json"
    if not path.is_file():
        return "pilot.json absent: the 'generated' cells were not compared with it."
    saved = json.loads(path.read_text())["results"]
    diffs = [abs(a - b) for key, row in results.items() if key in saved for cell, (dim, _) in CELLS.items()
             for a, b in zip(row[f"generated, {cell}" if dim else "no projection, clip 1"], saved[key][cell])]
    return (f"The 'generated' and 'no projection' cells against pilot.json's fixed cells (same seeds): {len(diffs)} "
            f"accuracies compared, largest difference {max(diffs, default=float('nan')):.4f}.")


def report(saved: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    """The markdown report: the recipe, per epsilon each cell as a fixed default (largest gap first), the verdict,
    the norms, every cell's mean (sd)."""
    results, corpus = saved["results"], broad_corpus(args.data_root)
    seeds = len(next(iter(next(iter(results.values())).values())))
    doc = (__doc__ or "").split("\n\n")
    lines = ["# A broad public corpus for the default projection (issue 29, item 4): offline test", "",
             f"Command (from the checkout, PYTHONPATH=$PWD): `{command}`", "", doc[1].replace("\n", " "), "",
             doc[2].replace("\n", " ") + f" Seeds: {seeds}.", "",
             "The recipe (SOURCES in simulations/experiments/broad_corpus.py; licences in ../shared/data/SOURCES.md):", "",
             "| source file | records | in 'broad-ship' |", "|---|---|---|"]
    lines += [f"| {file} | {size:,} | {'yes' if file.split('/')[0] in SHIPPABLE else 'no'} |" for file, size in SOURCES]
    for name, keep in CORPORA.items():
        texts = [t for t, label in zip(corpus.texts, corpus.labels) if keep is None or SOURCES[label][0].split("/")[0] in keep]
        lines.append(f"\n'{name}': {len(texts):,} sentences, {sum(len(t.encode()) + 1 for t in texts) / 2**20:.2f} MiB "
                     "as UTF-8 lines.")
    lines += ["", pilot_check(results, args.out)]
    for epsilon in dict.fromkeys(key.split(" | ")[1] for key in results):
        table, best = gaps(results, epsilon)
        names = list(best)
        order = sorted(table, key=lambda c: max(table[c].values()))
        within = [c for c in order if max(table[c].values()) <= 3.0 and not c.startswith(HALF)]
        new = [c for c in order if c.startswith("broad") and not c.startswith(HALF)]
        lines += ["", f"## {epsilon.replace('eps', 'Epsilon')}", "",
                  "Best cell per task (over all cells): " + "; ".join(f"{n}: {best[n]} ({np.mean(results[f'{n} | {epsilon}'][best[n]]):.3f})" for n in names) + ".",
                  "",
                  f"Within 3 points of the best on all {len(names)}: " + (", ".join(f"'{c}'" for c in within) or "none") + ". "
                  f"The best broad-corpus cell as the default: '{new[0]}', largest gap {max(table[new[0]].values()):+.1f} points "
                  f"({max(table[new[0]], key=table[new[0]].get)}); the best 'generated' or unprojected cell: "
                  f"'{next(c for c in order if not c.startswith('broad'))}', "
                  f"{max(table[next(c for c in order if not c.startswith('broad'))].values()):+.1f}.", "",
                  f"Each cell as a fixed default: its gap (points) to the best cell's {seeds}-seed mean per task, largest gap first.", "",
                  "| cell as the default | largest gap | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
        lines += [f"| {c} | {max(table[c].values()):+.1f} | " + " | ".join(f"{table[c][n]:+.1f}" for n in names) + " |" for c in order]
        lines += ["", "Accuracy, mean (sd) over the seeds:", "", "| cell | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {c} | " + " | ".join(f"{np.mean(results[f'{n} | {epsilon}'][c]):.3f} ({np.std(results[f'{n} | {epsilon}'][c]):.3f})"
                                         for n in names) + " |" for c in table]
    lines += real_report(saved, args.out) + seeded_report(saved, args.out)
    lines += ["", "## Norms", "",
              "L2 norms after each projection (0.05, 0.5 and 0.95 quantiles; the tasks: their seeded training records). "
              "'clip public median' uses the public median (rounded to 2 decimals):", "",
              "| records | " + " | ".join(f"dim {d}" for d in CANDIDATES) + " |", "|---" * (len(CANDIDATES) + 1) + "|"]
    lines += [f"| {k} | " + " | ".join(" / ".join(f"{q:.2f}" for q in v[str(d)]) for d in CANDIDATES) + " |"
              for k, v in saved["norms"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run, write broad_corpus.json and broad_corpus.md beside the sweep's report."""
    parser = sweep_parser(__doc__, list(DATASETS), REPORT)
    parser.set_defaults(epsilons=[8.0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--halves", type=int, default=3, help="seeded halves of 'broad' to fit the projection on")
    parser.add_argument("--real-epsilons", nargs="+", type=float, default=[],
                        help="instead of the offline cells: run REAL_CELLS for real at these epsilons (added to the json)")
    parser.add_argument("--real-seeds", nargs="+", type=int, default=[],
                        help="with --real-epsilons: run SEEDED_CELLS at these seeds instead of REAL_CELLS at seed 0")
    args = parser.parse_args(argv)
    command = " ".join(["python -m ldpfed.simulations.experiments.broad_corpus", *(sys.argv[1:] if argv is None else argv)])
    path = args.out / "broad_corpus.json"
    if args.report_only:
        saved = json.loads(path.read_text())
        command = saved.pop("command")
    elif args.real_epsilons:
        saved = json.loads(path.read_text())
        command = saved.pop("command")
        single_threaded_blas()
        real_runs(args, saved, path, command, " ".join(["python -m ldpfed.simulations.experiments.broad_corpus",
                                                          *(sys.argv[1:] if argv is None else argv)]))
    else:
        single_threaded_blas()
        saved = json.loads(json.dumps(run(args)))
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"command": command, **saved}, indent=1) + "\n")
    (args.out / "broad_corpus.md").write_text(report(saved, args, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
