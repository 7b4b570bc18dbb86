"""One BLAS thread per process.

The linear algebra here is small (covariances of at most a few hundred dimensions), and
with several processes on few cores OpenBLAS's threads spin against each other: measured
on a 2-core machine, an eigendecomposition of a 384 x 384 matrix took 3.3 s with two
threads and 0.06 s with one.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits

_limited = False


def limit_blas_threads() -> None:
    """Use one BLAS thread in this process from now on (idempotent)."""
    global _limited
    if not _limited:
        threadpool_limits(limits=1, user_api="blas")
        _limited = True
