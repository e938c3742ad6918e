"""Softmax cross-entropy on numpy with fewer fresh (n, k) arrays (fast versions of
needle.ops.reduce.SOFTMAX_XENT and SOFTMAX_XENT_GRAD), in the portable op's order."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of, elementwise
from .dtype_names import dtype_name
from .elementwise import LOOP, flat_grid
from .reductions import HELPERS


def softmax_xent_cpu(logits: Any, labels: Any) -> tuple[Any, Any, Any]:
    """(mean cross-entropy, exp(logits - row max), row sums) of (n, k) floating `logits`
    against int `labels`: the portable op's sums in its order, with one fresh (n, k) array
    instead of two (exp in place over the shifted logits)."""
    n, k = logits.shape
    if k:
        m = np.maximum.reduce(logits, axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)  # an all -inf row is shifted by 0 (-inf, not NaN)
    else:  # no classes (and so no rows a label could be valid for): shifted by 0
        m = np.zeros((n, 1), dtype=logits.dtype)
    e = np.subtract(logits, m)  # the one fresh (n, k) array
    picked = np.take_along_axis(e, labels.reshape(n, 1), axis=1)  # before exp, in place
    np.exp(e, out=e)
    sums = np.add.reduce(e, axis=1, keepdims=True)
    # the mean over no rows is NaN, as PyTorch's
    return np.add.reduce(np.log(sums) - picked, axis=None) * (1.0 / n if n else np.nan), e, sums


def softmax_xent_grad_cpu(e: Any, sums: Any, labels: Any, g: Any,
                          overwrite: bool = False) -> Any:
    """g (softmax - onehot(labels)) / n from `e` = exp(logits - max) and its row `sums`, in
    one array written in place: a fresh one, or with `overwrite` `e` itself (the forward's,
    when the graph is not retained: no fresh (n, k) array); the portable rule's arithmetic."""
    n = e.shape[0]
    scale = g * (1.0 / n if n else np.nan)
    out = np.multiply(e, scale / sums, out=e if overwrite else None)
    out[np.arange(n), labels] -= scale
    return out


# ----- cuda: one block per row and one for the mean forward, one raw kernel backward ------
_TYPES = {"float32": "float", "float64": "double"}

XENT_SOURCE = HELPERS + r"""

__device__ float negative_infinity(float) { return __int_as_float(0xff800000); }
__device__ double negative_infinity(double) { return __longlong_as_double(0xfff0000000000000ULL); }

// the sum (or the max) of v over a one-dimensional block of 256 threads
__device__ T block_reduce(T v, T* buf, bool take_max) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            T other = buf[threadIdx.x + k];
            buf[threadIdx.x] = take_max ? (other > buf[threadIdx.x] ? other : buf[threadIdx.x])
                                        : buf[threadIdx.x] + other;
        }
        __syncthreads();
    }
    T out = buf[0];
    __syncthreads();
    return out;
}

// logits z (n, k) contiguous, one block per row: e = exp(z - m) with m the row max (0 where it
// is not finite), its row sum, and the row's loss log(sum) - (z[label] - m)
extern "C" __global__ void xent_rows(const T* z, const long long* labels, T* e, T* sums,
                                     T* loss, long long k) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* zr = z + r * k;
    T* er = e + r * k;
    T m = negative_infinity((T)0);
    for (long long i = threadIdx.x; i < k; i += blockDim.x) m = zr[i] > m ? zr[i] : m;
    m = block_reduce(m, buf, true);
    if (!isfinite(m)) m = 0;
    T acc = 0;
    for (long long i = threadIdx.x; i < k; i += blockDim.x) {
        T v = exp(zr[i] - m);
        er[i] = v;
        acc += v;
    }
    T sum = block_reduce(acc, buf, false);
    if (threadIdx.x == 0) {
        sums[r] = sum;
        loss[r] = log(sum) - (zr[labels[r]] - m);
    }
}

// the mean of the n rows' losses, one block: their sum (block_sum's order) times inv = 1 / n
extern "C" __global__ void xent_mean(const T* loss, T* out, long long n, T inv) {
    __shared__ T buf[256];
    T acc = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += loss[i];
    T total = block_sum(acc, buf);
    if (threadIdx.x == 0) out[0] = total * inv;
}

// g (softmax - onehot(labels)) / rows over e (rows, k) contiguous and its row sums, over its
// n elements: XENT_GRAD_CUDA's roundings, with scale = g * inv (inv = 1 / rows) as the
// portable rule's product
extern "C" __global__ void xent_grad(const T* e, const T* sums, const long long* labels,
                                     const T* g, T* out, long long n, long long k, T inv) {
    T scale = mul_rn(g[0], inv);  // (never fused into the p - scale below)
    LOOP {
        long long r = i / k;
        T p = mul_rn(e[i], scale / sums[r]);
        out[i] = (i % k == labels[r]) ? p - scale : p;
    }
}
""".replace("LOOP", LOOP)

