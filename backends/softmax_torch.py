"""Softmax over the last axis on the torch device (fast versions of needle.ops.softmax.SOFTMAX
and SOFTMAX_GRAD): PyTorch's fused softmax and its backward, one op each, with the causal
mask's addend made once per shape, dtype and device, where the portable rule makes about
twelve arrays forward and four backward (on a GPU, each a launch). PyTorch sums each row in
its own order: the results agree to a few float32 ulps. A row holding +inf comes out all NaN
(the reference's: NaN where the inf is, 0 elsewhere); checking for one would cost a host
read, a sync on a GPU.
"""

from __future__ import annotations

from typing import Any

import torch

from .softmax import MAX_ADDENDS, NEG_MAX

_softmax = torch.ops.aten._softmax.default
_softmax_backward = torch.ops.aten._softmax_backward_data.default
_ADDENDS: dict[tuple, torch.Tensor] = {}  # (rows, columns, dtype, device) -> the addend


def _causal_addend(rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> Any:
    """NEG_MAX where a key comes after its query (the queries the last `rows` of the keys),
    -0.0 elsewhere (the reference's product of the 0/1 mask and NEG_MAX), made once, kept."""
    key = (rows, cols, dtype, device)
    addend = _ADDENDS.get(key)
    if addend is None:
        if len(_ADDENDS) >= MAX_ADDENDS:  # (a mask per length: bounded, as on the cpu)
            _ADDENDS.clear()
        later = (torch.arange(cols, device=device)[None, :]
                 > torch.arange(cols - rows, cols, device=device)[:, None])
        addend = _ADDENDS[key] = later.to(dtype) * NEG_MAX
    return addend


def softmax_torch(a: Any, temperature: float, causal: bool) -> Any:
    """softmax(a / temperature) (causal: masked) over the last axis: PyTorch's softmax."""
    if not a.dtype.is_floating_point or a.ndim == 0 or a.numel() == 0 or (
            causal and a.ndim < 2):
        return NotImplemented
    z = a / temperature if temperature != 1.0 else a
    if causal:
        z = z + _causal_addend(a.shape[-2], a.shape[-1], a.dtype, a.device)
    return _softmax(z, -1, False)


def softmax_grad_torch(y: Any, g: Any, temperature: float) -> Any:
    """(g y - y sum(g y)) / temperature over the last axis: PyTorch's softmax backward."""
    if not (y.dtype.is_floating_point and g.dtype == y.dtype and g.shape == y.shape
            and y.ndim > 0):
        return NotImplemented
    out = _softmax_backward(g, y, -1, y.dtype)
    return out / temperature if temperature != 1.0 else out
