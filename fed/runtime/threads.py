"""One BLAS thread per process.

The linear algebra here is small (covariances of at most a few hundred dimensions), and
with several processes on few cores OpenBLAS's threads spin against each other: measured
on a 2-core machine, an eigendecomposition of a 384 x 384 matrix took 3.3 s with two
threads and 0.06 s with one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

_limited = False


def limit_blas_threads() -> None:
    """Use one BLAS thread in this process from now on (idempotent)."""
    global _limited
    if not _limited:
        threadpool_limits(limits=1, user_api="blas")
        _limited = True


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's intra-op threads set to one inside the block, restored after.

    threadpoolctl does not reach torch's own thread pool. Small transformer passes beside other
    processes on few cores spin just as BLAS does: on this 2-core machine, with one other busy
    process, MiniLM's upper layers on 300 records of 16 tokens took 10.7 s with two threads and
    4.0 s with one; a 2-layer denoiser's test 168 s and 2.5 s.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
