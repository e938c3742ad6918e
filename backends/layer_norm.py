"""LayerNorm's forward and adjoints on cupy (fast versions of needle.ops.affine_norm's
LAYER_NORM and LAYER_NORM_GRAD): one kernel forward, two backward (three for a long sum).

x (..., C) is seen as (rows, C), normalised over its last axis. The forward is the
normalisation's row kernel (normalize.py's `norm_rows`, through the `row_stats` they share)
that also writes the affine map out = y w + b. The backward is `norm_grad_rows` on g w,
computed as it reads it, then dw = sum(g y) and db = sum(g) over the rows in one kernel
that sums as `sum_cols` (or, for many rows and few columns, as `sum_cols_part` and then the
parts: sums.py's choice, `column_parts`). Every product and sum is the reference's, in its
order: its kernels' loops (compiled alike) and its exact elementwise products (`mul_rn`,
`add_rn`: `__fmul_rn` and `__fadd_rn`, never fused into multiply-adds). So the numbers are
the reference's to the bit: three launches forward before (norm_rows, a product and a sum),
five to seven backward.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

from . import device_of
from .dtype_names import dtype_name
from .reductions import _PART_ROWS, _TYPES, HELPERS, _threads, column_parts

SOURCE = HELPERS + r"""
// x (rows, d) contiguous, one block per row: norm_rows, and out = y w + b
extern "C" __global__ void ln_rows(const T* x, const T* w, const T* b, T* out, T* y, T* s,
                                   T* mean, long long d, T eps) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* xr = x + r * d;
    T mu, v;
    row_stats(xr, d, buf, &mu, &v);
    T sd = sqrt(v + eps);
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T yv = (xr[i] - mu) / sd;
        y[r * d + i] = yv;
        out[r * d + i] = add_rn(mul_rn(yv, w[i]), b[i]);
    }
    if (threadIdx.x == 0) {
        s[r] = (T)1 / sd;
        mean[r] = mu;
    }
}

// dx = s (gw - mean(gw) - y mean(gw y)) per row, gw = g w: norm_grad_rows on g w
extern "C" __global__ void ln_grad_rows(const T* g, const T* y, const T* w, const T* s, T* dx,
                                        long long d) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* gr = g + r * d;
    const T* yr = y + r * d;
    T a = 0, b = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T gw = mul_rn(gr[i], w[i]);
        a += gw;
        b += gw * yr[i];
    }
    T mg = block_sum(a, buf) / (T)d;
    T mgy = block_sum(b, buf) / (T)d;
    T sr = s[r];
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        dx[r * d + i] = sr * (mul_rn(gr[i], w[i]) - mg - yr[i] * mgy);
}

// sum(g y) and sum(g) over rows [blockIdx.y * rows, (blockIdx.y + 1) * rows) of (n, d):
// sum_cols_part's loop on the two (all rows at once: sum_cols's)
extern "C" __global__ void ln_sums(const T* g, const T* y, T* dw, T* db, long long n,
                                   long long d, long long rows) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    long long start = blockIdx.y * rows, stop = start + rows < n ? start + rows : n;
    T aw = 0, ab = 0;
    if (j < d) for (long long i = start + threadIdx.y; i < stop; i += 32) {
        T gv = g[i * d + j];
        aw += mul_rn(gv, y[i * d + j]);
        ab += gv;
    }
    T tw = column_sum(aw, buf);
    T tb = column_sum(ab, buf);
    if (j < d && threadIdx.y == 0) {
        dw[blockIdx.y * d + j] = tw;
        db[blockIdx.y * d + j] = tb;
    }
}

