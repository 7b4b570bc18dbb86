"""Progress lines of the device-cost benchmark, and the summary of a list of timings."""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np


class Progress:
    """Stage lines on stderr (and a counter on a terminal); silent when ``quiet``."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(f"device-costs [{time.monotonic() - self.started:6.1f}s] {text}", file=sys.stderr, flush=True)

    def count(self, text: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.tty:
            end = "\n" if done == total else ""
            print(f"\rdevice-costs [{time.monotonic() - self.started:6.1f}s] {text}: {done}/{total}", end=end, file=sys.stderr, flush=True)
        elif done == total or done % max(1, total // 5) == 0:
            self.say(f"{text}: {done}/{total}")


def stats(seconds: list[float]) -> dict[str, Any]:
    """Median, p95, mean, min and max in milliseconds, and the number of samples."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if not len(ms):
        return {"n": 0}
    return {
        "n": int(len(ms)),
        "median_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
        "mean_ms": float(ms.mean()),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
    }
