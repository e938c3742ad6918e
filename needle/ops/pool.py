"""2-D pooling over the last two axes of NCHW tensors (no padding, floor output size).

A pooling window at output (y, x) covers input rows s*y .. s*y + k - 1 and columns
s*x .. s*x + k - 1, so Ho = (H - k) // s + 1 and Wo = (W - k) // s + 1, as PyTorch's
ceil_mode=False. Window offset (i, j) seen from every output at once is the strided slice
a[..., i:i + s*(Ho-1) + 1:s, j:j + s*(Wo-1) + 1:s], of shape (..., Ho, Wo): the forward
passes reduce those k*k slices (basic slicing only, no Python loop over pixels), and
`Unfold2d` / `Fold2d` stack them and scatter-add them back, which the gradients are built on.
"""

from __future__ import annotations

from ..autograd.graph import array_function, array_of
from ..autograd.tensor import Tensor, TensorOp, constant_like
from ..backends import namespace
from .axes import int_at_least
from .dtypes import check_floating, is_bool
from .movement import broadcast_to, reshape
from .windows import add_windows, window_slices


def _positive_int(op: str, name: str, value) -> int:
    """`value` as an int >= 1."""
    return int_at_least(op, name, value, 1)


def _kernel_stride(op: str, kernel_size, stride) -> tuple[int, int]:
    """(k, s) checked; the stride defaults to the kernel size."""
    k = _positive_int(op, "kernel_size", kernel_size)
    return k, k if stride is None else _positive_int(op, "stride", stride)


def _out_hw(op: str, shape: tuple, k: int, s: int, nchw: bool = True) -> tuple[int, int]:
    """(Ho, Wo) for windows of size k and stride s over the last two axes of `shape`
    (which must be 4-D where `nchw`)."""
    shape = tuple(shape)
    if nchw and len(shape) != 4:
        raise ValueError(f"{op}: expected a 4-D (N, C, H, W) input, got shape {shape}")
    if len(shape) < 2:
        raise ValueError(f"{op}: expected at least 2 dimensions (..., H, W), got shape {shape}")
    h, w = shape[-2:]
    if k > h or k > w:
        raise ValueError(f"{op}: kernel_size {k} is larger than the input's (H, W) = "
                         f"({h}, {w}) (shape {shape})")
    return (h - k) // s + 1, (w - k) // s + 1


def _windows(k: int, s: int, ho: int, wo: int) -> list[tuple]:
    """The k*k indices of the window offsets (i, j), row-major: one strided slice each."""
    return [(...,) + index[2:] for index in window_slices(4, (2, 3), (k, k), s, (ho, wo))]


class MaxPool2dOp(TensorOp):
    """Max over each k x k window of an NCHW tensor (of bools: any); tied maxima share a
    window's adjoint."""

    def __init__(self, kernel_size: int, stride: int | None = None):
        self.kernel_size, self.stride = _kernel_stride("max_pool2d", kernel_size, stride)

    def compute(self, a):
        xp, k, s = namespace(a), self.kernel_size, self.stride
        larger = xp.logical_or if is_bool(a) else xp.maximum  # (strict's maximum takes no bools)
        out = None
        for index in _windows(k, s, *_out_hw("max_pool2d", a.shape, k, s)):
            out = a[index] if out is None else larger(out, a[index])
        return out

    def gradient(self, out_grad, node):
        a, k, s = array_of(node.inputs[0]), self.kernel_size, self.stride
        share = constant_like(out_grad, _max_share(a, array_of(node.result), k, s))
        per_offset = reshape(out_grad, (1,) + tuple(out_grad.shape)) * share
        return fold2d(per_offset, k, s, tuple(a.shape[-2:]))


@array_function
def _max_share(a, m, k: int, s: int):
    """share[p] = [window entry p == window max] / (number of such entries), as Max does:
    (k*k, N, C, Ho, Wo) for the input `a` and the pooled `m`."""
    xp = namespace(a)
    windows = xp.stack([a[index] for index in _windows(k, s, *m.shape[-2:])])
    mask = xp.astype(windows == m, a.dtype)
    return mask / xp.sum(mask, axis=0)


def max_pool2d(a: Tensor, kernel_size: int, stride: int | None = None) -> Tensor:
    """Max pooling of an NCHW tensor over k x k windows (stride defaults to k, no padding)."""
    return MaxPool2dOp(kernel_size, stride)(a)


