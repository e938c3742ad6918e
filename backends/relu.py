"""ReLU's adjoint in one cupy kernel (the fast version of needle.ops.unary.RELU_GRAD).

The portable rule multiplies g by the mask 1 or 0 in a's dtype; the kernel does that one
product, so the numbers are the same to the bit (-0 for a negative g masked, NaN kept).
"""

from __future__ import annotations

from typing import Any

from . import device_of
from .dtype_names import dtype_name

#: y = g * (a > 0 ? 1 : 0)
RELU_GRAD_CUDA = "y = g * (a > (X)0 ? (X)1 : (X)0);"


def relu_grad_cuda(g: Any, a: Any) -> Any:
    """g * (a > 0) in one kernel on g's GPU (float g and a of one dtype)."""
    if (g.dtype != a.dtype or dtype_name(g.dtype) not in ("float32", "float64")
            or g.shape != a.shape):
        return NotImplemented
    gpu = device_of(g)
    with gpu.current:
        # into an array laid out as g (a kernel's own output would be C-ordered: a
        # convolution's channels-last adjoint would then need copies further on)
        y = gpu.cupy.empty_like(g)
        return gpu.elementwise_kernel("relu_grad", "X g, X a", "X y", RELU_GRAD_CUDA)(g, a, y)
