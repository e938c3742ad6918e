"""BatchNorm's forward and adjoints on cupy (fast versions of needle.ops.affine_norm's
BATCH_NORM and BATCH_NORM_GRAD): one kernel each way, keeping the input's memory layout.

(N, C) and NC... inputs are seen as (rows, C) (`rows.as_rows`: no copy where the input is
channels-last in memory, as a convolution's NCHW output is), one block per 32 channels.
The forward is the normalisation's kernel (normalize.py's `norm_cols`) that also writes the
affine map out = y w + b; the backward sums g w, g w y, g y and g in one pass and writes
dx = s (g w - mean(g w) - y mean(g w y)) in a second. Every product and sum is the
reference's, in its order: its normalisation and sum kernels' loops (compiled alike) and
its exact elementwise products (here `__fmul_rn` and `__fadd_rn`, which are never fused
into multiply-adds). Results come back laid out as the input was (an NCHW view of the
rows), so nothing downstream copies them: four launches backward before, two forward.

Many rows of few channels are summed in parts (normalize.py's three launches forward and two
backward, `reductions.stat_rows`), with the same device functions as the normalisation's
kernels in parts. So the numbers are the reference's to the bit, but for dw and db where
SUM's parts are not these: from 1,025 to 8,192 rows (SUM sums in parts, one block here) and
beyond 1,048,576 (SUM leaves them to cupy), where they agree to a few ulps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of, namespace
from .dtype_names import dtype_name
from .normalize import grad_parts, stats_in_parts
from .reductions import _TYPES, HELPERS, PART_HELPERS, stat_rows
from .rows import as_rows, from_rows

BN_SOURCE = HELPERS + r"""
// x (n, d) contiguous, normalised over axis 0 as norm_cols (its column_stats), and
// out = y w + b
extern "C" __global__ void bn_cols(const T* x, const T* w, const T* b, T* out, T* y, T* s,
                                   T* mean, T* var, long long n, long long d, T eps) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T mu, v;
    column_stats(x, n, d, j, ok, buf, &mu, &v);
    T sd = sqrt(v + eps);
    if (ok) {
        T wj = w[j], bj = b[j];
        for (long long i = threadIdx.y; i < n; i += 32) {
            T yv = (x[i * d + j] - mu) / sd;
            y[i * d + j] = yv;
            out[i * d + j] = add_rn(mul_rn(yv, wj), bj);
        }
        if (threadIdx.y == 0) {
            s[j] = (T)1 / sd;
            mean[j] = mu;
            var[j] = v;
        }
    }
}

// g, y (n, d) contiguous: dx = s (g w - mean(g w) - y mean(g w y)) as norm_grad_cols on
// g w, dw = sum(g y) and db = sum(g) as sum_cols
extern "C" __global__ void bn_grad_cols(const T* g, const T* y, const T* w, const T* s, T* dx,
                                        T* dw, T* db, long long n, long long d) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T wj = ok ? w[j] : (T)0;
    T a = 0, b = 0, gy = 0, gs = 0;
    if (ok) for (long long i = threadIdx.y; i < n; i += 32) {
        T gv = g[i * d + j], yv = y[i * d + j];
        T gw = mul_rn(gv, wj);
        a += gw;
        b += gw * yv;
        gy += mul_rn(gv, yv);
        gs += gv;
    }
    T mg = column_sum(a, buf) / (T)n;
    T mgy = column_sum(b, buf) / (T)n;
    T sum_gy = column_sum(gy, buf);
    T sum_g = column_sum(gs, buf);
    if (ok) {
        T sj = s[j];
        for (long long i = threadIdx.y; i < n; i += 32) {
            T gw = mul_rn(g[i * d + j], wj);
            dx[i * d + j] = sj * (gw - mg - y[i * d + j] * mgy);
        }
        if (threadIdx.y == 0) {
            dw[j] = sum_gy;
            db[j] = sum_g;
        }
    }
}
""" + PART_HELPERS + r"""
// many rows of few columns, in parts (after normalize.py's stats_in_parts): bn_cols' out, y,
// s, mean and var from the parts' sums
extern "C" __global__ void bn_cols_parts(const T* x, const T* w, const T* b, const T* sums,
                                         const T* sq, T* out, T* y, T* s, T* mean, T* var,
                                         long long n, long long d, long long rows,
                                         long long parts, T eps) {
    __shared__ T buf[32 * 33];
    cols_apply(x, w, b, sums, sq, out, y, s, mean, var, n, d, rows, parts, eps, buf);
}

// bn_grad_cols in parts: each part's sums of g w, g w y, g y and g, then dx, dw and db
extern "C" __global__ void bn_grad_part(const T* g, const T* y, const T* w, T* part,
                                        long long n, long long d, long long rows,
                                        long long parts) {
    __shared__ T buf[32 * 33];
    grad_part(g, y, w, part, n, d, rows, parts, buf);
}

