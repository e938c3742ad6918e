"""Convolution on the torch device: PyTorch's own (cuDNN on a GPU, oneDNN or its own loops on
the cpu), fast versions of needle.ops.conv's CONV, CONV_INPUT_GRAD and CONV_WEIGHT_GRAD.

needle's NHWC arrays and (K, K, C_in, C_out) weights are handed over as NCHW / OIHW views
(no copies): a contiguous NHWC tensor seen as NCHW is PyTorch's channels_last layout, which
its convolutions take as it is and answer in, so the result seen as NHWC again is contiguous.
nn.Conv's NCHW arrays (layout "NCHW") are handed over as they are.
On a GPU, cuDNN would compute float32 convolutions with TF32 (PyTorch's default for cuDNN,
about 1e-3 relative error): like cupy's and PyTorch's own matmuls, these run at float32
precision, the user's setting restored after each call. Mixed dtypes, integer arrays and
weights with no input or output channels are left to the reference (`NotImplemented`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

#: (shape, dtype, device) -> a tensor of that shape holding no memory of its own: what
#: PyTorch's convolution backward reads of the input (or weights) it is not asked about
#: (bounded: cleared at 64)
_SHAPES: dict[tuple, torch.Tensor] = {}
_convolution = torch.ops.aten.convolution.default
_convolution_backward = torch.ops.aten.convolution_backward.default
_ONE, _ZERO = [1, 1], [0, 0]


@contextmanager
def _float32_precision(x: torch.Tensor) -> Iterator[None]:
    """cuDNN without TF32 inside the block, for a float32 tensor on a GPU; elsewhere nothing."""
    cudnn = torch.backends.cudnn
    if x.device.type != "cuda" or x.dtype != torch.float32 or not cudnn.allow_tf32:
        yield
        return
    cudnn.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.allow_tf32 = True


def _floating(*arrays: Any) -> bool:
    """True when every array given (None skipped) has the first one's floating dtype."""
    dtype = arrays[0].dtype
    return dtype.is_floating_point and all(a is None or a.dtype == dtype for a in arrays)


def _no_channels(weights: torch.Tensor) -> bool:
    """True for (K, K, C_in, C_out) weights with no input or no output channels, which
    PyTorch's convolution gets wrong (C_in = 0: no output channels) or refuses (C_out = 0)."""
    return weights.shape[2] == 0 or weights.shape[3] == 0


def _like(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A tensor of `shape` with like's dtype and device (one element, expanded), made once."""
    key = (shape, like.dtype, like.device)
    out = _SHAPES.get(key)
    if out is None:
        if len(_SHAPES) >= 64:
            _SHAPES.clear()
        out = _SHAPES[key] = torch.empty(1, dtype=like.dtype, device=like.device).expand(shape)
    return out


def _nchw(a: torch.Tensor, layout: str) -> torch.Tensor:
    """`a` seen as NCHW (an NHWC array: a permuted view)."""
    return a if layout == "NCHW" else a.permute(0, 3, 1, 2)


def _from_nchw(a: torch.Tensor, layout: str) -> torch.Tensor:
    """An NCHW result seen in `layout`."""
    return a if layout == "NCHW" else a.permute(0, 2, 3, 1)


def conv_torch(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, stride: int,
               padding: int, layout: str = "NHWC") -> Any:
    """(out, None): one PyTorch convolution, no windows gathered."""
    if not _floating(a, b, bias) or _no_channels(b):
        return NotImplemented
    with _float32_precision(a):
        out = _convolution(_nchw(a, layout), b.permute(3, 2, 0, 1), bias,
                           [stride, stride], [padding, padding], _ONE, False, _ZERO, 1)
    return _from_nchw(out, layout), None


def conv_input_grad_torch(g: torch.Tensor, b: torch.Tensor, shape: tuple, stride: int,
                          padding: int, layout: str = "NHWC") -> Any:
    """PyTorch's convolution backward for the input alone (as torch.nn.grad.conv2d_input)."""
    if not _floating(g, b) or _no_channels(b):
        return NotImplemented
    n, h, w, c = shape if layout == "NHWC" else (shape[0], shape[2], shape[3], shape[1])
    like = _like((n, c, h, w), g)  # the input's shape, for the backward to read
    with _float32_precision(g):
        grad = _convolution_backward(_nchw(g, layout), like, b.permute(3, 2, 0, 1), None,
                                     [stride, stride], [padding, padding], _ONE, False, _ZERO,
                                     1, [True, False, False])[0]
    return _from_nchw(grad, layout)


def conv_weight_grad_torch(a: torch.Tensor, g: torch.Tensor, kernel: tuple[int, int],
                           stride: int, padding: int, cols: Any = None,
                           layout: str = "NHWC") -> Any:
    """PyTorch's convolution backward for the weights alone (as conv2d_weight); `cols` is
    the reference's, and never given here (conv_torch gathers no windows)."""
    if not _floating(a, g):
        return NotImplemented
    a, g = _nchw(a, layout), _nchw(g, layout)
    if a.shape[1] == 0 or g.shape[1] == 0:  # no input or output channels (see _no_channels)
        return NotImplemented
    like = _like((g.shape[1], a.shape[1], kernel[0], kernel[1]), g)
    with _float32_precision(g):
        grad = _convolution_backward(g, a, like, None, [stride, stride], [padding, padding],
                                     _ONE, False, _ZERO, 1, [False, True, False])[1]
    return grad.permute(2, 3, 1, 0)


def conv_grads_torch(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor, stride: int,
                     padding: int, cols: Any = None, layout: str = "NHWC",
                     bias: bool = False) -> Any:
    """All of the adjoints in one PyTorch convolution backward (as PyTorch's own layers):
    the input's, the weights' and, with `bias`, the bias's; `cols` is the reference's."""
    if not _floating(g, a, b) or _no_channels(b):
        return NotImplemented
    with _float32_precision(g):
        da, dw, dbias = _convolution_backward(
            _nchw(g, layout), _nchw(a, layout), b.permute(3, 2, 0, 1),
            [b.shape[3]] if bias else None, [stride, stride], [padding, padding], _ONE, False,
            _ZERO, 1, [True, True, bias])
    out = (_from_nchw(da, layout), dw.permute(2, 3, 1, 0))
    return out + (dbias,) if bias else out
