"""Shared helpers of the randomizer tests: a fast distinguishing audit."""

from __future__ import annotations

import numpy as np

from ldpfed.fed.privacy.audit import AuditResult
from ldpfed.fed.randomizers.auditing import audit, case_for

DELTA = 1e-5


def fast_audit(
    randomizer: object, dim: int, claimed: float, samples: int = 20_000, seed: int = 0, delta: float = DELTA
) -> AuditResult:
    """The likelihood-ratio audit of ``randomizer`` on its worst pair at ``delta``, with few samples (well under a second)."""
    return audit(case_for(randomizer, dim, claimed), delta, samples, np.random.default_rng(seed))
