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

from typing import Any

import numpy as np

from . import device_of, namespace
from .dtype_names import dtype_name
from .reductions import (
    _MAX_TERMS_PER_BLOCK,
    _PART_ROWS,
    _TYPES,
    HELPERS,
    _layout,
    _threads,
    column_parts,
)
from .rows import as_rows, channels

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

def sum_cuda(a: Any, axes: tuple[int, ...] | None, keepdims: bool = False) -> Any:
    """The sum of `a` over the non-negative `axes` (None: all) in one kernel."""
    shape = tuple(a.shape)
    axes = tuple(range(len(shape))) if axes is None else tuple(axes)
    c = channels(shape, axes)
    if c is not None and dtype_name(a.dtype) in _TYPES:  # BatchNorm's and NCHW bias adjoints' sums
        out = sum_cuda(as_rows(namespace(a), a, c), (0,))  # over every axis but 1: as rows
        if out is NotImplemented or not keepdims:
            return out
        return out.reshape(tuple(1 if i in axes else n for i, n in enumerate(shape)))
    layout = _layout(shape, axes)
    dtype = dtype_name(a.dtype)
    if layout is None or dtype not in _TYPES:
        return NotImplemented
    how, n, d = layout
    if how == "rows":
        chunks = None if n < 64 and d > _MAX_TERMS_PER_BLOCK else 1  # (few long rows: cupy)
    else:
        chunks = column_parts(n, d)
    if chunks is None:
        return NotImplemented
    gpu = device_of(a)
    cp = gpu.cupy
    out_shape = (tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdims
                 else tuple(s for i, s in enumerate(shape) if i not in axes))
    i64 = np.int64
    with gpu.current:
        a = cp.ascontiguousarray(a)
        out = cp.empty(out_shape, dtype=a.dtype)
        kernel = gpu.raw_kernel(f"sum_{how}", SUM_SOURCE, f"sum_{how}", dtype)
        if how == "rows":
            kernel((n,), (_threads(d),), (a, out, i64(d)))
        elif chunks == 1:
            kernel(((d + 31) // 32,), (32, 32), (a, out, i64(n), i64(d)))
        else:
            part = cp.empty((chunks, d), dtype=a.dtype)
            gpu.raw_kernel("sum_cols_part", SUM_SOURCE, "sum_cols_part", dtype)(
                ((d + 31) // 32, chunks), (32, 32), (a, part, i64(n), i64(d), i64(_PART_ROWS)))
            kernel(((d + 31) // 32,), (32, 32), (part, out, i64(chunks), i64(d)))
    return out
