"""The window gather of a convolution (im2col) on numpy and cupy: one strided view of the
zero-padded input, copied once (fast versions of needle.ops.im2col.IM2COL)."""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from . import device_of, elementwise
from .dtype_names import dtype_name
from .elementwise import LOOP, flat_grid


def strided_im2col(zeros: Callable[..., Any], as_strided: Callable[..., Any], a: Any,
                   kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """NHWC `a` zero-padded, its windows as one strided view copied once into columns.

    `zeros` and `as_strided` are the array library's (numpy's or cupy's: both count strides
    in bytes). Returns (N, Ho, Wo, kh*kw*C) ordered (i, j, c), as the portable gather does.
    """
    n, h, w, c = a.shape
    p = padding
    if p:  # zeros and one slice copy: numpy's pad costs several times more on small inputs
        padded = zeros((n, h + 2 * p, w + 2 * p, c), dtype=a.dtype)
        padded[:, p:p + h, p:p + w, :] = a
        a = padded
    (kh, kw), s = kernel, stride
    ho, wo = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    sn, sh, sw, sc = a.strides
    view = as_strided(a, (n, ho, wo, kh, kw, c), (sn, sh * s, sw * s, sh, sw, sc))
    return view.reshape(n, ho, wo, kh * kw * c)


def _read_only_strided(a: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(a, shape, strides, writeable=False)


def im2col_cpu(a: np.ndarray, kernel: tuple[int, int], stride: int, padding: int) -> np.ndarray:
    """The windows as one zero-copy strided view of the padded input, copied once."""
    return strided_im2col(np.zeros, _read_only_strided, a, kernel, stride, padding)


#: one thread per window entry (n, ho, wo, a, b, c), ordered as the reference's columns: the
#: input pixel it reads, or zero where the window lies over the padding
IM2COL_CUDA = """
const long long k = i % K, p = i / K;
const long long c = k % C, b = (k / C) % KW, a = k / (C * KW);
const long long wo = p % WO, ho = (p / WO) % HO, n = p / (WO * HO);
const long long y = ho * S + a - P, x = wo * S + b - P;
res = (y < 0 || y >= H || x < 0 || x >= W) ? (T)0 : src[((n * H + y) * W + x) * C + c];
"""


def im2col_cuda(a: Any, kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """The windows gathered by one kernel (float32 and float64; no padded copy), or as one
    strided view of the padded input (cupy's), copied once (other dtypes)."""
    gpu = device_of(a)
    cp = gpu.cupy
    if dtype_name(a.dtype) not in ("float32", "float64"):
        with gpu.current:
            return strided_im2col(cp.zeros, cp.lib.stride_tricks.as_strided, a, kernel,
                                  stride, padding)
    out_shape, sizes = _im2col_sizes(a.shape, kernel, stride, padding)
    dtype = dtype_name(a.dtype)
    with gpu.current:
        out = cp.empty(out_shape, dtype=a.dtype)
        return _gather(gpu, "im2col", cp.ascontiguousarray(a), out, sizes, dtype)


@functools.lru_cache(maxsize=256)
def _im2col_sizes(shape: tuple, kernel: tuple[int, int], stride: int, padding: int) -> tuple:
    """The columns' shape and IM2COL_CUDA's int64 sizes (H, W, C, KW, K, S, P, HO, WO) for
    an NHWC input of `shape` (worked out once per convolution)."""
    n, h, w, c = shape
    (kh, kw), s, p = kernel, stride, padding
    ho, wo = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    sizes = tuple(np.int64(k) for k in (h, w, c, kw, kh * kw * c, s, p, ho, wo))
    return (n, ho, wo, kh * kw * c), sizes


#: one thread per input pixel and channel (n, y, x, c): the sum over the taps (a, b), in
#: row-major order from zero, of the window entries that read it
COL2IM_CUDA = """
const ptrdiff_t c = i % C, x = (i / C) % W, y = (i / (C * W)) % H, n = i / (C * W * H);
T acc = 0;
for (long long a = 0; a < KH; ++a) {
    const long long py = y + P - a;
    if (py < 0 || py % S != 0 || py / S >= HO) continue;
    for (long long b = 0; b < KW; ++b) {
        const long long px = x + P - b;
        if (px < 0 || px % S != 0 || px / S >= WO) continue;
        acc += taps[((((a * KW + b) * N + n) * HO + py / S) * WO + px / S) * C + c];
    }
}
res = acc;
"""


#: both as raw kernels over the n elements of out (one thread each, then every stride-th;
#: inside the loop each body's own n, the image, shadows the count)
SOURCE = (r"""
extern "C" __global__ void im2col(const T* src, T* out, long long n, long long H, long long W,
                                  long long C, long long KW, long long K, long long S,
                                  long long P, long long HO, long long WO) {
    LOOP {
""" + IM2COL_CUDA.replace("res = ", "out[i] = ") + r"""
    }
}

extern "C" __global__ void col2im(const T* taps, T* out, long long n, long long N, long long H,
                                  long long W, long long C, long long KH, long long KW,
                                  long long S, long long P, long long HO, long long WO) {
    LOOP {
""" + COL2IM_CUDA.replace("res = ", "out[i] = ") + r"""
    }
}
""").replace("LOOP", LOOP)


def col2im_cuda(taps: Any, shape: tuple, kernel: tuple[int, int], stride: int,
                padding: int) -> Any:
    """The windows added back in one kernel: a gather per input pixel, no atomics."""
    if taps.ndim != 5 or dtype_name(taps.dtype) not in ("float32", "float64"):
        return NotImplemented
    gpu = device_of(taps)
    cp = gpu.cupy
    sizes = _col2im_sizes(tuple(shape), kernel, stride, padding, taps.shape[2], taps.shape[3])
    dtype = dtype_name(taps.dtype)
    with gpu.current:
        out = cp.empty(shape, dtype=taps.dtype)
        return _gather(gpu, "col2im", cp.ascontiguousarray(taps), out, sizes, dtype)


#: the ElementwiseKernels of the two (what runs with elementwise.RAW off): parameters, body
_ELEMENTWISE = {
    "im2col": ("raw T src, int64 H, int64 W, int64 C, int64 KW, int64 K, int64 S, int64 P, "
               "int64 HO, int64 WO", IM2COL_CUDA),
    "col2im": ("raw T taps, int64 N, int64 H, int64 W, int64 C, int64 KH, int64 KW, int64 S, "
               "int64 P, int64 HO, int64 WO", COL2IM_CUDA),
}


def _gather(gpu: Any, name: str, src: Any, out: Any, sizes: tuple, dtype: str) -> Any:
    """Every element of `out` by kernel `name` ("im2col" or "col2im") reading `src`: the raw
    kernel, or with elementwise.RAW off its ElementwiseKernel; returns out."""
    n = out.size
    if n and elementwise.RAW:
        gpu.raw_kernel(name, SOURCE, name, dtype)(*flat_grid(n), (src, out, np.int64(n), *sizes))
    elif n:
        params, body = _ELEMENTWISE[name]
        gpu.elementwise_kernel(name, params, "T res", body)(src, *sizes, out)
    return out


@functools.lru_cache(maxsize=256)
def _col2im_sizes(shape: tuple, kernel: tuple[int, int], stride: int, padding: int, ho: int,
                  wo: int) -> tuple:
    """COL2IM_CUDA's int64 sizes (N, H, W, C, KH, KW, S, P, HO, WO)."""
    return tuple(np.int64(k) for k in (*shape, *kernel, stride, padding, ho, wo))
