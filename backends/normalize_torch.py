"""Normalisation on the torch device (fast versions of needle.ops.norm.NORMALIZE and
NORMALIZE_GRAD). BatchNorm's layout ((N, C, ...) over every axis but 1: BatchNorm1d's and
BatchNorm2d's NCHW, as it is) and LayerNorm's (the last axis):
PyTorch's own batch and layer norm kernels each way, with `var_mean` for the statistics (two
ops forward, one or two backward); other layouts: one-pass `var_mean` and `mean` reductions
and a fused multiply-add, six ops each way, where the portable rule makes ten and nine (on a
GPU, each op a launch or two). The sums run in PyTorch's order, not the reference's: float32
results agree to a few ulps (tests/test_kernels.py: 1e-5 relative). BatchNorm's two running
statistics are updated by foreach ops, to the bit."""

from __future__ import annotations

from typing import Any

import torch

#: zeros and ones per (shape, dtype, device): the mean 0 and inverse deviation 1 that make
#: PyTorch's batch- and layer-norm backward kernels compute P g from y (bounded: cleared at 64)
_CONSTANTS: dict[tuple, tuple[Any, Any]] = {}


def _zeros_ones(shape: tuple[int, ...], like: Any) -> tuple[Any, Any]:
    key = (shape, like.dtype, like.device)
    pair = _CONSTANTS.get(key)
    if pair is None:
        if len(_CONSTANTS) >= 64:
            _CONSTANTS.clear()
        pair = _CONSTANTS[key] = (torch.zeros(shape, dtype=like.dtype, device=like.device),
                                  torch.ones(shape, dtype=like.dtype, device=like.device))
    return pair


def _layout(x: Any, axes: tuple[int, ...]) -> str:
    """"batch" for BatchNorm's (N, C, ...) over every axis but 1 (BatchNorm1d's (N, C) over
    axis 0, BatchNorm2d's NCHW), "layer" for the last axis, else ""."""
    if not x.numel() or x.dtype not in (torch.float32, torch.float64):
        return ""
    if x.ndim >= 2 and axes == (0, *range(2, x.ndim)):
        return "batch"
    return "layer" if axes == (x.ndim - 1,) else ""


def normalize_torch(x: Any, axes: tuple[int, ...], eps: float) -> Any:
    """(y, s, mean, var): x standardised over `axes`, 1 / sqrt(var + eps), the mean and the
    biased variance (keepdims), as normalize_portable. BatchNorm's and LayerNorm's layouts:
    PyTorch's own batch or layer norm for y and s, and var_mean for the statistics."""
    if not (axes and x.dtype.is_floating_point):  # dim=() would be every axis to torch
        return NotImplemented
    var, mean = torch.var_mean(x, dim=axes, correction=0, keepdim=True)
    layout = _layout(x, axes)
    if layout == "batch":
        y, _, s = torch.native_batch_norm(x, None, None, None, None, True, 0.0, eps)
        return y, s.reshape(mean.shape), mean, var
    if layout == "layer":
        y, _, s = torch.native_layer_norm(x, [x.shape[-1]], None, None, eps)
        return y, s, mean, var
    std = torch.sqrt(var + eps)
    return (x - mean) / std, torch.reciprocal(std), mean, var


def normalize_grad_torch(g: Any, y: Any, s: Any, axes: tuple[int, ...]) -> Any:
    """s (g - mean(g) - y mean(g y)) over `axes`, as normalize_grad_portable. BatchNorm's
    and LayerNorm's layouts: PyTorch's batch- or layer-norm backward, at input y with mean
    0 and inverse deviation 1 (so its normalised input is y), scaled by s."""
    if not (axes and g.dtype.is_floating_point and g.dtype == y.dtype == s.dtype):
        return NotImplemented
    layout = _layout(g, axes) if tuple(y.shape) == tuple(g.shape) else ""
    if layout == "batch" and tuple(s.shape) == (1, g.shape[1]) + (1,) * (g.ndim - 2):
        zeros, ones = _zeros_ones((g.shape[1],), g)
        return torch.ops.aten.native_batch_norm_backward(
            g, y, s.reshape(-1), None, None, zeros, ones, True, 0.0, [True, False, False])[0]
    if layout == "layer" and tuple(s.shape) == tuple(g.shape[:-1]) + (1,):
        zeros, ones = _zeros_ones(tuple(s.shape), g)
        out = torch.ops.aten.native_layer_norm_backward(
            g, y, [g.shape[-1]], zeros, ones, None, None, [True, False, False])[0]
        out *= s
        return out
    centered = g - torch.mean(g, dim=axes, keepdim=True)
    out = torch.addcmul(centered, y, torch.mean(g * y, dim=axes, keepdim=True), value=-1)
    out *= s
    return out


