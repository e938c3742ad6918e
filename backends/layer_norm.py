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

from typing import Any

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


def _fits(x: Any, *others: Any) -> bool:
    """x of 2 or more axes, none empty, and the others (C,) vectors of its float dtype."""
    if x.ndim < 2 or x.size == 0 or dtype_name(x.dtype) not in _TYPES:
        return False
    c = x.shape[-1]
    return all(o is not None and o.dtype == x.dtype and tuple(o.shape) == (c,) for o in others)


def layer_norm_cuda(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, y, s, mean) as the reference, in one kernel."""
    if not _fits(x, w, b):
        return NotImplemented
    gpu, dtype, d = device_of(x), dtype_name(x.dtype), x.shape[-1]
    cp = gpu.cupy
    keep = tuple(x.shape[:-1]) + (1,)
    with gpu.current:
        x = cp.ascontiguousarray(x)
        out, y = cp.empty(x.shape, dtype=x.dtype), cp.empty(x.shape, dtype=x.dtype)
        s, mean = cp.empty(keep, dtype=x.dtype), cp.empty(keep, dtype=x.dtype)
        gpu.raw_kernel("ln_rows", SOURCE, "ln_rows", dtype)(
            (x.size // d,), (_threads(d),),
            (x, cp.ascontiguousarray(w), cp.ascontiguousarray(b), out, y, s, mean,
             np.int64(d), np.dtype(dtype).type(eps)))
    return out, y, s, mean


def layer_norm_grad_cuda(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db) as the reference, in two kernels (three for many rows and few columns),
    from the forward's y (None: the reference's call)."""
    if y is None or not _fits(g, w) or tuple(y.shape) != tuple(g.shape) or y.dtype != g.dtype:
        return NotImplemented
    d = g.shape[-1]
    n = g.size // d
    chunks = column_parts(n, d)
    if chunks is None or s.dtype != g.dtype or s.size != n:
        return NotImplemented  # (the reference's sums are cupy's there)
    gpu, dtype = device_of(g), dtype_name(g.dtype)
    cp, i64 = gpu.cupy, np.int64
    with gpu.current:
        g, y, w = cp.ascontiguousarray(g), cp.ascontiguousarray(y), cp.ascontiguousarray(w)
        dx = cp.empty(g.shape, dtype=g.dtype)
        gpu.raw_kernel("ln_grad_rows", SOURCE, "ln_grad_rows", dtype)(
            (n,), (_threads(d),), (g, y, w, cp.ascontiguousarray(s), dx, i64(d)))
        dw, db = cp.empty((d,), dtype=g.dtype), cp.empty((d,), dtype=g.dtype)
        sums = gpu.raw_kernel("ln_sums", SOURCE, "ln_sums", dtype)
        if chunks == 1:
            sums(((d + 31) // 32, 1), (32, 32), (g, y, dw, db, i64(n), i64(d), i64(n)))
        else:
            pw, pb = cp.empty((chunks, d), dtype=g.dtype), cp.empty((chunks, d), dtype=g.dtype)
            sums(((d + 31) // 32, chunks), (32, 32),
                 (g, y, pw, pb, i64(n), i64(d), i64(_PART_ROWS)))
            gpu.raw_kernel("sum_cols2", SOURCE, "sum_cols2", dtype)(
                ((d + 31) // 32,), (32, 32), (pw, pb, dw, db, i64(chunks), i64(d)))
    return dx, dw, db
