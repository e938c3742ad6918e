"""Zero padding and the window gathers of a convolution (NHWC input).

`Im2Col` gathers the windows row by row, (N, Ho, Wo, K*K*C); `Taps` gathers them tap-major,
(K*K, N, Ho, Wo, C); `Col2Im` adds tap-major windows back into the input, the adjoint of
both. The input's gradient of a convolution comes out of one batched matmul already
tap-major, so each of Col2Im's K*K additions moves one contiguous block.
The portable gather zero-pads (`array_api_extra.pad`) and stacks the K×K shifted strided
slices (basic slicing only); cpu and cuda have a faster row-major gather (the IM2COL kernel,
whose reference is the portable one: tests/test_kernels.py checks they agree).
"""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..kernels import Kernel
from .axes import int_at_least
from .movement import GetItem, permute, reshape
from .windows import add_windows, window_slices


def _pad_widths(axes, ndim: int | None = None) -> tuple[tuple[int, int], ...]:
    """`axes` as a tuple of (before, after) pairs of ints >= 0 (one per axis when ndim is given)."""
    if not isinstance(axes, (tuple, list)) or not all(
            isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in axes):
        raise TypeError(f"pad: axes must be (before, after) pairs of ints, got {axes!r}")
    pairs = tuple(tuple(int_at_least("pad", "a width", w, 0) for w in pair) for pair in axes)
    if ndim is not None and len(pairs) != ndim:
        raise ValueError(f"pad: {len(pairs)} (before, after) pairs for an input of {ndim} "
                         f"dimensions; give one pair per axis")
    return pairs


def pad_array(a: Any, widths: tuple[tuple[int, int], ...]) -> Any:
    """Zero-pad a raw array by (before, after) `widths` per axis (no copy when all are 0)."""
    if not any(b or e for b, e in widths):
        return a
    import array_api_extra as xpx  # the standard has no pad

    return xpx.pad(a, widths)


class Pad(TensorOp):
    """Zero padding: `axes` holds one (before, after) pair per axis."""

    def __init__(self, axes):
        self.axes = _pad_widths(axes)

    def compute(self, a):
        return pad_array(a, _pad_widths(self.axes, a.ndim))

    def gradient(self, out_grad, node):
        shape = node.inputs[0].shape
        return GetItem(tuple(slice(b, b + n) for (b, _), n in zip(self.axes, shape)))(out_grad)


def pad(a: Tensor, axes: tuple[tuple[int, int], ...]) -> Tensor:
    """`a` zero-padded by `axes`, a tuple of (before, after) pairs, one per axis."""
    return Pad(_pad_widths(axes, a.ndim))(a)


def _out_size(op: str, size: int, k: int, stride: int, padding: int, shape, kernel,
              layout: str = "NHWC") -> int:
    span = size + 2 * padding
    if span < k:
        raise ValueError(f"{op}: the kernel {kernel} is larger than the padded input: input "
                         f"shape {shape} ({layout}) with padding {padding}")
    return (span - k) // stride + 1


