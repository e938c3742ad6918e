"""Softmax over the last axis on cpu (fast versions of needle.ops.softmax.SOFTMAX and
SOFTMAX_GRAD): the portable rule's passes in its order, made in place in one fresh array
each way, and the causal mask's addend made once per shape and dtype. The same numbers, to
the bit: every pass rounds as the reference's does."""

from __future__ import annotations

from typing import Any

import numpy as np

#: the course's causal mask value, -np.finfo(np.float32).max (needle/ops/softmax.py's NEG_MAX)
NEG_MAX = -3.4028234663852886e38
_ADDENDS: dict[tuple, np.ndarray] = {}  # (rows, columns, dtype) -> the causal mask's addend


def _causal_addend(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    """NEG_MAX where a key comes after its query, -0.0 elsewhere (the reference's product
    of the 0/1 mask and NEG_MAX), read-only and kept."""
    key = (rows, cols, dtype)
    addend = _ADDENDS.get(key)
    if addend is None:
        later = np.arange(cols)[None, :] > np.arange(rows)[:, None]
        addend = _ADDENDS[key] = later.astype(dtype) * NEG_MAX
        addend.flags.writeable = False
    return addend


def softmax_cpu(a: Any, temperature: float, causal: bool) -> Any:
    """softmax(a / temperature) (causal: masked) over the last axis, in one fresh array."""
    if (a.__class__ is not np.ndarray or a.dtype.kind != "f" or 0 in a.shape
            or (causal and a.ndim < 2)):
        return NotImplemented
    z = np.divide(a, temperature) if temperature != 1.0 else None
    if causal:
        addend = _causal_addend(a.shape[-2], a.shape[-1], a.dtype)
        z = np.add(a, addend) if z is None else np.add(z, addend, out=z)
    src = a if z is None else z
    m = np.maximum.reduce(src, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros_like(m))  # an all -inf row: shifted by 0
    e = np.subtract(src, m, out=z)
    np.exp(e, out=e)
    return np.divide(e, np.add.reduce(e, axis=-1, keepdims=True), out=e)


def softmax_grad_cpu(y: Any, g: Any, temperature: float) -> Any:
    """y (g - sum(g y)) / temperature over the last axis, in one fresh array and a temporary."""
    if y.__class__ is not np.ndarray or g.__class__ is not np.ndarray or y.dtype != g.dtype:
        return NotImplemented
    out = np.multiply(g, y)
    np.subtract(out, y * np.add.reduce(out, axis=-1, keepdims=True), out=out)
    return np.divide(out, temperature, out=out) if temperature != 1.0 else out
