"""Embedding lookup and its adjoint, the segment sum.

`EmbeddingLookup` picks rows of a (num, dim) table: out[i] = weight[indices[i]]. Its gradient
adds the rows of out_grad back into zeros (num, dim) at the indices (`SegmentSum`; repeated
indices accumulate), and the gradient of that is the lookup again, so second order works.
The indices are a constant input: they get no gradient.

The segment sum is the INDEX_ADD kernel: a sort and one reduceat on cpu, a sort and a kernel
summing each run on cuda (both deterministic), the libraries' scatter-adds on torch and jax;
its portable reference is a one-hot matmul, (num, m) @ (m, dim), fine for small tables and
checked against the others in the tests.
"""

from __future__ import annotations

import math
from typing import Any

from ..autograd.tensor import Tensor, TensorOp
from ..backends import Device, device_of, namespace
from ..kernels import Kernel
from .indices import as_index_array


def index_add_portable(indices: Any, values: Any, n: int) -> Any:
    """Rows of (m, ...) `values` added into zeros (n, ...) at the int (m,) `indices`:
    one_hot(indices, n)^T @ values."""
    xp = namespace(values)
    m, rest = indices.shape[0], tuple(values.shape[1:])
    one_hot = device_of(values).one_hot(n, indices, dtype=values.dtype)  # (m, n)
    out = xp.matmul(xp.permute_dims(one_hot, (1, 0)), xp.reshape(values, (m, math.prod(rest))))
    return xp.reshape(out, (n,) + rest)


INDEX_ADD = Kernel("index_add", index_add_portable, fast={
    "cpu": "needle.backends.index_add:index_add_cpu",
    "cuda": "needle.backends.index_add:index_add_cuda",
    "torch": "needle.backends.index_add:index_add_torch",
    "jax": "needle.backends.index_add:index_add_jax",
})


def _flat(xp: Any, indices: Any) -> Any:
    return xp.reshape(xp.astype(indices, xp.int64, copy=False), (math.prod(indices.shape),))


class EmbeddingLookup(TensorOp):
    """(num, *rest) table, integer indices of any shape -> indices.shape + rest: the rows."""

    def compute(self, weight, indices):
        xp = namespace(weight)
        rows = xp.take(weight, _flat(xp, indices), axis=0)
        return xp.reshape(rows, tuple(indices.shape) + tuple(weight.shape[1:]))

    def gradient(self, out_grad, node):
        weight, indices = node.inputs
        return SegmentSum(weight.shape[0])(out_grad, indices), None


class SegmentSum(TensorOp):
    """values (indices.shape + rest), integer indices -> (n, *rest): values added at indices."""

    def __init__(self, n: int):
        self.n = n

    def compute(self, values, indices):
        xp = namespace(values)
        flat = _flat(xp, indices)
        rest = tuple(values.shape[indices.ndim:])
        return INDEX_ADD(flat, xp.reshape(values, (flat.shape[0],) + rest), self.n)

    def gradient(self, out_grad, node):
        return EmbeddingLookup()(out_grad, node.inputs[1]), None


def index_tensor(indices: Any, n: int, who: str, device: Device | None = None) -> Tensor:
    """`indices` (a Tensor, array or list of integers, or of floats holding whole numbers) as
    a constant int64 Tensor, checked to lie in [0, n): ValueError naming `who` and the value."""
    if isinstance(indices, Tensor):
        device, data = indices.device, indices  # (as_index_array reads its array)
    elif device.owns(indices):  # an array made on the device (positions): no copy
        data = indices
    else:
        data = device.asarray(indices)
    data = as_index_array(device.xp, data, n, who, device=device)
    return Tensor.make_const(data, device=device)


def embedding(weight: Tensor, indices: Any) -> Tensor:
    """Rows of the (num, dim) `weight` picked by `indices` (shape indices.shape + (dim,))."""
    if weight.ndim != 2:
        raise ValueError(f"embedding: expected a (num, dim) weight, found shape {weight.shape}")
    return EmbeddingLookup()(weight, index_tensor(indices, weight.shape[0], "embedding",
                                                  weight.device))
