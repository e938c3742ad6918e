"""What needle's elementwise raw kernels on cuda share: a grid over n elements, and the test
that arrays can be walked as flat memory.

A cupy ufunc or ElementwiseKernel costs 11-15 us of host time a launch, a RawKernel 6.5 us
(benchmarks/launch_costs.py on an H100, seventh session): the kernels a training step
launches most often (ReLU and its adjoint, the bias adds, the window gathers, the running
statistics) are raw kernels over flat memory, each thread taking every stride-th element.
"""

from __future__ import annotations

import functools
from typing import Any

#: False: every wrapper using these kernels launches what it did before them (cupy's
#: ufuncs and ElementwiseKernels), to compare the two or should a raw kernel fail on a GPU
RAW = True

#: threads a block, and blocks a launch at most (each thread then loops over the rest)
THREADS = 256
MAX_BLOCKS = 1 << 16

#: a grid-stride loop over the n elements of a launch (T and n: the kernel's)
LOOP = ("for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; "
        "i += (long long)gridDim.x * blockDim.x)")


@functools.lru_cache(maxsize=1024)
def flat_grid(n: int) -> tuple[tuple[int], tuple[int]]:
    """(grid, block) of a launch over n elements (at least one block)."""
    return (max(1, min(MAX_BLOCKS, -(-n // THREADS))),), (THREADS,)


@functools.lru_cache(maxsize=1024)
def _dense(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    # positive strides that, sorted, are those of a C-ordered array of the shape so sorted
    dims = sorted((s, n) for s, n in zip(strides, shape) if n != 1)
    step = itemsize
    for s, n in dims:
        if s != step:
            return False
        step *= n
    return True


def dense(a: Any) -> bool:
    """Whether `a` covers its memory exactly, in some order of its axes (C-ordered, or a
    permuted view of a C-ordered array, as a convolution's NCHW output is): then an
    elementwise kernel may walk it as flat memory from its first element."""
    return _dense(a.shape, a.strides, a.itemsize)
