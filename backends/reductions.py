"""What needle's cuda reduction kernels share (normalize.py, affine_norm.py, layer_norm.py,
softmax.py, sums.py): the CUDA C block reductions every source starts with, how an array's
axes map to rows or columns, and where a long sum over few columns is summed in parts.

No cupy here: the sources are text, compiled by CUDADevice.raw_kernel with T defined.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

_TYPES = {"float32": "float", "float64": "double"}

#: block reductions, the start of every reduction source (T is defined by
#: CUDADevice.raw_kernel)
HELPERS = r"""
// the sum of v over a one-dimensional block whose size is a power of 2 (at most 256)
__device__ T block_sum(T v, T* buf) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) buf[threadIdx.x] += buf[threadIdx.x + k];
        __syncthreads();
    }
    T out = buf[0];
    __syncthreads();
    return out;
}

// products and sums rounded one by one (no multiply-add), for float and double
__device__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// one block of blockDim.x threads: the mean and variance of the row xr of d, in two passes
// (every thread of the block calls it)
__device__ void row_stats(const T* xr, long long d, T* buf, T* mean, T* var) {
    T acc = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) acc += xr[i];
    T mu = block_sum(acc, buf) / (T)d;
    acc = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T c = xr[i] - mu;
        acc += c * c;
    }
    *mean = mu;
    *var = block_sum(acc, buf) / (T)d;
}

// block (32, 32): the sum of v over threadIdx.y, for each threadIdx.x (one column each)
__device__ T column_sum(T v, T* buf) {
    int at = threadIdx.y * 33 + threadIdx.x;
    buf[at] = v;
    __syncthreads();
    for (int k = 16; k > 0; k >>= 1) {
        if (threadIdx.y < k) buf[at] += buf[at + k * 33];
        __syncthreads();
    }
    T out = buf[threadIdx.x];
    __syncthreads();
    return out;
}

// block (32, 32): the mean and variance of column j of x (n, d) contiguous, in two passes
// (every thread of the block calls it; ok: j < d)
__device__ void column_stats(const T* x, long long n, long long d, long long j, bool ok,
                             T* buf, T* mean, T* var) {
    T acc = 0;
    if (ok) for (long long i = threadIdx.y; i < n; i += 32) acc += x[i * d + j];
    T mu = column_sum(acc, buf) / (T)n;
    acc = 0;
    if (ok) for (long long i = threadIdx.y; i < n; i += 32) {
        T c = x[i * d + j] - mu;
        acc += c * c;
    }
    *mean = mu;
    *var = column_sum(acc, buf) / (T)n;
}

// block (32, 32): the sum over the `parts` rows of column j of sums (parts, d), in sum_cols'
// order (every thread of the block calls it; ok: j < d)
__device__ T parts_sum(const T* sums, long long parts, long long d, long long j, bool ok,
                       T* buf) {
    T acc = 0;
    if (ok) for (long long i = threadIdx.y; i < parts; i += 32) acc += sums[i * d + j];
    return column_sum(acc, buf);
}
"""

#: the column statistics of (n, d) in parts of `rows` rows, a block (32, 32) per 32 columns
#: and part (blockIdx.y): the device functions of normalize.py's and affine_norm.py's kernels
#: in parts, after SUM's sum_cols_part (each part's column sums of x) and sq_cols_part
PART_HELPERS = r"""
// the rows [start, stop) of this block's part
__device__ void part_range(long long n, long long rows, long long* start, long long* stop) {
    *start = blockIdx.y * rows;
    *stop = *start + rows < n ? *start + rows : n;
}

// the mean summed from the parts' sums of x (sums), then this part's sum of (x - mean)^2
__device__ void sq_part(const T* x, const T* sums, T* sq, long long n, long long d,
                        long long rows, long long parts, T* buf) {
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T mu = parts_sum(sums, parts, d, j, ok, buf) / (T)n;
    long long start, stop;
    part_range(n, rows, &start, &stop);
    T acc = 0;
    if (ok) for (long long i = start + threadIdx.y; i < stop; i += 32) {
        T c = x[i * d + j] - mu;
        acc += c * c;
    }
    T total = column_sum(acc, buf);
    if (ok && threadIdx.y == 0) sq[blockIdx.y * d + j] = total;
}

