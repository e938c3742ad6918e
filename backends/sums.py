"""Sums over the leading or trailing axes on cuda, one kernel each (the fast version of
needle.kernels.SUM).

A cupy reduction costs 30-70 us of host time to launch (seen in H100 profiles: about 25 of
them in a training step, the bias gradients' and the softmaxes' sums); these are plain
kernel launches. One block sums each row (trailing axes) or each 32 columns (leading axes),
in a fixed order of its own: deterministic, a few float32 ulps from cupy's order. Layouts
with too little parallelism for one block per output (a few outputs of many terms), other
dtypes and empty sums go to cupy (NotImplemented: the reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of, namespace
from .dtype_names import dtype_name
from .normalize import _TYPES, HELPERS, _layout, _threads
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

extern "C" __global__ void sum_cols(const T* x, T* out, long long n, long long d) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    T acc = 0;
    if (j < d) for (long long i = threadIdx.y; i < n; i += 32) acc += x[i * d + j];
    T total = column_sum(acc, buf);
    if (j < d && threadIdx.y == 0) out[j] = total;
}
"""

#: a block sums at most this many terms where there are few blocks (else cupy's reduction,
#: which splits long sums over many blocks, is faster)
_MAX_TERMS_PER_BLOCK = 1 << 15


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
    blocks = n if how == "rows" else (d + 31) // 32
    terms = d if how == "rows" else 32 * n
    if blocks < 64 and terms > _MAX_TERMS_PER_BLOCK:
        return NotImplemented
    gpu = device_of(a)
    cp = gpu.cupy
    out_shape = (tuple(1 if i in axes else s for i, s in enumerate(shape)) if keepdims
                 else tuple(s for i, s in enumerate(shape) if i not in axes))
    with gpu.native:
        a = cp.ascontiguousarray(a)
        out = cp.empty(out_shape, dtype=a.dtype)
        kernel = gpu.raw_kernel(f"sum_{how}", SUM_SOURCE, f"sum_{how}", dtype)
        if how == "rows":
            kernel((n,), (_threads(d),), (a, out, np.int64(d)))
        else:
            kernel(((d + 31) // 32,), (32, 32), (a, out, np.int64(n), np.int64(d)))
    return out