#: the most rows whose losses one block averages (xent_mean); more go to cupy's sum
_MEAN_ROWS = 1 << 16

#: g (softmax - onehot) / n over e and its row sums, in the portable rule's two roundings
XENT_GRAD_CUDA = "X p = e * (scale / sums); res = (i % k == label) ? p - scale : p;"


def softmax_xent_cuda(logits: Any, labels: Any) -> tuple[Any, Any, Any]:
    """(mean cross-entropy, exp(logits - row max), row sums) with one kernel for the rows
    (the row sums in another order than cupy's: a few ulps) and one sum over them; rows
    whose max is NaN give a NaN loss, as the reference's (its e, NaN-shifted, differs)."""
    n, k = logits.shape
    dtype = dtype_name(logits.dtype)
    if not n or not k or dtype not in _TYPES:
        return NotImplemented  # the reference's call
    gpu = device_of(logits)
    cp = gpu.cupy
    with gpu.current:
        z = cp.ascontiguousarray(logits)
        labels = cp.ascontiguousarray(labels.astype(cp.int64, copy=False))
        e = cp.empty(z.shape, dtype=z.dtype)
        sums = cp.empty((n, 1), dtype=z.dtype)
        loss = cp.empty((n,), dtype=z.dtype)
        kernel = gpu.raw_kernel("xent_rows", XENT_SOURCE, "xent_rows", dtype)
        kernel((n,), (256,), (z, labels, e, sums, loss, np.int64(k)))
        if n > _MEAN_ROWS or not elementwise.RAW:  # (one block would loop long: cupy's sum)
            return cp.sum(loss) * (1.0 / n), e, sums
        mean = cp.empty((), dtype=z.dtype)  # one launch, where cupy's sum and a product
        gpu.raw_kernel("xent_mean", XENT_SOURCE, "xent_mean", dtype)(  # cost three times its
            (1,), (256,), (loss, mean, np.int64(n), z.dtype.type(1.0 / n)))  # host time
        return mean, e, sums


def softmax_xent_grad_cuda(e: Any, sums: Any, labels: Any, g: Any,
                           overwrite: bool = False) -> Any:
    """g (softmax - onehot(labels)) / n in one elementwise kernel (after the scale's), into a
    fresh array (`overwrite` is allowed, not used)."""
    n, k = e.shape
    if (not e.size or dtype_name(e.dtype) not in _TYPES or g.dtype != e.dtype
            or sums.dtype != e.dtype):
        return NotImplemented  # the reference's call
    gpu = device_of(e)
    cp = gpu.cupy
    with gpu.current:
        if (elementwise.RAW and type(g) is type(e) and g.size == 1 and e.flags.c_contiguous
                and sums.flags.c_contiguous):
            # one raw kernel, where the scale's product and an ElementwiseKernel were two
            # launches at twice the host time each
            labels = cp.ascontiguousarray(labels.astype(cp.int64, copy=False))
            out, size = cp.empty(e.shape, dtype=e.dtype), e.size
            gpu.raw_kernel("xent_grad", XENT_SOURCE, "xent_grad", dtype_name(e.dtype))(
                *flat_grid(size), (e, sums, labels, cp.ascontiguousarray(g), out,
                                   np.int64(size), np.int64(k), e.dtype.type(1.0 / n)))
            return out
        scale = g * (1.0 / n)
        kernel = gpu.elementwise_kernel("xent_grad", "X e, X sums, int64 label, X scale, int64 k",
                                        "X res", XENT_GRAD_CUDA, exact=True)
        return kernel(e, sums, cp.reshape(labels.astype(cp.int64, copy=False), (n, 1)),
                      scale, np.int64(k))