def im2col_portable(a: Any, kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """(N, H, W, C) -> (N, Ho, Wo, kh*kw*C): every window of the zero-padded input, ordered
    (i, j, c), by basic slicing."""
    xp = namespace(a)
    a = pad_array(a, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    n, hp, wp, c = a.shape
    kh, kw = kernel
    ho, wo = (hp - kh) // stride + 1, (wp - kw) // stride + 1
    cols = xp.stack([a[ix] for ix in window_slices(4, (1, 2), kernel, stride, (ho, wo))],
                    axis=3)
    return xp.reshape(cols, (n, ho, wo, kh * kw * c))


IM2COL = Kernel("im2col", im2col_portable, fast={
    "cpu": "needle.backends.im2col:im2col_cpu", "cuda": "needle.backends.im2col:im2col_cuda"})


def im2col_array(a: Any, kernel: tuple[int, int], stride: int, padding: int,
                 portable: bool = False) -> Any:
    """The windows of a raw NHWC array: the IM2COL kernel (`portable`: its reference)."""
    return (im2col_portable if portable else IM2COL)(a, kernel, stride, padding)


def _kernel(op: str, kernel) -> tuple[int, int]:
    """A (kh, kw) pair of ints >= 1."""
    if not isinstance(kernel, (tuple, list)) or len(kernel) != 2:
        raise TypeError(f"{op}: kernel must be a (kh, kw) pair, got {kernel!r}")
    return tuple(int_at_least(op, "kernel size", k, 1) for k in kernel)


def _check_windows(op: str, a, kernel, stride: int, padding: int) -> tuple:
    """The NHWC shape of `a`, checked to be 4-D and to hold at least one window."""
    shape = tuple(a.shape)
    if len(shape) != 4:
        raise ValueError(f"{op}: expected an NHWC input with 4 dimensions, found shape {shape}")
    for size, k in zip(shape[1:3], kernel):
        _out_size(op, size, k, stride, padding, shape, kernel)
    return shape


class Im2Col(TensorOp):
    """(N, H, W, C) -> (N, Ho, Wo, kh*kw*C): the zero-padded input's windows, ordered (i, j, c)."""

    def __init__(self, kernel: tuple[int, int], stride: int = 1, padding: int = 0):
        self.kernel = _kernel("im2col", kernel)
        self.stride = int_at_least("im2col", "stride", stride, 1)
        self.padding = int_at_least("im2col", "padding", padding, 0)

    def compute(self, a):
        _check_windows("im2col", a, self.kernel, self.stride, self.padding)
        return im2col_array(a, self.kernel, self.stride, self.padding)

    def gradient(self, out_grad, node):
        n, ho, wo, _ = out_grad.shape
        taps = reshape(out_grad, (n, ho, wo, self.kernel[0] * self.kernel[1], -1))
        return Col2Im(node.inputs[0].shape, self.kernel, self.stride, self.padding)(
            permute(taps, (3, 0, 1, 2, 4)))


class Taps(TensorOp):
    """(N, H, W, C) -> (kh*kw, N, Ho, Wo, C): the windows tap-major, one slice per offset."""

    def __init__(self, kernel: tuple[int, int], stride: int = 1, padding: int = 0):
        self.kernel = _kernel("taps", kernel)
        self.stride = int_at_least("taps", "stride", stride, 1)
        self.padding = int_at_least("taps", "padding", padding, 0)

    def compute(self, a):
        n, h, w, c = _check_windows("taps", a, self.kernel, self.stride, self.padding)
        p = self.padding
        a = pad_array(a, ((0, 0), (p, p), (p, p), (0, 0)))
        out_hw = ((h + 2 * p - self.kernel[0]) // self.stride + 1,
                  (w + 2 * p - self.kernel[1]) // self.stride + 1)
        slices = window_slices(4, (1, 2), self.kernel, self.stride, out_hw)
        return namespace(a).stack([a[ix] for ix in slices], axis=0)

    def gradient(self, out_grad, node):
        return Col2Im(node.inputs[0].shape, self.kernel, self.stride, self.padding)(out_grad)


def col2im_portable(taps: Any, shape: tuple, kernel: tuple[int, int], stride: int,
                    padding: int) -> Any:
    """Tap-major windows (kh*kw, N, Ho, Wo, C) added back into zeros of the NHWC `shape`
    (padded, then cropped), tap by tap in row-major order."""
    n, h, w, c = shape
    p = padding
    # each tap a contiguous block when `taps` is (the conv gradient's batched matmul)
    out = add_windows(taps, (n, h + 2 * p, w + 2 * p, c), (1, 2), kernel, stride)
    return out[:, p:p + h, p:p + w, :] if p else out


#: on cuda one kernel gathers each input pixel's taps (in the same order, from zero) where
#: the portable version writes K*K strided slices one by one
COL2IM = Kernel("col2im", col2im_portable, fast={"cuda": "needle.backends.im2col:col2im_cuda"})


class Col2Im(TensorOp):
    """The adjoint of the window gathers: tap-major windows (kh*kw, N, Ho, Wo, C) added back
    into an (N, H, W, C) input."""

    def __init__(self, shape: tuple, kernel: tuple[int, int], stride: int, padding: int):
        self.shape = tuple(shape)
        self.kernel = _kernel("col2im", kernel)
        self.stride = int_at_least("col2im", "stride", stride, 1)
        self.padding = int_at_least("col2im", "padding", padding, 0)

    def compute(self, taps):
        return COL2IM(taps, self.shape, self.kernel, self.stride, self.padding)

    def gradient(self, out_grad, node):
        return Taps(self.kernel, self.stride, self.padding)(out_grad)


def im2col(a: Tensor, kernel_size: int | tuple[int, int], stride: int = 1,
           padding: int = 0) -> Tensor:
    """The (N, Ho, Wo, K*K*C) windows of NHWC `a` (`kernel_size` an int or a pair)."""
    if not isinstance(kernel_size, (tuple, list)):
        kernel_size = (kernel_size, kernel_size)
    return Im2Col(tuple(kernel_size), stride, padding)(a)
