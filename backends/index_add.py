"""The segment sum: rows of (m, ...) `values` added into zeros (n, ...) at the int64 (m,)
`indices`, repeats accumulating (fast versions of needle.ops.embedding.INDEX_ADD)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import device_of
from .dtype_names import dtype_name


def index_add_cpu(indices: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sort the indices (stably, so each row keeps its order of addition) and add each run of
    equal ones with one `np.add.reduceat` (about 2x faster than np.add.at)."""
    out = np.zeros((n,) + values.shape[1:], dtype=values.dtype)
    if indices.shape[0] == 0:
        return out
    order = np.argsort(indices, kind="stable")
    ids = indices[order]
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    out[ids[starts]] = np.add.reduceat(values[order], starts, axis=0)
    return out


def scatter_add_rows(zeros: Callable[..., Any], scatter_add: Callable[..., Any], indices: Any,
                     values: Any, n: int) -> Any:
    """Rows of (m, ...) `values` added into zeros of shape (n, ...) at the (m,) `indices`;
    repeated indices accumulate.

    `zeros` is the array library's, `scatter_add(out, indices, values)` an unbuffered
    in-place add (cupy.add.at, or numpy's np.add.at: the same signature).
    """
    out = zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype)
    scatter_add(out, indices, values)
    return out


#: one thread per (sorted position, column): the first position of each run of equal ids
#: adds the run's rows one by one in their original order (a stable sort's)
SEGMENT_SOURCE = r"""

extern "C" __global__ void segment_sum(const long long* ids, const long long* order,
                                       const T* values, T* out, long long m, long long d,
                                       long long n) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= m * d) return;
    long long p = t / d, j = t - p * d;
    long long id = ids[p];
    if ((p > 0 && ids[p - 1] == id) || id < 0 || id >= n) return;
    T acc = values[order[p] * d + j];
    for (long long q = p + 1; q < m && ids[q] == id; ++q) acc += values[order[q] * d + j];
    out[id * d + j] = acc;
}
"""
_TYPES = {"float32": "float", "float64": "double"}


def index_add_cuda(indices: Any, values: Any, n: int) -> Any:
    """A stable sort of the indices, then one kernel that sums each run of equal ones in
    order: deterministic (cupy.add.at's atomic adds are not: two runs could differ in the
    last bit), though not in numpy reduceat's order. Ids outside [0, n) are skipped (the index
    check, deferred on a GPU, reports them). Other dtypes use cupy.add.at."""
    gpu = device_of(values)
    cp = gpu.cupy
    m = indices.shape[0]
    dtype = dtype_name(values.dtype)
    with gpu.current:
        if dtype not in _TYPES or not m:
            return scatter_add_rows(cp.zeros, cp.add.at, indices, values, n)
        rest = tuple(values.shape[1:])
        d = math.prod(rest)
        indices = indices.astype(cp.int64, copy=False)
        order = cp.argsort(indices)  # stable: cupy has no other
        ids = cp.ascontiguousarray(indices[order])
        flat = cp.ascontiguousarray(cp.reshape(values, (m, d)))
        out = cp.zeros((n,) + rest, dtype=values.dtype)
        if d:
            kernel = gpu.raw_kernel("segment_sum", SEGMENT_SOURCE, "segment_sum", dtype)
            kernel(((m * d + 255) // 256,), (256,),
                   (ids, order, flat, out, np.int64(m), np.int64(d), np.int64(n)))
        return out


def index_add_torch(indices: Any, values: Any, n: int) -> Any:
    """torch's index_add_ (a scatter-add kernel) into zeros (n, ...)."""
    out = values.new_zeros((n,) + tuple(values.shape[1:]))
    return out.index_add_(0, indices, values)


def index_add_jax(indices: Any, values: Any, n: int) -> Any:
    """jax's scatter-add, `zeros.at[indices].add(values)`, on the values' jax device."""
    import jax.numpy as jnp

    (where,) = values.devices()
    out = jnp.zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype, device=where)
    return out.at[indices].add(values)