class AvgPool2dOp(TensorOp):
    """Mean over each k x k window of an NCHW tensor."""

    def __init__(self, kernel_size: int, stride: int | None = None):
        self.kernel_size, self.stride = _kernel_stride("avg_pool2d", kernel_size, stride)

    def compute(self, a):
        k, s = self.kernel_size, self.stride
        check_floating("avg_pool2d", a)
        xp, dtype = namespace(a), a.dtype
        if dtype == getattr(xp, "float16", None):  # summed in float32, as PyTorch's (a
            a = xp.astype(a, xp.float32)  # window of 2 x 30000 is inf in float16)
        total = None
        for index in _windows(k, s, *_out_hw("avg_pool2d", a.shape, k, s)):
            total = a[index] if total is None else total + a[index]
        out = total / (k * k)
        return out if out.dtype == dtype else xp.astype(out, dtype)

    def gradient(self, out_grad, node):
        # every entry of a window gets 1/k^2 of its adjoint; overlapping windows add
        k, shape = self.kernel_size, tuple(out_grad.shape)
        spread = broadcast_to(reshape(out_grad / (k * k), (1,) + shape), (k * k,) + shape)
        return fold2d(spread, k, self.stride, tuple(node.inputs[0].shape[-2:]))


def avg_pool2d(a: Tensor, kernel_size: int, stride: int | None = None) -> Tensor:
    """Average pooling of an NCHW tensor over k x k windows (stride defaults to k)."""
    return AvgPool2dOp(kernel_size, stride)(a)


class Unfold2d(TensorOp):
    """(..., H, W) -> (k*k, ..., Ho, Wo): entry p = i*k + j holds every window's (i, j)."""

    def __init__(self, kernel_size: int, stride: int | None = None):
        self.kernel_size, self.stride = _kernel_stride("unfold2d", kernel_size, stride)

    def compute(self, a):
        k, s = self.kernel_size, self.stride
        ho, wo = _out_hw("unfold2d", a.shape, k, s, nchw=False)
        return namespace(a).stack([a[index] for index in _windows(k, s, ho, wo)], axis=0)

    def gradient(self, out_grad, node):
        return fold2d(out_grad, self.kernel_size, self.stride,
                      tuple(node.inputs[0].shape[-2:]))


def unfold2d(a: Tensor, kernel_size: int, stride: int | None = None) -> Tensor:
    """The k*k window offsets of `a`'s last two axes, stacked along a new first axis."""
    return Unfold2d(kernel_size, stride)(a)


class Fold2d(TensorOp):
    """(k*k, ..., Ho, Wo) -> (..., H, W): each entry added where Unfold2d took it from.

    Its adjoint pair is Unfold2d; input positions no window covers get zero.
    """

    def __init__(self, kernel_size: int, stride: int | None, size: tuple[int, int]):
        self.kernel_size, self.stride = _kernel_stride("fold2d", kernel_size, stride)
        if not isinstance(size, (tuple, list)) or len(size) != 2:
            raise TypeError(f"fold2d: size must be (H, W), got {size!r}")
        self.size = tuple(_positive_int("fold2d", "size", n) for n in size)

    def compute(self, t):
        k, s = self.kernel_size, self.stride
        shape = tuple(t.shape)
        ho, wo = _out_hw("fold2d", self.size, k, s, nchw=False)
        if len(shape) < 3 or shape[0] != k * k or shape[-2:] != (ho, wo):
            raise ValueError(f"fold2d: expected shape ({k * k}, ..., {ho}, {wo}) for kernel "
                             f"{k}, stride {s} and size {self.size}, got {shape}")
        # (k*k, ..., Ho, Wo): the spatial axes are the last two of each tap
        axes = (len(shape) - 3, len(shape) - 2)
        return add_windows(t, shape[1:-2] + self.size, axes, (k, k), s)

    def gradient(self, out_grad, node):
        return unfold2d(out_grad, self.kernel_size, self.stride)


def fold2d(a: Tensor, kernel_size: int, stride: int | None, size: tuple[int, int]) -> Tensor:
    """Scatter-add unfold2d-shaped (k*k, ..., Ho, Wo) windows into zeros (..., *size)."""
    return Fold2d(kernel_size, stride, size)(a)
