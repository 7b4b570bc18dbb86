"""Seed 002, Figure 1: DP instance encoding (DP-IE Gaussian and Laplace) against TextHide and the
raw data, on SST-2 and CoLA over epsilon 0.1 to 20, with the paper's MLP.

The paper: BERT sentence vectors (d = 768) are clipped to L2 radius C, mixed k at a time
(TextHide's instance encoding, Algorithm 1) with noise added to each mix, and a multilayer
perceptron with hidden layers (768, 768, 768) (TextHide's) is trained on the encoded set;
epsilon in {0.1, 1, 2, 4, 8, 10, 15, 20}, delta = 1e-5, TextHide at (m, k) = (16, 4).
Its accounting: Gaussian sigma = (1 + sqrt(2 ln(1/delta))) C / epsilon (Theorem 4, L2
sensitivity C), Laplace scale 2C / epsilon per coordinate (Theorem 3, "L1 sensitivity 2C").

Rows (every cell one seed: subsample, mixing, noise and MLP initialisation):

- ``paper``: ldpfed's ``dpie-gaussian`` / ``dpie-laplace`` (k = 4, coefficients on the
  uniform simplex, no sign masks as in Algorithm 1) with the paper's own noise scale. Rows are
  first clipped to L2 radius C; the Laplace randomizer's L1 clip is then C sqrt(d), which
  leaves every L2-clipped row unchanged, so the data path is the paper's. 'true eps' is what
  that noise really costs one record (ldpfed's event: Gaussian sensitivity 2C c_max sqrt(k),
  Laplace L1 sensitivity 2 C sqrt(d) c_max k).
- ``strict``: the same randomizer calibrated so that its true epsilon is the table's.
- ``texthide``: ldpfed's ``texthide`` (m = 16 masks, k = 4; no DP: epsilon infinite).
- ``raw``: the MLP on clean clipped vectors.

Classifiers (``--classifiers``): ``mlp``, the paper's MLP trained on the reports and their soft
labels; ``mixed-lda``, ldpfed's NoiseAwareLDA on the reports' denoised class statistics
(fed.learning.mixed_reports: least-squares class means from the soft labels, within-class
covariance corrected for the declared noise and the mixing), chosen on simulated data before
this comparison ran (python -m ldpfed.simulations.experiments.seed002_recipe). Its cells carry
``"classifier": "mixed-lda"`` in their setting and no epochs; MLP cells are keyed as before.
``--train-records`` takes several sizes; each is a seeded subsample (0: all).

The dev split is scored twice: clean (clipped, neither mixed nor noised), and with the row's
noise added to each clipped row (unmixed), as noisy as a training report.
"""

from __future__ import annotations

import argparse
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ldpfed.simulations.reproductions import REPORTS
from ldpfed.simulations.reproductions._seed002_theorem3 import section as theorem3_section
from ldpfed.simulations.reproductions._cells import (
    Results, Setting, common_arguments, fmt_number, fmt_spread, reproduce, table,
)
from ldpfed.fed.learning.classifier import NoiseAwareLDA
from ldpfed.fed.learning.mixed_reports import add_mixed
from ldpfed.fed.learning.mlp import MLPRecipe, train_mlp

DESCRIPTION = "Seed 002 Figure 1: DP-IE Gaussian / Laplace vs TextHide on SST-2 and CoLA, epsilon 0.1-20, MLP (768,768,768)"
NAME = "seed002_dpie"
EPSILONS = (0.1, 1.0, 2.0, 4.0, 8.0, 10.0, 15.0, 20.0)
DELTA = 1e-5
K = 4
MASKS = 16
CLIP = 1.0
HIDDEN = (768, 768, 768)
DATASETS = ("sst2", "cola")
NAMES = {"sst2": "SST-2", "cola": "CoLA"}
CLASSIFIERS = ("mlp", "mixed-lda")
MECHANISMS = ("dpie-gaussian", "dpie-laplace")


