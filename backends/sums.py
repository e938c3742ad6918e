"""Sums over the leading or trailing axes on cuda, one kernel each (the fast version of
needle.kernels.SUM).

A cupy reduction costs 30-70 us of host time to launch (seen in H100 profiles: about 25 of
them in a training step, the bias gradients' and the softmaxes' sums); these are plain
kernel launches. One block sums each row (trailing axes) or each 32 columns (leading axes),
in a fixed order of its own: deterministic, a few float32 ulps from cupy's order. A long
sum over few columns (a convolution's bias adjoint: N * H * W rows, a few dozen channels) is
summed in parts of 1,024 rows, a block each, then the parts. Few long rows, other dtypes and
empty sums go to cupy (NotImplemented: the reference).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from . import device_of
from .dtype_names import dtype_name
from .reductions import (
    _MAX_TERMS_PER_BLOCK,
    _PART_ROWS,
    _TYPES,
    HELPERS,
    Columns,
    _layout,
    _threads,
    column_parts,
    columns,
)
from .rows import channels

SUM_SOURCE = HELPERS + r"""
extern "C" __global__ void sum_rows(const T* x, T* out, long long d) {
    __shared__ T buf[256];
    const T* xr = x + (long long)blockIdx.x * d;
    T acc = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) acc += xr[i];
    T total = block_sum(acc, buf);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}

// the same over rows [blockIdx.y * rows, (blockIdx.y + 1) * rows): one partial sum per block
extern "C" __global__ void sum_cols_part(const T* x, T* out, long long n, long long d,
                                         long long rows) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    long long start = blockIdx.y * rows, stop = start + rows < n ? start + rows : n;
    T acc = 0;
    if (j < d) for (long long i = start + threadIdx.y; i < stop; i += 32) acc += x[i * d + j];
    T total = column_sum(acc, buf);
    if (j < d && threadIdx.y == 0) out[blockIdx.y * d + j] = total;
}

extern "C" __global__ void sum_cols(const T* x, T* out, long long n, long long d) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    T acc = 0;
    if (j < d) for (long long i = threadIdx.y; i < n; i += 32) acc += x[i * d + j];
    T total = column_sum(acc, buf);
    if (j < d && threadIdx.y == 0) out[j] = total;
}
"""

class _Plan(NamedTuple):
    """How sum_cuda sums an array of one shape over some axes (worked out once: `_plan`)."""

    col: Columns | None  # NC... summed over every axis but 1: seen as its (n, c) rows
    entry: str  # sum_rows or sum_cols
    grid: tuple[int, ...]
    block: tuple[int, ...]
    sizes: tuple  # the kernel's int64 arguments after (x, out)
    out_shape: tuple[int, ...]  # what the kernel writes
    shape: tuple[int, ...] | None  # the result's shape, where not out_shape (keepdims)
    parts: tuple | None  # in parts: (the parts' shape, sum_cols_part's grid and sizes)


@functools.lru_cache(maxsize=512)
def _plan(shape: tuple[int, ...], axes: tuple[int, ...] | None, keepdims: bool) -> _Plan | None:
    """sum_cuda's kernels for an array of `shape`, or None (cupy's sum: the reference)."""
    axes = tuple(range(len(shape))) if axes is None else axes
    kept = tuple(1 if i in axes else k for i, k in enumerate(shape))
    col = None
    if channels(shape, axes) is not None:  # BatchNorm's and NCHW bias adjoints' sums
        col = columns(shape)  # over every axis but 1: as (n, c) rows over axis 0
        layout = ("cols", col.n, col.c) if col.n else None
        out_shape, result = (col.c,), kept if keepdims else None
    else:
        layout = _layout(shape, axes)
        out_shape = kept if keepdims else tuple(k for i, k in enumerate(shape) if i not in axes)
        result = None
    if layout is None:
        return None
    how, n, d = layout
    i64 = np.int64
    if how == "rows":
        if n < 64 and d > _MAX_TERMS_PER_BLOCK:  # (few long rows: cupy)
            return None
        return _Plan(col, "sum_rows", (n,), (_threads(d),), (i64(d),), out_shape, result, None)
    chunks = column_parts(n, d)
    if chunks is None:
        return None
    grid = ((d + 31) // 32,)
    if chunks == 1:
        return _Plan(col, "sum_cols", grid, (32, 32), (i64(n), i64(d)), out_shape, result, None)
    parts = ((chunks, d), (grid[0], chunks), (i64(n), i64(d), i64(_PART_ROWS)))
    return _Plan(col, "sum_cols", grid, (32, 32), (i64(chunks), i64(d)), out_shape, result,
                 parts)


def sum_cuda(a: Any, axes: tuple[int, ...] | None, keepdims: bool = False) -> Any:
    """The sum of `a` over the non-negative `axes` (None: all) in one kernel (two for a long
    sum over few columns)."""
    dtype = dtype_name(a.dtype)
    if dtype not in _TYPES:
        return NotImplemented
    plan = _plan(a.shape, None if axes is None else tuple(axes), keepdims)
    if plan is None:
        return NotImplemented
    gpu = device_of(a)
    cp = gpu.cupy
    with gpu.current:
        x = cp.ascontiguousarray(a if plan.col is None else plan.col.as_rows(a))
        out = cp.empty(plan.out_shape, dtype=x.dtype)
        kernel = gpu.raw_kernel(plan.entry, SUM_SOURCE, plan.entry, dtype)
        if plan.parts is None:
            kernel(plan.grid, plan.block, (x, out, *plan.sizes))
        else:
            parts, grid, sizes = plan.parts
            part = cp.empty(parts, dtype=x.dtype)
            gpu.raw_kernel("sum_cols_part", SUM_SOURCE, "sum_cols_part", dtype)(
                grid, (32, 32), (x, part, *sizes))
            kernel(plan.grid, plan.block, (part, out, *plan.sizes))
    return out if plan.shape is None else out.reshape(plan.shape)