// the mean and variance summed from the parts' sums (sums, sq), then this part's rows of
// y = (x - mean) / sqrt(var + eps) and, where w is given, out = y w + b; part 0 writes
// s = 1 / sqrt(var + eps), mean and var (norm_cols' and bn_cols' operations)
__device__ void cols_apply(const T* x, const T* w, const T* b, const T* sums, const T* sq,
                           T* out, T* y, T* s, T* mean, T* var, long long n, long long d,
                           long long rows, long long parts, T eps, T* buf) {
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T mu = parts_sum(sums, parts, d, j, ok, buf) / (T)n;
    T v = parts_sum(sq, parts, d, j, ok, buf) / (T)n;
    T sd = sqrt(v + eps);
    if (!ok) return;
    long long start, stop;
    part_range(n, rows, &start, &stop);
    T wj = w ? w[j] : (T)0, bj = w ? b[j] : (T)0;
    for (long long i = start + threadIdx.y; i < stop; i += 32) {
        T yv = (x[i * d + j] - mu) / sd;
        y[i * d + j] = yv;
        if (w) out[i * d + j] = add_rn(mul_rn(yv, wj), bj);
    }
    if (blockIdx.y == 0 && threadIdx.y == 0) {
        s[j] = (T)1 / sd;
        mean[j] = mu;
        var[j] = v;
    }
}

// this part's column sums of g w, g w y, g y and g (g w = g where w is null) into
// part (4, parts, d) (norm_grad_cols' and bn_grad_cols' loops over the part's rows)
__device__ void grad_part(const T* g, const T* y, const T* w, T* part, long long n,
                          long long d, long long rows, long long parts, T* buf) {
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    T wj = (w && ok) ? w[j] : (T)0;
    long long start, stop;
    part_range(n, rows, &start, &stop);
    T a = 0, b = 0, gy = 0, gs = 0;
    if (ok) for (long long i = start + threadIdx.y; i < stop; i += 32) {
        T gv = g[i * d + j], yv = y[i * d + j];
        T gw = w ? mul_rn(gv, wj) : gv;
        a += gw;
        b += mul_rn(gw, yv);  // (rounded on its own: the same bits whether w is given or not)
        gy += mul_rn(gv, yv);
        gs += gv;
    }
    T sa = column_sum(a, buf);
    T sb = column_sum(b, buf);
    T sgy = column_sum(gy, buf);
    T sgs = column_sum(gs, buf);
    if (ok && threadIdx.y == 0) {
        long long at = blockIdx.y * d + j, step = parts * d;
        part[at] = sa;
        part[at + step] = sb;
        part[at + 2 * step] = sgy;
        part[at + 3 * step] = sgs;
    }
}

