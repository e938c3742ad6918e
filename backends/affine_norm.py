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

from . import device_of
from .dtype_names import dtype_name
from .normalize import stats_in_parts
from .reductions import _TYPES, HELPERS, PART_HELPERS, columns

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


def batch_norm_cuda(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, y, s, mean, var) as the reference, in one kernel (three for many rows: in
    parts); `out` and `y` laid out as x."""
    shape, t = x.shape, x.dtype
    dtype = dtype_name(t)
    if (w is None or b is None or len(shape) < 2 or dtype not in _TYPES or w.dtype != t
            or b.dtype != t or not x.size):
        return NotImplemented
    col = columns(shape)
    if w.shape != (col.c,) or b.shape != (col.c,):
        return NotImplemented
    gpu = device_of(x)
    cp = gpu.cupy
    with gpu.current:
        rows = cp.ascontiguousarray(col.as_rows(x))
        out, y = cp.empty(col.rows, dtype=t), cp.empty(col.rows, dtype=t)
        s, mean, var = (cp.empty(col.keep, dtype=t), cp.empty(col.keep, dtype=t),
                        cp.empty(col.keep, dtype=t))
        w, b, e = cp.ascontiguousarray(w), cp.ascontiguousarray(b), t.type(eps)
        if col.part_rows is None:
            gpu.raw_kernel("bn_cols", BN_SOURCE, "bn_cols", dtype)(
                col.grid, (32, 32), (rows, w, b, out, y, s, mean, var, *col.sizes, e))
        else:
            sums, sq = stats_in_parts(gpu, dtype, rows, col)
            gpu.raw_kernel("bn_cols_parts", BN_SOURCE, "bn_cols_parts", dtype)(
                col.grid, (32, 32), (rows, w, b, sums, sq, out, y, s, mean, var, *col.sizes, e))
    return col.from_rows(out), col.from_rows(y), s, mean, var


def batch_norm_grad_cuda(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db) as the reference, in one kernel (two for many rows: in parts), from the
    forward's y (None: the reference's call)."""
    if y is None or w is None:
        return NotImplemented
    shape, t = g.shape, g.dtype
    dtype = dtype_name(t)
    if (len(shape) < 2 or dtype not in _TYPES or w.dtype != t or y.dtype != t or s.dtype != t
            or y.shape != shape or not g.size):
        return NotImplemented
    col = columns(shape)
    c = col.c
    if w.shape != (c,) or s.size != c:
        return NotImplemented
    gpu = device_of(g)
    cp = gpu.cupy
    with gpu.current:
        rows_g = cp.ascontiguousarray(col.as_rows(g))
        rows_y = cp.ascontiguousarray(col.as_rows(y))
        dx, dw, db = cp.empty(col.rows, dtype=t), cp.empty((c,), dtype=t), cp.empty((c,), dtype=t)
        w, s = cp.ascontiguousarray(w), cp.ascontiguousarray(s).reshape(c)
        if col.part_rows is None:
            gpu.raw_kernel("bn_grad_cols", BN_SOURCE, "bn_grad_cols", dtype)(
                col.grid, (32, 32), (rows_g, rows_y, w, s, dx, dw, db, *col.sizes))
        else:
            part = cp.empty((4, col.grid[1], c), dtype=t)
            gpu.raw_kernel("bn_grad_part", BN_SOURCE, "bn_grad_part", dtype)(
                col.grid, (32, 32), (rows_g, rows_y, w, part, *col.sizes))
            gpu.raw_kernel("bn_grad_cols_parts", BN_SOURCE, "bn_grad_cols_parts", dtype)(
                col.grid, (32, 32), (rows_g, rows_y, w, s, part, dx, dw, db, *col.sizes))
    return col.from_rows(dx), dw, db
