"""The index check of class labels and token ids on cuda (the fast version of
needle.ops.indices.CHECKED_INDICES): one kernel where the reference makes five arrays and a
cupy reduction (its `any`: about 44 us of host time to launch on an H100's host, the whole
check about 110 us a call)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of
from .dtype_names import dtype_name

SOURCE = r"""
// out = x where 0 <= x < n, else 0 (and *bad set), over `size` elements
extern "C" __global__ void checked_indices(const T* x, T* out, bool* bad, long long size,
                                           T n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < size;
         i += (long long)blockDim.x * gridDim.x) {
        T v = x[i];
        bool b = v < 0 || v >= n;
        out[i] = b ? (T)0 : v;
        if (b) *bad = true;
    }
}
"""


def checked_indices_cuda(array: Any, n: int) -> Any:
    """(array with bad entries 0, any bad: a 0-d bool array) in one kernel, for int64
    indices (others: the reference)."""
    if dtype_name(array.dtype) != "int64" or array.size == 0:
        return NotImplemented
    gpu = device_of(array)
    cp = gpu.cupy
    with gpu.current:
        x = cp.ascontiguousarray(array)
        out = cp.empty(x.shape, dtype=x.dtype)
        bad = cp.zeros((), dtype=cp.bool_)
        gpu.raw_kernel("checked_indices", SOURCE, "checked_indices", "int64")(
            (min((x.size + 255) // 256, 1024),), (256,),
            (x, out, bad, np.int64(x.size), np.int64(n)))
    return out, bad