// dx = s (g w - mean(g w) - y mean(g w y)) for this part's rows, the means summed from
// part; part 0 writes dw = sum(g y) and db = sum(g) where w is given
__device__ void grad_cols_apply(const T* g, const T* y, const T* w, const T* s,
                                const T* part, T* dx, T* dw, T* db, long long n, long long d,
                                long long rows, long long parts, T* buf) {
    long long j = blockIdx.x * 32LL + threadIdx.x;
    bool ok = j < d;
    long long step = parts * d;
    T mg = parts_sum(part, parts, d, j, ok, buf) / (T)n;
    T mgy = parts_sum(part + step, parts, d, j, ok, buf) / (T)n;
    T sum_gy = parts_sum(part + 2 * step, parts, d, j, ok, buf);
    T sum_g = parts_sum(part + 3 * step, parts, d, j, ok, buf);
    if (!ok) return;
    long long start, stop;
    part_range(n, rows, &start, &stop);
    T wj = w ? w[j] : (T)0, sj = s[j];
    for (long long i = start + threadIdx.y; i < stop; i += 32) {
        T gw = w ? mul_rn(g[i * d + j], wj) : g[i * d + j];  // sj (gw - mg - y mgy), each
        dx[i * d + j] = mul_rn(sj, add_rn(gw - mg, -mul_rn(y[i * d + j], mgy)));  // rounded
    }
    if (w && blockIdx.y == 0 && threadIdx.y == 0) {
        dw[j] = sum_gy;
        db[j] = sum_g;
    }
}
"""


def _layout(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[str, int, int] | None:
    """("rows", rows, d) when `axes` are the trailing ones, ("cols", n, d) when they are the
    leading ones (not all), None otherwise or when there is nothing to reduce."""
    k, nd = len(axes), len(shape)
    size = math.prod(shape)
    if not k or size == 0:
        return None
    if tuple(sorted(axes)) == tuple(range(nd - k, nd)):
        d = math.prod(shape[nd - k:])
        return "rows", size // d, d
    if tuple(sorted(axes)) == tuple(range(k)):
        n = math.prod(shape[:k])
        return "cols", n, size // n
    return None


def _threads(d: int) -> int:
    """A power of 2 from 32 to 256, enough for a row of d."""
    return min(256, max(32, 1 << (d - 1).bit_length()))


#: a block sums at most this many terms where there are few blocks (else cupy's reduction,
#: which splits long sums over many blocks, is faster)
_MAX_TERMS_PER_BLOCK = 1 << 15
#: where there are few blocks, a long sum over columns is summed in parts of this many rows
#: (one block each), then the parts (a convolution's bias adjoint: N * H * W rows)
_PART_ROWS = 1024


def column_parts(n: int, d: int) -> int | None:
    """How sum_cuda sums the n rows of (n, d) over axis 0: 1 (sum_cols, one kernel), the
    number of parts of _PART_ROWS rows (sum_cols_part, then sum_cols over the parts) where
    there are few columns and many rows, or None (too many parts: cupy's reduction)."""
    if (d + 31) // 32 < 64 and 32 * n > _MAX_TERMS_PER_BLOCK:
        chunks = (n + _PART_ROWS - 1) // _PART_ROWS
        return None if 32 * chunks > _MAX_TERMS_PER_BLOCK else chunks
    return 1


#: the column statistics of (n, d) are summed in parts (a block per 32 columns and part) where
#: more than this many parts of _PART_ROWS rows would be left to one block per 32 columns:
#: below it the one block is about as quick as the host's two extra launches (an estimate,
#: not a measurement: ResNet9 at batch 128 has 8,192 rows of 16 in its first BatchNorm)
_MIN_STAT_PARTS = 8


def stat_rows(n: int, d: int) -> int | None:
    """Rows per part where the column statistics (BatchNorm's mean, variance and adjoint sums)
    of (n, d) are summed in parts: column_parts' parts of _PART_ROWS rows, so that the sums
    over the rows are SUM's to the bit, or for more parts than SUM makes, n / 1,024 rows per
    part; None where one block per 32 columns sums all n rows."""
    chunks = column_parts(n, d)
    if chunks is None:  # (parts of more rows: as many parts as column_parts allows at most)
        return -(-n // (_MAX_TERMS_PER_BLOCK // 32))
    return _PART_ROWS if chunks > _MIN_STAT_PARTS else None


class Columns(NamedTuple):
    """An (N, C, ...) or (N, C) array seen as (n, c) rows of its c channels (`rows.as_rows`),
    and what the column kernels take for it: worked out once per shape (`columns`), so a
    launch costs its calls only."""

    n: int
    c: int
    perm: tuple[int, ...] | None  # the permutation moving the channels last (None: (N, C))
    rows: tuple[int, int]  # (n, c)
    last: tuple[int, ...]  # the shape of the rows seen as (N, ..., C)
    back: tuple[int, ...]  # the permutation from (N, ..., C) back to (N, C, ...)
    keep: tuple[int, ...]  # (1, C, 1, ...): the statistics' shape, keepdims
    part_rows: int | None  # stat_rows(n, c): the rows of a part, or None: one block
    grid: tuple[int, ...]  # (column blocks,) or (column blocks, parts)
    sizes: tuple  # the kernels' trailing int64 arguments: (n, c), or (n, c, rows, parts)

    def as_rows(self, a: Any) -> Any:
        """`a` (an array of this shape) as (n, c) rows: a view where it is channels-last."""
        return a if self.perm is None else a.transpose(self.perm).reshape(self.rows)

    def from_rows(self, rows: Any) -> Any:
        """(n, c) rows seen in this shape again (a permuted view)."""
        return rows if self.perm is None else rows.reshape(self.last).transpose(self.back)


@functools.lru_cache(maxsize=512)
def columns(shape: tuple[int, ...]) -> Columns:
    """The Columns of an array of `shape` (2 or more axes, axis 1 the channels)."""
    nd, c = len(shape), shape[1]
    n = math.prod(shape) // c if c else 0
    perm = None if nd == 2 else (0, *range(2, nd), 1)
    part_rows = stat_rows(n, c) if n else None
    blocks = (c + 31) // 32
    if part_rows is None:
        grid, sizes = (blocks,), (np.int64(n), np.int64(c))
    else:
        parts = -(-n // part_rows)
        grid = (blocks, parts)
        sizes = tuple(np.int64(k) for k in (n, c, part_rows, parts))
    return Columns(n, c, perm, (n, c), (shape[0], *shape[2:], c),
                   (0, nd - 1, *range(1, nd - 1)), (1, c) + (1,) * (nd - 2), part_rows, grid,
                   sizes)