// the parts of both: sum_cols on each of pw and pb (n, d)
extern "C" __global__ void sum_cols2(const T* pw, const T* pb, T* dw, T* db, long long n,
                                     long long d) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    T aw = 0, ab = 0;
    if (j < d) for (long long i = threadIdx.y; i < n; i += 32) {
        aw += pw[i * d + j];
        ab += pb[i * d + j];
    }
    T tw = column_sum(aw, buf);
    T tb = column_sum(ab, buf);
    if (j < d && threadIdx.y == 0) {
        dw[j] = tw;
        db[j] = tb;
    }
}
"""


class _Rows(NamedTuple):
    """An (..., C) array of some shape seen as (n, d) rows, and its kernels' launch: worked
    out once per shape (`_rows`)."""

    n: int
    d: int
    keep: tuple[int, ...]  # the statistics' shape, keepdims: (..., 1)
    grid: tuple[int]  # (n,): a block a row
    block: tuple[int]
    d64: Any  # d as the kernels' int64
    chunks: int | None  # column_parts(n, d): ln_sums' parts, or None (the reference's sums)
    sums: tuple  # ln_sums' (grid, trailing int64 arguments) and sum_cols2's, where in parts


@functools.lru_cache(maxsize=512)
def _rows(shape: tuple[int, ...]) -> _Rows:
    d = shape[-1]
    n = math.prod(shape) // d
    i64 = np.int64
    chunks = column_parts(n, d)
    blocks = (d + 31) // 32
    if chunks == 1:
        sums = ((blocks, 1), (i64(n), i64(d), i64(n)))
    elif chunks is not None:
        sums = ((blocks, chunks), (i64(n), i64(d), i64(_PART_ROWS)), (blocks,),
                (i64(chunks), i64(d)))
    else:
        sums = ()
    return _Rows(n, d, tuple(shape[:-1]) + (1,), (n,), (_threads(d),), i64(d), chunks, sums)


def layer_norm_cuda(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, y, s, mean) as the reference, in one kernel."""
    shape, t = x.shape, x.dtype
    dtype = dtype_name(t)
    if (w is None or b is None or len(shape) < 2 or not x.size or dtype not in _TYPES
            or w.dtype != t or b.dtype != t):
        return NotImplemented
    rows = _rows(shape)
    if w.shape != (rows.d,) or b.shape != (rows.d,):
        return NotImplemented
    gpu = device_of(x)
    cp = gpu.cupy
    with gpu.current:
        x = cp.ascontiguousarray(x)
        out, y = cp.empty(shape, dtype=t), cp.empty(shape, dtype=t)
        s, mean = cp.empty(rows.keep, dtype=t), cp.empty(rows.keep, dtype=t)
        gpu.raw_kernel("ln_rows", SOURCE, "ln_rows", dtype)(
            rows.grid, rows.block, (x, cp.ascontiguousarray(w), cp.ascontiguousarray(b), out,
                                    y, s, mean, rows.d64, t.type(eps)))
    return out, y, s, mean


def layer_norm_grad_cuda(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db) as the reference, in two kernels (three for many rows and few columns),
    from the forward's y (None: the reference's call)."""
    if y is None or w is None:
        return NotImplemented
    shape, t = g.shape, g.dtype
    dtype = dtype_name(t)
    if (len(shape) < 2 or not g.size or dtype not in _TYPES or w.dtype != t or y.dtype != t
            or s.dtype != t or y.shape != shape):
        return NotImplemented
    rows = _rows(shape)
    d = rows.d
    if w.shape != (d,) or s.size != rows.n or rows.chunks is None:
        return NotImplemented  # (the reference's sums are cupy's there)
    gpu = device_of(g)
    cp = gpu.cupy
    with gpu.current:
        g, y, w = cp.ascontiguousarray(g), cp.ascontiguousarray(y), cp.ascontiguousarray(w)
        dx = cp.empty(shape, dtype=t)
        gpu.raw_kernel("ln_grad_rows", SOURCE, "ln_grad_rows", dtype)(
            rows.grid, rows.block, (g, y, w, cp.ascontiguousarray(s), dx, rows.d64))
        dw, db = cp.empty((d,), dtype=t), cp.empty((d,), dtype=t)
        sums = gpu.raw_kernel("ln_sums", SOURCE, "ln_sums", dtype)
        if rows.chunks == 1:
            grid, sizes = rows.sums
            sums(grid, (32, 32), (g, y, dw, db, *sizes))
        else:
            grid, sizes, grid2, sizes2 = rows.sums
            pw, pb = cp.empty((rows.chunks, d), dtype=t), cp.empty((rows.chunks, d), dtype=t)
            sums(grid, (32, 32), (g, y, pw, pb, *sizes))
            gpu.raw_kernel("sum_cols2", SOURCE, "sum_cols2", dtype)(
                grid2, (32, 32), (pw, pb, dw, db, *sizes2))
    return dx, dw, db
