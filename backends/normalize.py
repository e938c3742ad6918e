"""Standardisation on cuda, one kernel forward and one backward (fast versions of
needle.ops.norm.NORMALIZE and NORMALIZE_GRAD).

The portable op makes about eight arrays forward (two of them cupy reductions, each tens of
microseconds to launch) and six backward; here one block reduces each row (the last axes:
LayerNorm) or each group of 32 columns (the first axes: BatchNorm), in the portable op's
two passes (mean, then the mean square of x - mean) and float32 operations, but summing in
its own order: the results agree with the reference to a few float32 ulps, not to the bit.
Other layouts, dtypes and empty arrays run the reference.

Many rows of few columns (a BatchNorm2d's N * H * W rows of C channels: 65,536 rows of 16 in
ResNet9's first at batch 1,024) would leave the whole sum to one or two blocks, one SM each,
looping over every row: the statistics are then summed in parts of 1,024 rows, a block per
32 columns and part, in three launches forward (each part's sums of x: SUM's
sum_cols_part; each part's sums of (x - mean)^2; then y) and two backward, each block
summing the parts' sums again in sum_cols' order (`reductions.stat_rows` says where).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of, elementwise, namespace
from .dtype_names import dtype_name
from .elementwise import LOOP, flat_grid
from .reductions import _TYPES, HELPERS, PART_HELPERS, Columns, _layout, _threads, columns
from .rows import as_rows, channels, from_rows
from .sums import SUM_SOURCE

SOURCE = HELPERS + r"""
// x (rows, d) contiguous, one block per row: y = (x - mean) / sqrt(var + eps), s = 1 / sqrt(..)
extern "C" __global__ void norm_rows(const T* x, T* y, T* s, T* mean, T* var,
                                     long long d, T eps) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* xr = x + r * d;
    T* yr = y + r * d;
    T mu, v;
    row_stats(xr, d, buf, &mu, &v);
    T sd = sqrt(v + eps);
    for (long long i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mu) / sd;
    if (threadIdx.x == 0) {
        s[r] = (T)1 / sd;
        mean[r] = mu;
        var[r] = v;
    }
}

// x (n, d) contiguous, normalised over axis 0: block (32, 32) per 32 columns
extern "C" __global__ void norm_cols(const T* x, T* y, T* s, T* mean, T* var,
                                     long long n, long long d, T eps) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T mu, v;
    column_stats(x, n, d, j, ok, buf, &mu, &v);
    T sd = sqrt(v + eps);
    if (ok) {
        for (long long i = threadIdx.y; i < n; i += 32) y[i * d + j] = (x[i * d + j] - mu) / sd;
        if (threadIdx.y == 0) {
            s[j] = (T)1 / sd;
            mean[j] = mu;
            var[j] = v;
        }
    }
}

// dx = s (g - mean(g) - y mean(g y)) per row
extern "C" __global__ void norm_grad_rows(const T* g, const T* y, const T* s, T* dx,
                                          long long d) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* gr = g + r * d;
    const T* yr = y + r * d;
    T a = 0, b = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        a += gr[i];
        b += gr[i] * yr[i];
    }
    T mg = block_sum(a, buf) / (T)d;
    T mgy = block_sum(b, buf) / (T)d;
    T sr = s[r];
    for (long long i = threadIdx.x; i < d; i += blockDim.x)
        dx[r * d + i] = sr * (gr[i] - mg - yr[i] * mgy);
}

// the same per column of (n, d)
extern "C" __global__ void norm_grad_cols(const T* g, const T* y, const T* s, T* dx,
                                          long long n, long long d) {
    __shared__ T buf[32 * 33];
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T a = 0, b = 0;
    if (ok) for (long long i = threadIdx.y; i < n; i += 32) {
        a += g[i * d + j];
        b += g[i * d + j] * y[i * d + j];
    }
    T mg = column_sum(a, buf) / (T)n;
    T mgy = column_sum(b, buf) / (T)n;
    if (ok) {
        T sj = s[j];
        for (long long i = threadIdx.y; i < n; i += 32)
            dx[i * d + j] = sj * (g[i * d + j] - mg - y[i * d + j] * mgy);
    }
}
""" + PART_HELPERS + r"""
// BatchNorm's running statistics, each new = old (1 - m) + batch m in the portable rule's
// three roundings (mul_rn, add_rn: no multiply-add), over n elements of flat memory
extern "C" __global__ void moving_averages(const T* om, const T* bm, const T* ov, const T* bv,
                                           T* rm, T* rv, T omm, T mm, long long n) {
    LOOP {
        rm[i] = add_rn(mul_rn(om[i], omm), mul_rn(bm[i], mm));
        rv[i] = add_rn(mul_rn(ov[i], omm), mul_rn(bv[i], mm));
    }
}

