"""Dropout's mask-and-scale in one cupy kernel (the fast version of needle.ops.dropout.DROPOUT).

The portable version compares the float draws with `keep` in the draws' dtype (a Python
float takes the array's dtype), casts the mask to x's dtype, multiplies and divides by `keep`
in x's dtype: the kernel does those two roundings in that order, compiled without contracted
multiply-adds, so the numbers are the same to the bit.
"""

from __future__ import annotations

from typing import Any

from . import device_of
from .dtype_names import dtype_name

#: y = (x * mask) / keep, the mask 1 where the draw u is at most keep (both in u's dtype)
DROPOUT_CUDA = "y = (x * (u <= keep_u ? (X)1 : (X)0)) / keep_x;"


def dropout_cuda(x: Any, draws: Any, keep: float) -> Any:
    """x * (draws <= keep) / keep in one kernel on x's GPU (float32 and float64 x)."""
    if dtype_name(x.dtype) not in ("float32", "float64"):
        return NotImplemented
    gpu = device_of(x)
    with gpu.current:
        kernel = gpu.elementwise_kernel("dropout", "X x, U u, U keep_u, X keep_x", "X y",
                                        DROPOUT_CUDA, exact=True)
        return kernel(x, draws, draws.dtype.type(keep), x.dtype.type(keep))