extern "C" __global__ void bn_grad_cols_parts(const T* g, const T* y, const T* w, const T* s,
                                              const T* part, T* dx, T* dw, T* db, long long n,
                                              long long d, long long rows, long long parts) {
    __shared__ T buf[32 * 33];
    grad_cols_apply(g, y, w, s, part, dx, dw, db, n, d, rows, parts, buf);
}
"""


def _fits(x: Any, *others: Any) -> bool:
    return x.ndim >= 2 and dtype_name(x.dtype) in _TYPES and all(
        o is not None and o.dtype == x.dtype for o in others)


def _rows(xp: Any, a: Any) -> Any:
    """(N, C) as it is, NC... as (N * ..., C) rows."""
    return a if a.ndim == 2 else as_rows(xp, a, a.shape[1])


def _back(xp: Any, rows: Any, shape: tuple[int, ...]) -> Any:
    """Rows seen as the input's NC... `shape` again."""
    return rows if len(shape) == 2 else from_rows(xp, rows, shape)


def batch_norm_cuda(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, y, s, mean, var) as the reference, in one kernel; `out` and `y` laid out alike."""
    if not _fits(x, w, b) or x.shape[1] == 0 or x.size == 0:
        return NotImplemented
    shape, c = tuple(x.shape), x.shape[1]
    if tuple(w.shape) != (c,) or tuple(b.shape) != (c,):
        return NotImplemented
    xp, gpu = namespace(x), device_of(x)
    cp, dtype = gpu.cupy, dtype_name(x.dtype)
    n = x.size // c
    keep = (1, c) + (1,) * (x.ndim - 2)
    with gpu.current:
        rows = cp.ascontiguousarray(_rows(xp, x))
        out, y = (cp.empty(rows.shape, dtype=rows.dtype) for _ in range(2))
        s, mean, var = (cp.empty(keep, dtype=x.dtype) for _ in range(3))
        w, b, e = cp.ascontiguousarray(w), cp.ascontiguousarray(b), np.dtype(dtype).type(eps)
        if (part_rows := stat_rows(n, c)) is None:
            gpu.raw_kernel("bn_cols", BN_SOURCE, "bn_cols", dtype)(
                ((c + 31) // 32,), (32, 32),
                (rows, w, b, out, y, s, mean, var, np.int64(n), np.int64(c), e))
        else:
            grid, (sums, sq, *sizes), _ = stats_in_parts(gpu, dtype, rows, n, c, part_rows)
            gpu.raw_kernel("bn_cols_parts", BN_SOURCE, "bn_cols_parts", dtype)(
                grid, (32, 32), (rows, w, b, sums, sq, out, y, s, mean, var, *sizes, e))
    return _back(xp, out, shape), _back(xp, y, shape), s, mean, var


def batch_norm_grad_cuda(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db) as the reference, in one kernel, from the forward's y (None: the
    reference's call)."""
    if y is None or not _fits(g, w, y, s) or tuple(g.shape) != tuple(y.shape) or g.size == 0:
        return NotImplemented
    shape, c = tuple(g.shape), g.shape[1]
    if tuple(w.shape) != (c,) or s.size != c:
        return NotImplemented
    xp, gpu = namespace(g), device_of(g)
    cp, dtype = gpu.cupy, dtype_name(g.dtype)
    n = g.size // c
    with gpu.current:
        rows_g = cp.ascontiguousarray(_rows(xp, g))
        rows_y = cp.ascontiguousarray(_rows(xp, y))
        dx = cp.empty(rows_y.shape, dtype=rows_y.dtype)
        dw, db = cp.empty((c,), dtype=g.dtype), cp.empty((c,), dtype=g.dtype)
        w, s = cp.ascontiguousarray(w), cp.ascontiguousarray(s).reshape(c)
        if (part_rows := stat_rows(n, c)) is None:
            gpu.raw_kernel("bn_grad_cols", BN_SOURCE, "bn_grad_cols", dtype)(
                ((c + 31) // 32,), (32, 32),
                (rows_g, rows_y, w, s, dx, dw, db, np.int64(n), np.int64(c)))
        else:
            grid, sizes, part = grad_parts(gpu, dtype, n, c, part_rows)
            gpu.raw_kernel("bn_grad_part", BN_SOURCE, "bn_grad_part", dtype)(
                grid, (32, 32), (rows_g, rows_y, w, part, *sizes))
            gpu.raw_kernel("bn_grad_cols_parts", BN_SOURCE, "bn_grad_cols_parts", dtype)(
                grid, (32, 32), (rows_g, rows_y, w, s, part, dx, dw, db, *sizes))
    return _back(xp, dx, shape), dw, db
