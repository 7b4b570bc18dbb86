"""Privacy tiers on a controlled synthetic case: does adding the noisiest tier help or hurt?

Three classes of Gaussian inputs in 16 dimensions (fixed means and within-class covariance),
released by the Gaussian randomizer (clip 1) calibrated to epsilon 1, 3 and 8 at delta 1e-5;
the server's discriminant is trained on the highest tier alone, on all tiers but the noisiest,
and on all tiers, with each weighting of ReportAggregator, and scored on clean test inputs.
Two tier sizes: many users at strong privacy (40,000 / 4,000 / 4,000 reports), and equal tiers
(4,000 each), where the epsilon-1 tier holds about 2% of the information. Rerun (well under a
minute):

    python -m ldpfed.simulations.experiments.weighting_study [--seeds 20] [--out runs/reports/weighting_study.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ldpfed.fed.learning.aggregation import ReportAggregator
from ldpfed.fed.randomizers.gaussian import GaussianRandomizer
from ldpfed.fed.learning.report_sums import ReportSums
from ldpfed.simulations.report_file import write_report

DIM, CLASSES, CLIP, DELTA = 16, 3, 1.0, 1e-5
EPSILONS = (1.0, 3.0, 8.0)
SKEWED, EQUAL = (40_000, 4_000, 4_000), (4_000, 4_000, 4_000)
"""Reports per tier, in the order of EPSILONS."""
SUBSETS = {"highest tier alone": (2,), "all but the noisiest": (1, 2), "all tiers": (0, 1, 2)}
WEIGHTINGS = ("pooled", "epsilon", "inverse-variance")
TEST_SIZE = 20_000

Tiers = list[tuple[ReportSums, dict]]


def geometry() -> tuple[np.ndarray, np.ndarray]:
    """Class means (classes, d) on a circle of radius 0.2 and a Cholesky factor of the within-class
    covariance (variances from 0.02 to 0.002), both in a fixed random orientation."""
    rotation, _ = np.linalg.qr(np.random.default_rng(12345).normal(size=(DIM, DIM)))
    angles = 2 * np.pi * np.arange(CLASSES) / CLASSES
    means = np.zeros((CLASSES, DIM))
    means[:, 0], means[:, 1] = np.cos(angles), np.sin(angles)
    return 0.2 * means @ rotation.T, rotation * np.sqrt(np.geomspace(0.02, 0.002, DIM))


def sample(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` clean inputs and their labels (classes equally likely)."""
    means, factor = geometry()
    labels = rng.integers(0, CLASSES, n)
    return means[labels] + rng.normal(size=(n, DIM)) @ factor.T, labels


def randomizers() -> list[GaussianRandomizer]:
    """One Gaussian randomizer per tier, calibrated to its epsilon for one release."""
    return [GaussianRandomizer.calibrated(e, DELTA, 1, {"clip": CLIP}) for e in EPSILONS]


def tiers(seed: int, sizes: tuple[int, ...]) -> Tiers:
    """Each tier's summed reports and its randomizer's parameters."""
    rng = np.random.default_rng(seed)
    out = []
    for randomizer, n in zip(randomizers(), sizes):
        x, y = sample(n, rng)
        out.append((ReportSums.of(randomizer.release(x, rng), y, CLASSES), randomizer.params()))
    return out


def evaluation_set() -> tuple[np.ndarray, np.ndarray]:
    """Clean test inputs, clipped as local inference clips them, and their labels."""
    x, y = sample(TEST_SIZE, np.random.default_rng(10**6))
    return randomizers()[0].preprocess(x), y


def accuracy(data: Tiers, subset: tuple[int, ...], weighting: str, test: tuple[np.ndarray, np.ndarray]) -> float:
    """Test accuracy of the discriminant trained on the tiers ``subset`` with ``weighting``."""
    aggregator = ReportAggregator(DIM, CLASSES, -1.0, weighting=weighting, delta=DELTA)
    for tier in subset:
        aggregator.add_sums(data[tier][0], data[tier][1], None)
    x, y = test
    return float((aggregator.model().predict(x) == y).mean())


def study(seeds: int, sizes: tuple[int, ...]) -> dict[tuple[str, str], np.ndarray]:
    """Accuracy per seed of every (subset, weighting)."""
    test = evaluation_set()
    results: dict[tuple[str, str], list[float]] = {}
    for seed in range(seeds):
        data = tiers(seed, sizes)
        for name, subset in SUBSETS.items():
            for weighting in WEIGHTINGS:
                results.setdefault((name, weighting), []).append(accuracy(data, subset, weighting, test))
    return {key: np.array(values) for key, values in results.items()}


def table(results: dict[tuple[str, str], np.ndarray], sizes: tuple[int, ...]) -> list[str]:
    """Markdown table: mean accuracy [min, max] over seeds, and how often all tiers beat dropping the noisiest."""
    tiers_text = ", ".join(f"{n:,} at epsilon {e:g}" for n, e in zip(sizes, EPSILONS))
    lines = [f"Reports: {tiers_text}.", "", "| trained on | " + " | ".join(WEIGHTINGS) + " |", "|---" * 4 + "|"]
    for name in SUBSETS:
        cells = [f"{r.mean():.4f} [{r.min():.4f}, {r.max():.4f}]" for r in (results[(name, w)] for w in WEIGHTINGS)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    gains = [results[("all tiers", w)] - results[("all but the noisiest", w)] for w in WEIGHTINGS]
    cells = [f"{g.mean():+.4f} (worst {g.min():+.4f})" for g in gains]
    lines.append("| all tiers minus all but the noisiest | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    """Run the study on both tier sizes and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/reports/weighting_study.md"))
    args = parser.parse_args(argv)
    sigmas = ", ".join(f"{r.sigma:.2f}" for r in randomizers())
    lines = [
        "# Weighting privacy tiers (synthetic)",
        "",
        f"{CLASSES} Gaussian classes in {DIM} dimensions; Gaussian randomizer, clip {CLIP:g}, calibrated to epsilon "
        f"{', '.join(f'{e:g}' for e in EPSILONS)} at delta {DELTA:g} (noise std {sigmas} per coordinate). Clean test "
        f"accuracy, mean [min, max] over {args.seeds} seeds; a single tier is the same model under every weighting.",
    ]
    for title, sizes in (("Many users at strong privacy", SKEWED), ("Equal tiers", EQUAL)):
        lines += ["", f"## {title}", ""] + table(study(args.seeds, sizes), sizes)
    write_report(args.out, lines)


if __name__ == "__main__":
    main()
