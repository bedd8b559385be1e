"""How many threads numpy's BLAS (and scipy's) runs, through threadpoolctl.

One, wherever a process makes many small BLAS calls or shares the cores with another: a multi-threaded
OpenBLAS keeps its threads spinning between calls, so two processes with two BLAS threads each on two cores
run at half speed or less. Measured on the 2-core machine: a training run's two reference searches (held-out
and teacher, N = 3, T = 2) side by side took 84 s each with two BLAS threads, 40 s with one; one alone, 36 s
and 39 s. The fit's optimisers (L-BFGS-B of scipy >= 1.15) slowed down a hundredfold on a busy machine.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from threadpoolctl import threadpool_limits


@contextmanager
def one_blas_thread(preload: Sequence[str] = ()) -> Iterator[None]:
    """BLAS on one thread inside the block. ``preload``: modules imported first (threadpoolctl limits
    only the libraries loaded when the block starts; numpy's is)."""
    for module in preload:
        importlib.import_module(module)
    with threadpool_limits(1, user_api="blas"):
        yield


def limit_blas_threads(threads: int) -> None:
    """BLAS on ``threads`` threads in this process from now on (a training run's ``runtime.torch_threads``,
    as ``torch.set_num_threads`` sets torch's)."""
    threadpool_limits(int(threads), user_api="blas")