def main(argv: list[str] | None = None) -> int:
    """Run the missing cells and write README.md."""
    parser = argparse.ArgumentParser(prog=f"ldpfed reproduce {NAME}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common_arguments(parser, REPORTS / NAME, seeds=3)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--train-records", type=int, nargs="+", default=[0],
                        help="sizes of seeded subsamples of each training split (0: all)")
    parser.add_argument("--classifiers", nargs="+", choices=CLASSIFIERS, default=["mlp"],
                        help="the paper's MLP and/or ldpfed's mixed-report LDA (default mlp)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--epochs", type=int, default=20, help="MLP epochs (the paper does not give them; default 20)")
    args = parser.parse_args(argv)
    setup = {"encoder": "minilm (mean pooled, 384 dims)", "clip": CLIP, "k": K, "masks_texthide": MASKS,
             "hidden": list(HIDDEN), "delta": DELTA, "test": "dev split, clean"}
    results = Results(args.out, setup, fresh=args.fresh)
    cells = [(s, seed) for s in settings(args) for seed in range(args.seeds)]
    return reproduce(args, results, cells, lambda s, seed: compute(s, seed, args.data), NAME, lambda: report(results, args))


def base_setting(dataset: str, records: int, classifier: str, epochs: int) -> Setting:
    """What a row's cells share: an MLP cell names its epochs, an LDA cell its classifier (MLP cells keep their old keys)."""
    base: Setting = {"dataset": dataset, "train_records": records}
    return {**base, "epochs": epochs} if classifier == "mlp" else {**base, "classifier": classifier}


def settings(args: argparse.Namespace) -> list[Setting]:
    """Every row: raw (and TextHide for the MLP), then both mechanisms under both accountings at every epsilon."""
    out: list[Setting] = []
    for classifier in args.classifiers:
        for dataset in args.datasets:
            for records in args.train_records:
                base = base_setting(dataset, records, classifier, args.epochs)
                out.append({**base, "row": "raw", "epsilon": 0.0, "accounting": "none"})
                if classifier == "mlp":  # TextHide's masks leave no linear class statistics to denoise
                    out.append({**base, "row": "texthide", "epsilon": 0.0, "accounting": "none"})
                out += [{**base, "row": m, "epsilon": e, "accounting": a}
                        for m in MECHANISMS for e in args.epsilons for a in ("paper", "strict")]
    return out


