"""ReLU and its adjoint on cuda, one raw kernel each over flat memory (fast versions of
needle.ops.unary.RELU and RELU_GRAD).

ReLU keeps x where x > 0 or x is NaN, else +0: cupy's and numpy's maximum(x, 0) (-0 gives
+0). The adjoint multiplies g by the mask 1 or 0 in a's dtype, the portable rule's one
product, so the numbers are the same to the bit (-0 for a negative g masked, NaN kept).
Both walk their arrays as flat memory where they share one dense layout (C-ordered, or a
convolution's channels-last NCHW view), writing into an array laid out alike (so nothing
downstream copies it); other layouts go to an ElementwiseKernel (the adjoint) or cupy's
maximum (ReLU), which cost about twice the host time a launch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of, elementwise
from .dtype_names import dtype_name
from .elementwise import LOOP, dense, empty_as, flat_grid, walk

#: y = g * (a > 0 ? 1 : 0)
RELU_GRAD_CUDA = "y = g * (a > (X)0 ? (X)1 : (X)0);"

SOURCE = r"""
extern "C" __global__ void relu(const T* x, T* y, long long n) {
    LOOP y[i] = (x[i] > (T)0 || isnan(x[i])) ? x[i] : (T)0;
}

extern "C" __global__ void relu_grad(const T* g, const T* a, T* y, long long n) {
    LOOP y[i] = g[i] * (a[i] > (T)0 ? (T)1 : (T)0);
}
""".replace("LOOP", LOOP)

_FLOATS = ("float32", "float64")


def relu_cuda(a: Any) -> Any:
    """max(a, 0) by one raw kernel (a dense float array), laid out as a; else NotImplemented
    (the reference: cupy's maximum)."""
    dtype = dtype_name(a.dtype)
    if not elementwise.RAW or dtype not in _FLOATS or not a.size or not dense(a):
        return NotImplemented
    gpu = device_of(a)
    with gpu.current:
        y = empty_as(gpu.cupy, a)
        n = a.size
        gpu.raw_kernel("relu", SOURCE, "relu", dtype)(*flat_grid(n), (a, y, np.int64(n)))
    return y


def relu_grad_cuda(g: Any, a: Any) -> Any:
    """g * (a > 0) in one kernel on g's GPU (float g and a of one dtype), laid out as g."""
    dtype = dtype_name(g.dtype)
    if g.dtype != a.dtype or dtype not in _FLOATS or g.shape != a.shape:
        return NotImplemented
    gpu = device_of(g)
    with gpu.current:
        # into an array laid out as g (a kernel's own output would be C-ordered: a
        # convolution's channels-last adjoint would then need copies further on)
        n, layout = g.size, walk(g)
        if elementwise.RAW and n and layout is not None and layout == walk(a):
            y = empty_as(gpu.cupy, g)
            gpu.raw_kernel("relu_grad", SOURCE, "relu_grad", dtype)(
                *flat_grid(n), (g, a, y, np.int64(n)))
            return y
        y = gpu.cupy.empty_like(g)
        return gpu.elementwise_kernel("relu_grad", "X g, X a", "X y", RELU_GRAD_CUDA)(g, a, y)
