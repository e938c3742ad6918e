"""`out + b` into a fresh `out` on the cpu (needle.kernels.ADD_TO_FRESH's fast version)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of


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


def add_to_fresh_cuda(out: Any, b: Any) -> Any:
    """The same on a GPU: cupy's add into `out` where the result fits it, else `out + b`."""
    if (type(b) is type(out) and b.dtype == out.dtype and out.flags.c_contiguous
            and (b.shape == out.shape or fits_into(b.shape, out.shape))):
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
