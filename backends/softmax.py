"""Softmax over the last axis (fast versions of needle.ops.softmax.SOFTMAX and SOFTMAX_GRAD).

On cpu: the portable rule's passes in its order, made in place in one fresh array each way,
and the causal mask's addend made once per shape and dtype; the same numbers, to the bit.
On cuda: one kernel each way, a block per row (the portable rule makes about twelve arrays
forward, two of them reductions, and four backward, each a launch of tens of microseconds
of host time). Each element rounds as the reference's does (the division by the
temperature, the mask's addition, exp); the row sums add in another order, so the results
agree to a few float32 ulps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of
from .dtype_names import dtype_name
from .reductions import _TYPES, HELPERS, _threads

#: the course's causal mask value, -np.finfo(np.float32).max (needle/ops/softmax.py's NEG_MAX)
NEG_MAX = -3.4028234663852886e38
_ADDENDS: dict[tuple, np.ndarray] = {}  # (rows, columns, dtype) -> the causal mask's addend
MAX_ADDENDS = 64  # masks kept at most (cleared beyond, as conv_torch's shapes are)


def _causal_addend(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    """NEG_MAX where a key comes after its query (the queries the last `rows` of the keys),
    -0.0 elsewhere (the reference's product of the 0/1 mask and NEG_MAX), read-only, kept."""
    key = (rows, cols, dtype)
    addend = _ADDENDS.get(key)
    if addend is None:
        if len(_ADDENDS) >= MAX_ADDENDS:  # (decoding one length after another: ~4 L^3 / 3
            _ADDENDS.clear()  # bytes kept for lengths up to L)
        later = np.arange(cols)[None, :] > np.arange(cols - rows, cols)[:, None]
        # (float16: its lowest finite number, as a mask of -inf has NaN = 0 * -inf entries)
        addend = _ADDENDS[key] = later.astype(dtype) * max(NEG_MAX, -float(np.finfo(dtype).max))
        addend.flags.writeable = False
    return addend


def softmax_cpu(a: Any, temperature: float, causal: bool) -> Any:
    """softmax(a / temperature) (causal: masked) over the last axis, in one fresh array."""
    if (a.__class__ is not np.ndarray or a.dtype.kind != "f" or 0 in a.shape
            or (causal and a.ndim < 2)):
        return NotImplemented
    z = np.divide(a, temperature) if temperature != 1.0 else None
    if causal:
        addend = _causal_addend(a.shape[-2], a.shape[-1], a.dtype)
        z = np.add(a, addend) if z is None else np.add(z, addend, out=z)
    src = a if z is None else z
    m = np.maximum.reduce(src, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros_like(m))  # an all -inf row: shifted by 0
    e = np.subtract(src, m, out=z)
    np.exp(e, out=e)
    return np.divide(e, np.add.reduce(e, axis=-1, keepdims=True), out=e)


def softmax_grad_cpu(y: Any, g: Any, temperature: float) -> Any:
    """y (g - sum(g y)) / temperature over the last axis, in one fresh array and a temporary."""
    if y.__class__ is not np.ndarray or g.__class__ is not np.ndarray or y.dtype != g.dtype:
        return NotImplemented
    out = np.multiply(g, y)
    np.subtract(out, y * np.add.reduce(out, axis=-1, keepdims=True), out=out)
    return np.divide(out, temperature, out=out) if temperature != 1.0 else out


# ----- cuda ------------------------------------------------------------------------------------
SOURCE = HELPERS + r"""
// the max of v over a one-dimensional block whose size is a power of 2 (NaN wins, as numpy's)
__device__ T block_max(T v, T* buf) {
    buf[threadIdx.x] = v;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) {
            T other = buf[threadIdx.x + k];
            if (!(other <= buf[threadIdx.x])) buf[threadIdx.x] = other;
        }
        __syncthreads();
    }
    T out = buf[0];
    __syncthreads();
    return out;
}

// z = a / temp (+ neg where causal and the key j comes after the query r % tr), per row of
// a (rows, d) contiguous: out = exp(z - m) / sum(exp(z - m)), m the row's max (0 if not finite)
__device__ T logit(const T* ar, long long i, long long q, T temp, int causal, T neg) {
    T z = ar[i] / temp;
    if (causal) z = z + (i > q ? neg : (T)-0.0);
    return z;
}

extern "C" __global__ void softmax_rows(const T* a, T* out, long long d, long long tr, T temp,
                                        int causal, T neg, T minus_inf) {
    __shared__ T buf[256];
    long long r = blockIdx.x, q = r % tr;
    const T* ar = a + r * d;
    T* yr = out + r * d;
    T m = minus_inf;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T z = logit(ar, i, q, temp, causal, neg);
        if (!(z <= m)) m = z;
    }
    m = block_max(m, buf);
    if (!isfinite(m)) m = 0;
    T acc = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T e = exp(logit(ar, i, q, temp, causal, neg) - m);
        yr[i] = e;
        acc += e;
    }
    T total = block_sum(acc, buf);
    for (long long i = threadIdx.x; i < d; i += blockDim.x) yr[i] = yr[i] / total;
}

// out = (g y - y sum(g y)) / temp per row
extern "C" __global__ void softmax_grad_rows(const T* y, const T* g, T* out, long long d,
                                             T temp) {
    __shared__ T buf[256];
    long long r = blockIdx.x;
    const T* yr = y + r * d;
    const T* gr = g + r * d;
    T acc = 0;
    for (long long i = threadIdx.x; i < d; i += blockDim.x) acc += gr[i] * yr[i];
    T s = block_sum(acc, buf);
    for (long long i = threadIdx.x; i < d; i += blockDim.x) {
        T gy = gr[i] * yr[i];
        T ys = yr[i] * s;
        T o = gy - ys;
        out[r * d + i] = temp != (T)1 ? o / temp : o;
    }
}
"""


def _kernel(gpu: Any, dtype: str, entry: str) -> Any:
    return gpu.raw_kernel(entry, SOURCE, entry, dtype)


def softmax_cuda(a: Any, temperature: float, causal: bool) -> Any:
    """softmax(a / temperature) (causal: masked) over the last axis, one kernel (causal: as
    many queries as keys, self-attention's; the reference masks the others)."""
    dtype = dtype_name(a.dtype)
    if dtype not in _TYPES or a.ndim == 0 or a.size == 0 or (
            causal and (a.ndim < 2 or a.shape[-2] != a.shape[-1])):
        return NotImplemented
    gpu = device_of(a)
    cp = gpu.cupy
    d = a.shape[-1]
    t = np.dtype(dtype).type
    with gpu.current:
        a = cp.ascontiguousarray(a)
        out = cp.empty(a.shape, dtype=a.dtype)
        _kernel(gpu, dtype, "softmax_rows")(
            (a.size // d,), (_threads(d),),
            (a, out, np.int64(d), np.int64(a.shape[-2] if causal else 1), t(temperature),
             np.int32(causal), t(NEG_MAX), t(-np.inf)))
    return out


def softmax_grad_cuda(y: Any, g: Any, temperature: float) -> Any:
    """(g y - y sum(g y)) / temperature over the last axis, one kernel."""
    dtype = dtype_name(y.dtype)
    if (dtype not in _TYPES or g.dtype != y.dtype or tuple(g.shape) != tuple(y.shape)
            or y.ndim == 0 or y.size == 0):
        return NotImplemented
    gpu = device_of(y)
    cp = gpu.cupy
    d = y.shape[-1]
    with gpu.current:
        y, g = cp.ascontiguousarray(y), cp.ascontiguousarray(g)
        out = cp.empty(y.shape, dtype=y.dtype)
        _kernel(gpu, dtype, "softmax_grad_rows")(
            (y.size // d,), (_threads(d),),
            (y, g, out, np.int64(d), np.dtype(dtype).type(temperature)))
    return out
