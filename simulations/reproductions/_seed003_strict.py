"""Seed 003's rows under ldpfed's strict accounting: the largest eta a per-record epsilon allows, and the GPU
command that runs them (simulations/reproductions/seed003_snd.py --strict-epsilon)."""

from __future__ import annotations

import math
from functools import lru_cache

STRICT_COMMAND = (
    "python3 simulations/reproductions/seed003_snd.py run --setting full --model .gpu/minilm --data .gpu/data "
    "--out $OUT/snd_strict --work /tmp/snd_strict --device cuda --time-budget 300 --denoiser-seconds 40 "
    "--strict-epsilon 10 --no-report"
)
"""The same rows at the etas ldpfed's strict accounting allows for a per-record epsilon of 10 (copy to the report
folder's full_strict/; ``report`` adds its section)."""


def round_down(value: float, digits: int = 3) -> float:
    """``value`` cut (not rounded) to ``digits`` significant digits, so that a largest allowed eta stays allowed."""
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return float(f"{math.floor(value / step) * step:.{digits}g}")


@lru_cache(maxsize=None)  # the report asks once per (sampler, eta) row; the answer depends on the sampler alone
def strict_eta(epsilon: float, tokens: int, diameter: float, sampler: str, delta: float = 1e-5) -> float:
    """The largest eta at which a record of ``tokens`` tokens costs at most ``epsilon`` (at ``delta``) on ldpfed's
    strict ledger: the per-token metric-DP events of ``sampler`` (d_chi: L2 ``diameter``; the authors' per-coordinate
    sampler: L1) composed over the tokens, found by the randomizers' one calibration search."""
    from ldpfed.fed.randomizers.split_denoise import SplitDenoiseRandomizer
    from ldpfed.fed.randomizers.target import CalibrationTarget

    event = SplitDenoiseRandomizer.sampler_event
    return CalibrationTarget(epsilon, delta, 1).largest(lambda eta: event(sampler, eta, diameter, tokens), epsilon / (tokens * diameter))
