"""`out + b` into a fresh `out` on the cpu and cuda (needle.kernels.ADD_TO_FRESH's fast
versions), and a0 + a1 + ... on the cpu (ADD_N's)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from . import device_of, elementwise
from .dtype_names import dtype_name
from .elementwise import LOOP, flat_grid

_FLOATS = ("float32", "float64")


def fits_into(shape: tuple[int, ...], into: tuple[int, ...]) -> bool:
    """Whether `shape` broadcasts to `into` (np.broadcast_shapes(into, shape) == into,
    without its 2 us a call)."""
    k = len(shape)
    return k <= len(into) and all(s == 1 or s == t for s, t in zip(shape, into[len(into) - k:]))


def add_to_fresh_cpu(out: Any, b: Any) -> Any:
    """In place when `b` broadcasts to out's shape with out's dtype: no second array; else
    `out + b`, the reference."""
    if out.__class__ is np.ndarray and b.__class__ is np.ndarray and b.dtype == out.dtype and (
            b.shape == out.shape or fits_into(b.shape, out.shape)):
        return np.add(out, b, out=out)
    return out + b


#: out[i] += b[i % c] over the n elements of out (a bias along its last axis: c of them; b
#: of out's shape: c = n), one rounding each, as cupy's add
SOURCE = r"""
extern "C" __global__ void add_into(T* out, const T* b, long long n, long long c) {
    LOOP out[i] = out[i] + b[i % c];
}
""".replace("LOOP", LOOP)


@functools.lru_cache(maxsize=512)
def _period(out_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> int | None:
    """c where out + b adds b[i % c] to the i-th element of a C-ordered out: b of out's shape
    (c: its size) or a row along out's last axis ((c,), (1, c), ...); else None."""
    if b_shape == out_shape:
        return math.prod(out_shape) or None
    if (out_shape and b_shape and b_shape[-1] == out_shape[-1] and out_shape[-1]
            and len(b_shape) <= len(out_shape) and all(k == 1 for k in b_shape[:-1])):
        return out_shape[-1]
    return None


def add_to_fresh_cuda(out: Any, b: Any) -> Any:
    """The same on a GPU: into `out` where the result fits it, by one raw kernel for b of
    out's shape or along its last axis (float32, float64), else cupy's add; else `out + b`."""
    if type(b) is type(out) and b.dtype == out.dtype and out.flags.c_contiguous:
        dtype = dtype_name(out.dtype)
        c = _period(out.shape, b.shape) if dtype in _FLOATS and elementwise.RAW else None
        if c is not None and b.flags.c_contiguous:
            n = out.size
            if n:
                gpu = device_of(out)
                with gpu.current:
                    gpu.raw_kernel("add_into", SOURCE, "add_into", dtype)(
                        *flat_grid(n), (out, b, np.int64(n), np.int64(c)))
            return out
        if b.shape == out.shape or fits_into(b.shape, out.shape):
            gpu = device_of(out)
            with gpu.current:
                return gpu.cupy.add(out, b, out=out)
    return out + b


def add_n_cpu(first: Any, *rest: Any) -> Any:
    """a0 + a1 + ..., left to right as the reference, the first sum fresh and the rest added
    into it by numpy's out=; NotImplemented (the reference) unless every array is an ndarray
    of one dtype and each fits the running sum (numpy raises ValueError before writing)."""
    if first.__class__ is not np.ndarray or not rest:
        return NotImplemented
    dtype = first.dtype
    for a in rest:
        if a.__class__ is not np.ndarray or a.dtype is not dtype:
            return NotImplemented
    add = np.add
    try:
        out = add(first, rest[0])  # raises unless the two broadcast
        if len(rest) > 1:
            if out.__class__ is not np.ndarray:  # 0-d operands give a numpy scalar
                return NotImplemented
            for a in rest[1:]:
                add(out, a, out=out)  # raises where `a` would grow the sum
    except ValueError:
        return NotImplemented
    return out
