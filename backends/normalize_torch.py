"""Normalisation on the torch device (fast versions of needle.ops.norm.NORMALIZE and
NORMALIZE_GRAD): PyTorch's one-pass `var_mean` and `mean` reductions and a fused
multiply-add, five ops forward and five backward where the portable rule makes ten and nine
(on a GPU, each a launch). The sums run in PyTorch's order, not the reference's: float32
results agree to a few ulps (tests/test_kernels.py: 1e-5 relative). BatchNorm's two running
statistics are updated by foreach ops, to the bit."""

from __future__ import annotations

from typing import Any

import torch


def normalize_torch(x: Any, axes: tuple[int, ...], eps: float) -> Any:
    """(y, s, mean, var): x standardised over `axes`, 1 / sqrt(var + eps), the mean and the
    biased variance (keepdims), as normalize_portable."""
    if not (axes and x.dtype.is_floating_point):  # dim=() would be every axis to torch
        return NotImplemented
    var, mean = torch.var_mean(x, dim=axes, correction=0, keepdim=True)
    std = torch.sqrt(var + eps)
    return (x - mean) / std, torch.reciprocal(std), mean, var


def normalize_grad_torch(g: Any, y: Any, s: Any, axes: tuple[int, ...]) -> Any:
    """s (g - mean(g) - y mean(g y)) over `axes`, as normalize_grad_portable."""
    if not (axes and g.dtype.is_floating_point and g.dtype == y.dtype == s.dtype):
        return NotImplemented
    centered = g - torch.mean(g, dim=axes, keepdim=True)
    out = torch.addcmul(centered, y, torch.mean(g * y, dim=axes, keepdim=True), value=-1)
    out *= s
    return out


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