// many rows of few columns, in parts: after sum_cols_part, each part's sum of (x - mean)^2
extern "C" __global__ void sq_cols_part(const T* x, const T* sums, T* sq, long long n,
                                        long long d, long long rows, long long parts) {
    __shared__ T buf[32 * 33];
    sq_part(x, sums, sq, n, d, rows, parts, buf);
}

// then norm_cols' y, s, mean and var from the parts' sums
extern "C" __global__ void norm_cols_parts(const T* x, const T* sums, const T* sq, T* y, T* s,
                                           T* mean, T* var, long long n, long long d,
                                           long long rows, long long parts, T eps) {
    __shared__ T buf[32 * 33];
    cols_apply(x, nullptr, nullptr, sums, sq, nullptr, y, s, mean, var, n, d, rows, parts,
               eps, buf);
}

// norm_grad_cols in parts: each part's sums of g and g y, then dx from them
extern "C" __global__ void norm_grad_part(const T* g, const T* y, T* part, long long n,
                                          long long d, long long rows, long long parts) {
    __shared__ T buf[32 * 33];
    grad_part(g, y, nullptr, part, n, d, rows, parts, buf);
}

extern "C" __global__ void norm_grad_cols_parts(const T* g, const T* y, const T* s,
                                                const T* part, T* dx, long long n, long long d,
                                                long long rows, long long parts) {
    __shared__ T buf[32 * 33];
    grad_cols_apply(g, y, nullptr, s, part, dx, nullptr, nullptr, n, d, rows, parts, buf);
}
""".replace("LOOP", LOOP)


def _kernel(gpu: Any, dtype: str, entry: str) -> Any:
    return gpu.raw_kernel(entry, SOURCE, entry, dtype)


def stats_in_parts(gpu: Any, dtype: str, x: Any, col: Columns) -> tuple[Any, Any]:
    """The first two of the three passes over the rows x (n, c) of `col` (contiguous) in
    parts: each part's column sums of x (SUM's sum_cols_part), then of (x - mean)^2. Returns
    both, (parts, c) each: what the third pass (norm_cols_parts, bn_cols_parts) reads."""
    both = gpu.cupy.empty((2, col.grid[1], col.c), dtype=x.dtype)
    sums, sq = both[0], both[1]
    gpu.raw_kernel("sum_cols_part", SUM_SOURCE, "sum_cols_part", dtype)(
        col.grid, (32, 32), (x, sums, *col.sizes[:3]))
    _kernel(gpu, dtype, "sq_cols_part")(col.grid, (32, 32), (x, sums, sq, *col.sizes))
    return sums, sq


def normalize_cuda(x: Any, axes: tuple[int, ...], eps: float) -> tuple[Any, Any, Any, Any]:
    """(y, s, mean, var) as the reference gives them, in one kernel (BatchNorm's NC...
    layout, as the reference: the columns kernel on (N * ..., C) rows)."""
    c = channels(tuple(x.shape), axes)
    if c is not None and dtype_name(x.dtype) in _TYPES:
        cp = namespace(x)  # the array-API namespace (permute_dims)
        out = normalize_cuda(as_rows(cp, x, c), (0,), eps)
        if out is NotImplemented:  # (an empty array)
            return out
        y, s, mean, var = out
        keep = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        return (from_rows(cp, y, tuple(x.shape)), s.reshape(keep), mean.reshape(keep),
                var.reshape(keep))
    layout = _layout(tuple(x.shape), axes)
    dtype = dtype_name(x.dtype)
    if layout is None or dtype not in _TYPES:
        return NotImplemented  # the reference's call
    gpu = device_of(x)
    cp = gpu.cupy
    how, n, d = layout
    keep = tuple(1 if i in axes else size for i, size in enumerate(x.shape))
    with gpu.current:
        x = cp.ascontiguousarray(x)
        y = cp.empty(x.shape, dtype=x.dtype)
        s, mean, var = (cp.empty(keep, dtype=x.dtype) for _ in range(3))
        e = np.dtype(dtype).type(eps)
        if how == "rows":
            _kernel(gpu, dtype, "norm_rows")((n,), (_threads(d),),
                                             (x, y, s, mean, var, np.int64(d), e))
        elif (col := columns((n, d))).part_rows is None:
            _kernel(gpu, dtype, "norm_cols")(col.grid, (32, 32),
                                             (x, y, s, mean, var, *col.sizes, e))
        else:
            sums, sq = stats_in_parts(gpu, dtype, x, col)
            _kernel(gpu, dtype, "norm_cols_parts")(col.grid, (32, 32),
                                                   (x, sums, sq, y, s, mean, var, *col.sizes, e))
    return y, s, mean, var


def normalize_grad_cuda(g: Any, y: Any, s: Any, axes: tuple[int, ...]) -> Any:
    """s (g - mean(g) - y mean(g y)) over `axes`, in one kernel (BatchNorm's NC... layout
    as rows, as the reference)."""
    c = channels(tuple(y.shape), axes)
    if c is not None and tuple(g.shape) == tuple(y.shape) and s.size == c:
        cp = namespace(g)
        out = normalize_grad_cuda(as_rows(cp, g, c), as_rows(cp, y, c), s.reshape(1, c), (0,))
        return out if out is NotImplemented else from_rows(cp, out, tuple(g.shape))
    layout = _layout(tuple(y.shape), axes)
    dtype = dtype_name(y.dtype)
    if (layout is None or dtype not in _TYPES or g.dtype != y.dtype or s.dtype != y.dtype
            or tuple(g.shape) != tuple(y.shape)):
        return NotImplemented  # the reference's call
    gpu = device_of(g)
    cp = gpu.cupy
    how, n, d = layout
    with gpu.current:
        g, y, s = (cp.ascontiguousarray(a) for a in (g, y, s))
        dx = cp.empty(y.shape, dtype=y.dtype)
        if how == "rows":
            _kernel(gpu, dtype, "norm_grad_rows")((n,), (_threads(d),), (g, y, s, dx, np.int64(d)))
        elif (col := columns((n, d))).part_rows is None:
            _kernel(gpu, dtype, "norm_grad_cols")(col.grid, (32, 32), (g, y, s, dx, *col.sizes))
        else:
            part = cp.empty((4, col.grid[1], d), dtype=y.dtype)
            _kernel(gpu, dtype, "norm_grad_part")(col.grid, (32, 32), (g, y, part, *col.sizes))
            _kernel(gpu, dtype, "norm_grad_cols_parts")(col.grid, (32, 32),
                                                        (g, y, s, part, dx, *col.sizes))
    return dx


#: new = old * (1 - m) + batch * m in the portable rule's three roundings (no multiply-add)
MOVING_AVERAGE_CUDA = "T a = old * omm; T b = batch * mm; res = a + b;"


def moving_average_cuda(old: Any, batch: Any, m: float) -> Any:
    """A running statistic's update in one elementwise kernel."""
    if batch.dtype != old.dtype or batch.size != old.size or dtype_name(old.dtype) not in _TYPES:
        return NotImplemented  # the reference's call
    gpu = device_of(old)
    with gpu.current:
        kernel = gpu.elementwise_kernel("moving_average", "T old, T batch, T omm, T mm", "T res",
                                        MOVING_AVERAGE_CUDA, exact=True)
        t = old.dtype.type
        return kernel(old, gpu.cupy.reshape(batch, old.shape), t(1.0 - m), t(m))