@cache
def subsample(data: Path, dataset: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The training rows and labels of a seeded subsample (all with limit 0), encoding only those."""
    from ldpfed.fed.runtime.assets import default_cache_dir
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.data.loaders import load_dataset

    train = load_dataset(str(data / dataset), "train")
    if limit and limit < len(train):
        train = train.subset(np.sort(np.random.default_rng(0).permutation(len(train))[:limit]))
    x = encode_cached(make_encoder("minilm"), train, default_cache_dir(RunSpec()), progress=True)
    return x.astype(np.float64), train.labels


@cache
def train_size(data: Path, dataset: str) -> int:
    """Records in the dataset's train split."""
    from ldpfed.fed.data.loaders import load_dataset

    return len(load_dataset(str(data / dataset), "train"))


@cache
def majority(data: Path, dataset: str) -> float:
    """Share of the dev split's most common label (what a constant prediction scores)."""
    from ldpfed.fed.data.loaders import load_dataset

    labels = np.asarray(load_dataset(str(data / dataset), "dev").labels)
    return float(np.bincount(labels).max() / len(labels))


@cache
def dev_rows(data: Path, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM rows and labels of the dev split."""
    from ldpfed.fed.runtime.assets import default_cache_dir
    from ldpfed.fed.configuration.run_spec import RunSpec
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.data.loaders import load_dataset

    dev = load_dataset(str(data / dataset), "dev")
    return encode_cached(make_encoder("minilm"), dev, default_cache_dir(RunSpec())).astype(np.float64), dev.labels


def paper_noise(mechanism: str, epsilon: float) -> float:
    """The paper's noise scale: Theorem 4's sigma (sensitivity C) or Theorem 3's Laplace scale 2C / epsilon."""
    if mechanism == "dpie-gaussian":
        return (1.0 + math.sqrt(2.0 * math.log(1.0 / DELTA))) * CLIP / epsilon
    return 2.0 * CLIP / epsilon


@cache
def build(mechanism: str, accounting: str, epsilon: float, dim: int) -> Any:
    """The randomizer of a DP-IE row (kept: the strict Laplace calibration searches)."""
    from ldpfed.fed.randomizers import RANDOMIZERS

    clip = CLIP if mechanism == "dpie-gaussian" else CLIP * math.sqrt(dim)  # L1 radius holding the L2 ball
    options = {"k": K, "max_coefficient": 1.0, "masks": 0, "clip": clip}
    cls = RANDOMIZERS[mechanism]
    if accounting == "strict":
        return cls.calibrated(epsilon, DELTA, 1, options)
    key = "sigma" if mechanism == "dpie-gaussian" else "scale"
    return cls.from_params({**options, key: paper_noise(mechanism, epsilon)})


def compute(setting: Setting, seed: int, data: Path) -> dict[str, Any]:
    """One cell: encode (mix, noise) the training rows, fit the classifier on soft labels, test on clean dev."""
    from ldpfed.fed.privacy.composition import compose_epsilon
    from ldpfed.fed.randomizers import RANDOMIZERS
    from ldpfed.fed.randomizers.gaussian import clip_l2

    dataset = setting["dataset"]
    x, y = subsample(data, dataset, setting["train_records"])
    x_dev, y_dev = dev_rows(data, dataset)
    x, x_dev = clip_l2(x, CLIP), clip_l2(x_dev, CLIP)
    num_classes = int(max(y.max(), y_dev.max())) + 1
    rng = np.random.default_rng([2, seed])
    out: dict[str, Any] = {}
    row = setting["row"]
    randomizer = None
    if row == "raw":
        reports, targets = x, y
    else:
        if row == "texthide":
            randomizer = RANDOMIZERS["texthide"](K, MASKS)
        else:
            randomizer = build(row, setting["accounting"], setting["epsilon"], x.shape[1])
            out["noise"] = randomizer.noise
            out["true_epsilon"] = compose_epsilon({randomizer.event: 1}, DELTA)
        order = rng.permutation(len(x))  # the mixing groups follow the data order: shuffle it first
        reports, targets = randomizer.release_with_labels(x[order], y[order], num_classes, rng)
    if setting.get("classifier", "mlp") == "mlp":
        recipe = MLPRecipe(hidden=HIDDEN, epochs=setting["epochs"], batch_size=64, lr=1e-3, decay=0.0, optimizer="adam")
        model = train_mlp(reports, targets, num_classes, recipe, seed)
        noisy_model = model
    else:
        lda = NoiseAwareLDA(x.shape[1], num_classes)
        if randomizer is None:
            lda.update(reports, targets, 0.0)
        else:
            std = math.sqrt(randomizer.noise_kind.variance(randomizer.noise))
            add_mixed(lda, reports, targets, std, randomizer.mixup.square_share())
        model = lda.fit()
        noisy_model = lda.model_for(std) if "noise" in out else model
    y_dev = np.asarray(y_dev)
    out["accuracy"] = float((model.predict(x_dev) == y_dev).mean())
    if "noise" in out:  # the same noise on each (unmixed) test row: queries as noisy as the training reports
        draw = rng.normal if row == "dpie-gaussian" else rng.laplace
        out["accuracy_noisy_test"] = float((noisy_model.predict(x_dev + draw(0.0, out["noise"], x_dev.shape)) == y_dev).mean())
    return out


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this report."""
    classifiers = "" if args.classifiers == ["mlp"] else f" --classifiers {' '.join(args.classifiers)}"
    out = "" if Path(args.out).resolve() == (REPORTS / NAME).resolve() else f" --out {args.out}"
    epochs = f"--epochs {args.epochs} " if "mlp" in args.classifiers else ""
    return (f"ldpfed reproduce {NAME} --seeds {args.seeds} --train-records {' '.join(map(str, args.train_records))} "
            f"{epochs}--datasets {' '.join(args.datasets)} --epsilons {' '.join(f'{e:g}' for e in args.epsilons)}"
            f"{classifiers}{out}")


def records_of(data: Path, dataset: str, records: int) -> int:
    """Training records a ``--train-records`` value gives (0: all)."""
    return min(records or train_size(data, dataset), train_size(data, dataset))


def report(results: Results, args: argparse.Namespace) -> list[str]:
    """README.md: the paper's figure (a plot without numbers), ours under both accountings, the differences."""
    lines = [
        f"# Seed 002, Figure 1: DP instance encoding on {' and '.join(NAMES[d] for d in args.datasets)}",
        "",
        f"Command: `{command(args)}` (resumes from results.json).",
        "",
        "The paper gives this result as a plot only (Figure 1); its text states no accuracy, only the trend "
        "(accuracy rises with epsilon and approaches the raw data). So the 'paper' column cannot quote a number. "
        "Each ldpfed cell: clean test rows / test rows with the same noise added (unmixed). "
        "Accuracy in % on the dev split, mean [min, max] over seeds (n). 'true eps' is the worst-case "
        "epsilon of one release of a record under the noise that row used (delta 1e-5).",
        "",
    ]
    sizes = {dataset: train_size(args.data, dataset) for dataset in args.datasets}
    lines += ["Training records: " + "; ".join(
        f"{d}: {' / '.join(f'{records_of(args.data, d, n):,}' for n in args.train_records)} of its {sizes[d]:,}"
        for d in args.datasets) + ".", ""]
    reduced = [f"{d}: a seeded subsample of {n:,} of its {sizes[d]:,} training records"
               for d in args.datasets for n in args.train_records if 0 < n < sizes[d]]
    if set(args.epsilons) != set(EPSILONS):
        reduced.append(f"only epsilons {', '.join(f'{e:g}' for e in args.epsilons)} ({len(set(args.epsilons))} of the paper's 8)")
    if reduced:
        lines += [f"REDUCED: {'; '.join(reduced)}. No verdict is drawn from a reduced row.", ""]
    if "mixed-lda" in args.classifiers:
        lines += ["Classifier 'mixed-lda': ldpfed's NoiseAwareLDA on the reports' denoised class statistics "
                  "(fed.learning.mixed_reports), chosen on simulated data before these cells ran: "
                  "[seed002_recipe](../../../experiments/seed002_recipe/README.md). It sees the reports, their soft "
                  "labels and the declared noise and mixing only; 'raw' is the same LDA on clean clipped rows.", ""]

    def both(setting: Setting) -> str:
        return f"{fmt_spread(results.values(setting, 'accuracy'))} / {fmt_spread(results.values(setting, 'accuracy_noisy_test'))}"

    for classifier in args.classifiers:
        for dataset in args.datasets:
            for records in args.train_records:
                base = base_setting(dataset, records, classifier, args.epochs)
                raw = fmt_spread(results.values({**base, "row": "raw", "epsilon": 0.0, "accounting": "none"}, "accuracy"))
                hide = fmt_spread(results.values({**base, "row": "texthide", "epsilon": 0.0, "accounting": "none"}, "accuracy"))
                several = len(args.train_records) > 1 or args.classifiers != ["mlp"]
                title = f"{dataset}, {records_of(args.data, dataset, records):,} records, {classifier}" if several else dataset
                texthide = f" TextHide (m 16, k 4; no DP, epsilon infinite): {hide}." if classifier == "mlp" else ""
                lines += [f"## {title}", "", f"Raw data (no privacy): {raw}.{texthide} "
                          f"Majority class of the dev split: {100 * majority(args.data, dataset):.2f}.", ""]
                rows = []
                for eps in args.epsilons:
                    row = [f"{eps:g}"]
                    for mech in MECHANISMS:
                        paper = {**base, "row": mech, "epsilon": eps, "accounting": "paper"}
                        strict = {**base, "row": mech, "epsilon": eps, "accounting": "strict"}
                        true_eps = results.values(paper, "true_epsilon")
                        row += ["plot only", both(paper), fmt_number(true_eps[0] if true_eps else None), both(strict)]
                    rows.append(row)
                lines += table(["epsilon", "Gaussian: paper", "Gaussian: ldpfed, paper's sigma", "true eps",
                                "Gaussian: ldpfed, strict", "Laplace: paper", "Laplace: ldpfed, paper's scale", "true eps",
                                "Laplace: ldpfed, strict"], rows)
                lines.append("")
    if "mixed-lda" in args.classifiers and len(args.train_records) > 1:
        for dataset in args.datasets:
            lines += records_curve(results, args, dataset)
    if "mixed-lda" in args.classifiers:
        lines += [*theorem3_section(384, 1.0, CLIP), ""]
    lines += [
        "## Differences that remain",
        "",
        "- Encoder: MiniLM (384 dims, mean pooled) for the paper's BERT (768 dims); BERT-base is not available "
        "offline here. The MLP keeps the paper's (768, 768, 768) hidden layers.",
        f"- Clip C = {CLIP:g}: the paper does not give C. MiniLM's mean-pooled vectors have norms of 4.2 to 6.8 "
        "(5th to 95th percentile, CoLA dev), so every row is clipped to the sphere and keeps its direction. "
        f"The MLP's schedule is not given either: Adam, lr 1e-3, batch 64, {args.epochs} epochs, trained on the "
        "mixed soft labels.",
        "- Mixing coefficients: uniform on the simplex (bounded by 1, TextHide's); Algorithm 1 draws them from "
        "N(0, 1) and normalises their sum, which leaves them (and the sensitivity) unbounded.",
        "- Each training record is in k = 4 reports (ldpfed's cyclic mixing); the paper's batch sampling is not "
        "specified. Its accounting ignores that a record enters k reports (the true eps column does not).",
        "- Laplace: the paper adds Laplace noise of scale 2C / epsilon to an L2-clipped vector and calls it "
        "epsilon-DP; the L1 diameter of that domain is 2C sqrt(d), so the true cost is sqrt(d) times more, "
        "times k for the mixing. ldpfed's strict row calibrates to the true cost.",
        "- The test split is scored clean (neither mixed nor noised) and with the row's noise added; TextHide's own test-time encoding is not used.",
    ]
    if "mixed-lda" in args.classifiers:
        lines.append("- 'mixed-lda' is not the paper's classifier: the paper trains its MLP on the encodings; the LDA "
                     "is ldpfed's, added to see what the reports allow when the learner models their noise and mixing.")
    return lines


def records_curve(results: Results, args: argparse.Namespace, dataset: str) -> list[str]:
    """Mean accuracy (clean dev rows) of mixed-lda against records at each epsilon: a table and records.png."""
    counts = [records_of(args.data, dataset, n) for n in args.train_records]
    curves: dict[tuple[str, str], list[list[float]]] = {}
    for mech in MECHANISMS:
        for accounting in ("paper", "strict"):
            curves[mech, accounting] = [
                [_mean(results.values({**base_setting(dataset, n, "mixed-lda", args.epochs), "row": mech, "epsilon": e,
                                       "accounting": accounting}, "accuracy")) for n in args.train_records]
                for e in args.epsilons]
    raw = [_mean(results.values({**base_setting(dataset, n, "mixed-lda", args.epochs), "row": "raw", "epsilon": 0.0,
                                 "accounting": "none"}, "accuracy")) for n in args.train_records]
    header = ["epsilon"] + [f"{m.removeprefix('dpie-')} {a} {c:,}" for (m, a) in curves for c in counts]
    rows = [[f"{e:g}"] + [f"{100 * v:.2f}" for key in curves for v in curves[key][i]] for i, e in enumerate(args.epsilons)]
    name = f"records_{dataset}.png"
    _plot(Path(args.out) / name, counts, curves, raw, args.epsilons, NAMES[dataset])
    falls = [(f"{m.removeprefix('dpie-')} {a} eps {e:g}", row[0] - row[-1], max(row[0], row[-1]))
             for (m, a), grid in curves.items() for e, row in zip(args.epsilons, grid) if row[-1] < row[0]]
    fell = ("none" if not falls else
            f"{len(falls)} of {len(curves) * len(args.epsilons)}, by at most {100 * max(f[1] for f in falls):.2f} points, "
            f"all at most {100 * (max(f[2] for f in falls) - majority(args.data, dataset)):.2f} points above the majority class "
            f"({', '.join(f[0] for f in falls)})")
    return [f"## {dataset}: mixed-lda accuracy against records", "",
            f"Mean accuracy (%) on clean dev rows over seeds; raw (no privacy): "
            f"{' / '.join(f'{100 * v:.2f}' for v in raw)} at {' / '.join(f'{c:,}' for c in counts)} records. "
            f"Plot: [{name}]({name}). Rows whose mean at {counts[-1]:,} records is under the one at {counts[0]:,}: {fell}.",
            "", *table(header, rows), "", f"![accuracy against records]({name})", ""]


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def _plot(path: Path, counts: list[int], curves: dict[tuple[str, str], list[list[float]]], raw: list[float],
          epsilons: list[float], title: str) -> None:
    """Accuracy against records, one panel per (mechanism, accounting), one line per epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True, sharey=True)
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(epsilons)))
    for ax, ((mech, accounting), rows) in zip(axes.flat, curves.items()):
        ax.plot(counts, [100 * v for v in raw], "k--", label="raw")
        for colour, eps, row in zip(colours, epsilons, rows):
            ax.plot(counts, [100 * v for v in row], "o-", color=colour, label=f"eps {eps:g}")
        ax.set_xscale("log")
        ax.set_title(f"{mech}, {accounting} noise")
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("training records")
    for ax in axes[:, 0]:
        ax.set_ylabel("dev accuracy (%)")
    axes[1, 1].legend(fontsize=7, loc="center right", ncol=3)  # that panel's curves lie at the bottom
    fig.suptitle(f"Seed 002 on {title}: mixed-lda, accuracy against records (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
