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
def _walk(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple | None:
    # positive strides that, sorted, are those of a C-ordered array of the shape so sorted;
    # axes of length 1 take no part (their strides are arbitrary)
    axes = tuple((i, s) for i, (s, n) in enumerate(zip(strides, shape)) if n != 1)
    step = itemsize
    for s, n in sorted((s, shape[i]) for i, s in axes):
        if s != step:
            return None
        step *= n
    return axes


def walk(a: Any) -> tuple | None:
    """How an elementwise kernel walking `a` as flat memory from its first element meets its
    elements ((axis, stride) of each axis longer than 1), or None where it cannot: `a` does
    not cover its memory exactly in some order of its axes (C-ordered, or a permuted view of
    a C-ordered array, as a convolution's NCHW output is). Arrays of one shape and one walk
    have their elements at the same places."""
    return _walk(a.shape, a.strides, a.itemsize)


def dense(a: Any) -> bool:
    """Whether an elementwise kernel may walk `a` as flat memory (`walk`)."""
    return _walk(a.shape, a.strides, a.itemsize) is not None


def empty_as(cp: Any, a: Any) -> Any:
    """A fresh array laid out as `a` (one that `dense` allows: its strides then cover memory
    of a.nbytes exactly): one allocation from cupy's pool, where cupy's empty_like works the
    layout out again in Python and allocates twice (7.3 us of host time against 4.1 for
    cupy.empty on the H100, benchmarks/launch_costs.py)."""
    return cp.ndarray(a.shape, a.dtype, cp.cuda.alloc(a.nbytes), a.strides)