#: both running statistics, each in the portable rule's three roundings (an ElementwiseKernel
#: for strided statistics; C-ordered ones go to the raw kernel `moving_averages`)
MOVING_AVERAGES_CUDA = ("T a = om * omm; T b = bm * mm; rm = a + b; "
                        "T c = ov * omm; T d = bv * mm; rv = c + d;")


def moving_averages_cuda(old_mean: Any, old_var: Any, batch_mean: Any, batch_var: Any,
                         m: float) -> Any:
    """(running mean, running var) updated in one kernel (one launch, not two): a raw kernel
    over flat memory where all four are C-ordered (as BatchNorm's are), else elementwise."""
    shape, size, t = old_mean.shape, old_mean.size, old_mean.dtype
    if (dtype_name(t) not in _TYPES or old_var.shape != shape or old_var.dtype != t
            or batch_mean.dtype != t or batch_var.dtype != t or batch_mean.size != size
            or batch_var.size != size):
        return NotImplemented  # the reference's calls
    gpu = device_of(old_mean)
    arrays = (old_mean, batch_mean, old_var, batch_var)
    with gpu.current:
        if elementwise.RAW and size and all(a.flags.c_contiguous for a in arrays):  # (flat)
            cp = gpu.cupy
            rm, rv = cp.empty(shape, dtype=t), cp.empty(shape, dtype=t)
            _kernel(gpu, dtype_name(t), "moving_averages")(
                *flat_grid(size), (*arrays, rm, rv, t.type(1.0 - m), t.type(m), np.int64(size)))
            return rm, rv
        kernel = gpu.elementwise_kernel(
            "moving_averages", "T om, T bm, T ov, T bv, T omm, T mm", "T rm, T rv",
            MOVING_AVERAGES_CUDA, exact=True)
        return kernel(old_mean, batch_mean.reshape(shape), old_var, batch_var.reshape(shape),
                      t.type(1.0 - m), t.type(m))