def _batch_layout(x: Any, *arrays: Any) -> bool:
    """True for a non-empty float (N, C, ...) x with the other arrays of its dtype."""
    return (x.ndim >= 2 and x.numel() > 0 and x.dtype in (torch.float32, torch.float64)
            and all(a.dtype == x.dtype for a in arrays))


def batch_norm_torch(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, None, s, mean, var) as batch_norm_portable, without y (the backward reads x):
    PyTorch's batch norm with the affine map, and var_mean for the course's statistics."""
    if not _batch_layout(x, w, b):
        return NotImplemented
    axes = (0, *range(2, x.ndim))
    var, mean = torch.var_mean(x, dim=axes, correction=0, keepdim=True)
    out, _, s = torch.native_batch_norm(x, w, b, None, None, True, 0.0, eps)
    return out, None, s.reshape(mean.shape), mean, var


def batch_norm_grad_torch(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db): PyTorch's batch-norm backward, all three in one op, from x, the mean
    and the inverse deviation (y is not read)."""
    if not _batch_layout(x, g, w, s, mean) or tuple(g.shape) != tuple(x.shape):
        return NotImplemented
    return tuple(torch.ops.aten.native_batch_norm_backward(
        g, x, w, None, None, mean.reshape(-1), s.reshape(-1), True, 0.0, [True, True, True]))


def layer_norm_torch(x: Any, w: Any, b: Any, eps: float) -> Any:
    """(out, None, s, mean) as layer_norm_portable, without y (the backward reads x): PyTorch's
    layer norm with the affine map, one op."""
    if not (x.ndim and x.numel() and x.dtype in (torch.float32, torch.float64)
            and w.dtype == b.dtype == x.dtype):
        return NotImplemented
    out, mean, s = torch.native_layer_norm(x, [x.shape[-1]], w, b, eps)
    return out, None, s, mean


def layer_norm_grad_torch(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any) -> Any:
    """(dx, dw, db): PyTorch's layer-norm backward, all three in one op, from x, the mean and
    the inverse deviation (y is not read)."""
    if not (x.ndim and x.numel() and x.dtype in (torch.float32, torch.float64)
            and g.dtype == w.dtype == s.dtype == mean.dtype == x.dtype
            and tuple(g.shape) == tuple(x.shape)
            and tuple(s.shape) == tuple(mean.shape) == tuple(x.shape[:-1]) + (1,)):
        return NotImplemented
    return tuple(torch.ops.aten.native_layer_norm_backward(
        g, x, [x.shape[-1]], mean, s, w, w, [True, True, True]))


def moving_averages_torch(old_mean: Any, old_var: Any, batch_mean: Any, batch_var: Any,
                          m: float) -> Any:
    """(old * (1 - m) + batch * m) for the running mean and variance: two foreach products
    and a foreach sum, the reference's three roundings (other dtypes: the reference)."""
    olds, batches = [old_mean, old_var], [batch_mean, batch_var]
    if any(b.dtype != o.dtype or b.numel() != o.numel() for o, b in zip(olds, batches)):
        return NotImplemented
    new = torch._foreach_mul(olds, 1.0 - m)
    torch._foreach_add_(new, torch._foreach_mul([b.reshape(-1) for b in batches], m))
    return tuple(new)
