"""Time the two samplers of fed.privacy.noise: a device's (OpenDP + ChaCha20) against the engine's (numpy).

``python -m ldpfed.simulations.benchmarks.noise_speed [--repeats N]`` prints milliseconds per release (median)
for one 16-d report and a 16 x 384 token matrix, Gaussian and Laplace.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ldpfed.fed.privacy.noise import SecureGenerator, add_gaussian, add_laplace

SHAPES = {"16-d report": (1, 16), "16 x 384": (16, 384)}


def milliseconds(add: object, shape: tuple[int, int], rng: np.random.Generator, repeats: int) -> float:
    """Median wall time of one release of ``shape`` through ``add`` (after one warm-up call)."""
    x = np.full(shape, 0.1)
    add(x, 2.0, 1.0, rng)  # type: ignore[operator]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        add(x, 2.0, 1.0, rng)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed releases per cell (default 20)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    print("| sampler | " + " | ".join(f"{noise}, {shape}" for noise in ("Gaussian", "Laplace") for shape in SHAPES) + " |")
    print("|---" * (1 + 2 * len(SHAPES)) + "|")
    for name, rng in (("device (OpenDP + ChaCha20)", SecureGenerator.from_os()), ("engine (numpy)", np.random.default_rng(0))):
        cells = [milliseconds(add, shape, rng, args.repeats) for add in (add_gaussian, add_laplace) for shape in SHAPES.values()]
        print(f"| {name} | " + " | ".join(f"{ms:.3g} ms" for ms in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
