"""BatchNorm's forward and adjoints on cupy (fast versions of needle.ops.affine_norm's
BATCH_NORM and BATCH_NORM_GRAD) that keep the input's memory layout.

The reference's affine map and products are cupy ufuncs, whose outputs are C-ordered: a
convolution's NCHW output, channels-last in memory, came out of BatchNorm C-ordered, and
the next convolution's gather and the normalisation's rows then copied it. Here the
normalisation and the sums are the reference's own cuda kernels, and the products are
elementwise kernels writing into arrays laid out as the normalised `y` (channels-last
where x is), compiled without contracted multiply-adds: the reference's numbers to the bit.
"""

from __future__ import annotations

from typing import Any

from . import device_of
from .dtype_names import dtype_name
from .normalize import _TYPES, normalize_cuda, normalize_grad_cuda
from .sums import sum_cuda

#: out = y w + b, two roundings as the reference's product then sum
AFFINE_CUDA = "T p = y * w; out = p + b;"
#: the weighted adjoint g w (the normalisation's) and g y (the weight's sum's)
GRAD_PRODUCTS_CUDA = "gw = g * w; gy = g * y;"


def _along(ndim: int) -> tuple[int, ...]:
    """A (C,) vector's shape along axis 1 of `ndim` axes."""
    return (-1,) + (1,) * (ndim - 2)


def _fits(x: Any, *others: Any) -> bool:
    return x.ndim >= 2 and dtype_name(x.dtype) in _TYPES and all(
        o is not None and o.dtype == x.dtype for o in others)


def batch_norm_cuda(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, y, s, mean, var) as the reference, `out` and `y` laid out alike."""
    if not _fits(x, w, b) or x.shape[1] == 0 or x.size == 0:
        return NotImplemented
    axes = (0, *range(2, x.ndim))
    stats = normalize_cuda(x, axes, eps)
    if stats is NotImplemented:
        return stats
    y = stats[0]
    gpu = device_of(x)
    with gpu.native:
        out = gpu.cupy.empty_like(y)
        gpu.elementwise_kernel("bn_affine", "T y, T w, T b", "T out", AFFINE_CUDA, exact=True)(
            y, w.reshape(_along(x.ndim)), b.reshape(_along(x.ndim)), out)
    return (out, *stats)


def batch_norm_grad_cuda(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db) as the reference, from the forward's y (None: the reference's call)."""
    if y is None or not _fits(g, w, y, s) or tuple(g.shape) != tuple(y.shape) or g.size == 0:
        return NotImplemented
    axes = (0, *range(2, g.ndim))
    gpu = device_of(g)
    cp = gpu.cupy
    with gpu.native:
        gw, gy = cp.empty_like(y), cp.empty_like(y)
        gpu.elementwise_kernel("bn_grad_products", "T g, T y, T w", "T gw, T gy",
                               GRAD_PRODUCTS_CUDA, exact=True)(
            g, y, w.reshape(_along(g.ndim)), gw, gy)
    dx = normalize_grad_cuda(gw, y, s, axes)
    dw, db = sum_cuda(gy, axes), sum_cuda(g, axes)
    if any(r is NotImplemented for r in (dx, dw, db)):
        return NotImplemented
    return dx, dw, db
