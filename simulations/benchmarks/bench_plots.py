"""CPU of a run's four plots, as the ServerApp writes them at the end of every run (fed/reporting/plots.py).

``python -m ldpfed.simulations.benchmarks.bench_plots [--users N] [--repeat R] [--out FILE.json]``

Writes accuracy.png, epsilon.png, accuracy_users.png (three groupings) and accuracy_epsilon.png of N users
with seeded made-up figures into a temporary folder, once untimed (imports, font cache), then R times,
and prints the median process CPU seconds of the four and of each plot. The figures do not matter to the
cost; their number and the labels do.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def plot_calls(users: int, folder: Path) -> dict[str, Callable[[], Path]]:
    """The four plots of a run of ``users`` users (seeded figures), each a call writing into ``folder``."""
    from ldpfed.fed.reporting import plots
    from ldpfed.fed.reporting.groups import Axis

    rng = np.random.default_rng(0)
    accuracy, epsilon = rng.random(users), rng.random(users) * 8
    axes = [
        Axis("tier", rng.integers(0, 3, users), ("low", "mid", "high")),
        Axis("label skew", rng.integers(0, 2, users), ("skewed", "balanced")),
        Axis("device speed", rng.integers(0, 2, users), ("slow", "fast")),
    ]
    rounds = [{"round": r, "accuracy_local": 0.5 + r / 20, "accuracy_nonprivate": 0.8, "accuracy_public_only": 0.6} for r in range(1, 6)]
    return {
        "accuracy.png": lambda: plots.plot_accuracy(rounds, folder / "accuracy.png"),
        "epsilon.png": lambda: plots.plot_epsilon(epsilon / 2, epsilon, 4.0, folder / "epsilon.png"),
        "accuracy_users.png": lambda: plots.plot_accuracy_cdf(accuracy, axes, folder / "accuracy_users.png"),
        "accuracy_epsilon.png": lambda: plots.plot_accuracy_epsilon(accuracy, epsilon, axes[0], folder / "accuracy_epsilon.png"),
    }


def measure(users: int, repeat: int) -> dict[str, float]:
    """Median CPU seconds of each plot and of all four, over ``repeat`` timed rounds after one untimed."""
    with tempfile.TemporaryDirectory() as folder:
        calls = plot_calls(users, Path(folder))
        for call in calls.values():
            call()
        seconds: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(repeat):
            for name, call in calls.items():
                start = time.process_time()
                call()
                seconds[name].append(time.process_time() - start)
    result = {name: statistics.median(values) for name, values in seconds.items()}
    result["all four"] = statistics.median(map(sum, zip(*seconds.values())))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=40, help="users in the plots (default: 40)")
    parser.add_argument("--repeat", type=int, default=10, help="timed rounds of the four plots (default: 10)")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args(argv)
    if args.users < 1 or args.repeat < 1:
        parser.error("--users and --repeat must be at least 1")
    from ldpfed.fed.reporting import plots

    result = measure(args.users, args.repeat)
    print(f"plots of {plots.__file__}")
    for name, value in result.items():
        print(f"{name:>22}: {value:.3f} CPU s (median of {args.repeat})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report = {"plots": plots.__file__, "users": args.users, "repeat": args.repeat, "cpu_seconds": result}
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
