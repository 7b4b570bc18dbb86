"""Why the MLP head trails LDA on noisy reports: a few MLP recipes on the same simulated reports (issue 28, item 3).

Not a run: the clean MiniLM encodings of a seeded sample of a task's training split are clipped
(L2, radius 3) and given Gaussian noise calibrated to one release at the worst-case epsilon (delta
1e-5), as the Gaussian randomizer does; LDA (ReportAggregator) and MLPHead with each recipe are fitted on
them and scored on the clean, clipped evaluation split (local inference), on the same noisy reports
(training accuracy) and on noisy evaluation queries. The built-in recipe (rows drawn toward their class
means, fed.learning.mlp) was chosen on these simulated reports (SNIPS and SST-2 at epsilon 8), never on
the comparison's runs; the other rows are the recipes tried on the way, early stopping on held-out noisy
reports among them.

    python -m ldpfed.simulations.experiments.classifier_head_variants --data snips --epsilon 8
    python -m ldpfed.simulations.experiments.classifier_head_variants --data sst2 --epsilon 8
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from ldpfed.fed.data.loaders import load_dataset
from ldpfed.fed.encoders.cache import encode_cached
from ldpfed.fed.encoders.factory import make_encoder
from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.learning.mlp_head import RECIPE, MLPHead
from ldpfed.fed.learning.server_classifier import ClassifierContext
from ldpfed.fed.privacy.calibration import calibrate_gaussian_sigma

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
REPORTS = Path(__file__).resolve().parents[1] / "reports" / "classifier_head"
CLIP = 3.0
PLAIN = dataclasses.replace(RECIPE, shrink=False)
"""The built-in recipe before issue 28's fix: every row trained on as given."""
VARIANTS = {
    "built-in (128 hidden, 20 epochs, lr 0.01, rows drawn toward class means)": RECIPE,
    "rows as given (the built-in before issue 28)": PLAIN,
    "rows as given, no hidden layer (softmax regression)": dataclasses.replace(PLAIN, hidden=()),
    "rows as given, 5 epochs": dataclasses.replace(PLAIN, epochs=5),
    "rows as given, lr 0.001": dataclasses.replace(PLAIN, lr=1e-3),
    "rows as given, input dropout 0.5 (seed 004)": dataclasses.replace(PLAIN, input_dropout=0.5),
    "rows as given, weight decay 0.01": dataclasses.replace(PLAIN, weight_decay=1e-2),
    "rows as given, lr 0.001, weight decay 0.01": dataclasses.replace(PLAIN, lr=1e-3, weight_decay=1e-2),
    "rows as given, early stopping on 20% held-out reports (patience 3)": dataclasses.replace(PLAIN, holdout=0.2, patience=3),
    "rows drawn toward class means, early stopping on 20% held-out reports": dataclasses.replace(RECIPE, holdout=0.2, patience=3),
}


def _clip(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, CLIP / np.maximum(norms, 1e-12))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="snips")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--train-limit", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="default: variants.md (snips) or variants_<data>.md beside the comparison's report")
    args = parser.parse_args(argv)
    args.out = args.out or REPORTS / ("variants.md" if args.data == "snips" else f"variants_{args.data}.md")
    import torch

    torch.set_num_threads(1)
    command = " ".join(["python -m ldpfed.simulations.experiments.classifier_head_variants", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    encoder, cache = make_encoder("minilm"), Path.home() / ".cache" / "ldpfed"
    train, dev = (load_dataset(str(SHARED / args.data), split) for split in ("train", "dev"))
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(len(train), min(args.train_limit, len(train)), replace=False)
    x, y = _clip(encode_cached(encoder, train, cache)[rows].astype(np.float64)), train.labels[rows]
    x_dev, y_dev = _clip(encode_cached(encoder, dev, cache).astype(np.float64)), dev.labels
    classes = int(max(y.max(), y_dev.max())) + 1
    sigma = calibrate_gaussian_sigma(args.epsilon, 1e-5, 1, 2 * CLIP)
    reports, noisy_dev = x + rng.normal(0, sigma, x.shape), x_dev + rng.normal(0, sigma, x_dev.shape)
    randomizer = {"mechanism": "gaussian", "clip": CLIP, "sigma": sigma}
    lda = ReportAggregator(x.shape[1], classes, -1.0)
    lda.add(reports, y, randomizer, None)
    rows_out = {"LDA (noise-aware, the default)": (lda.model(), lda.model_for_reports(randomizer))}
    for name, recipe in VARIANTS.items():
        head = MLPHead(ClassifierContext(x.shape[1], classes, seed=args.seed), recipe)
        head.add(reports, y, randomizer, None)
        rows_out[f"MLP: {name}"] = (head.model(), head.model())
    lines = [
        f"# MLP recipes against LDA on the same simulated reports ({args.data}, epsilon {args.epsilon:g})",
        "",
        "```bash",
        command,
        "```",
        "",
        f"{len(rows)} training records of {args.data} (seeded sample), MiniLM, all {x.shape[1]} dimensions, clip {CLIP:g}, "
        f"Gaussian sigma {sigma:.3f} (one release at worst-case epsilon {args.epsilon:g}, delta 1e-5), labels public, "
        f"{len(y_dev)} evaluation records, one seed. Reports simulated directly (see the script's docstring), not a run.",
        "",
        "| classifier | accuracy on clean queries (local inference) | on the training reports | on noisy queries |",
        "|---|---|---|---|",
    ]
    for name, (clean_model, noisy_model) in rows_out.items():
        lines.append(
            f"| {name} | {(clean_model.predict(x_dev) == y_dev).mean():.3f} | {(noisy_model.predict(reports) == y).mean():.3f} | "
            f"{(noisy_model.predict(noisy_dev) == y_dev).mean():.3f} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())
    print(json.dumps({"sigma": sigma}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
