"""Softmax cross-entropy on numpy with fewer fresh (n, k) arrays (fast versions of
needle.ops.reduce.SOFTMAX_XENT and SOFTMAX_XENT_GRAD), in the portable op's order."""

from __future__ import annotations

from typing import Any

import numpy as np


def softmax_xent_cpu(logits: Any, labels: Any) -> tuple[Any, Any, Any]:
    """(mean cross-entropy, exp(logits - row max), row sums) of (n, k) floating `logits`
    against int `labels`: the portable op's sums in its order, with one fresh (n, k) array
    instead of two (exp in place over the shifted logits)."""
    n, k = logits.shape
    if k:
        m = np.maximum.reduce(logits, axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)  # an all -inf row is shifted by 0 (-inf, not NaN)
    else:  # no classes (and so no rows a label could be valid for): shifted by 0
        m = np.zeros((n, 1), dtype=logits.dtype)
    e = np.subtract(logits, m)  # the one fresh (n, k) array
    picked = np.take_along_axis(e, labels.reshape(n, 1), axis=1)  # before exp, in place
    np.exp(e, out=e)
    sums = np.add.reduce(e, axis=1, keepdims=True)
    # the mean over no rows is NaN, as PyTorch's
    return np.add.reduce(np.log(sums) - picked, axis=None) * (1.0 / n if n else np.nan), e, sums


def softmax_xent_grad_cpu(e: Any, sums: Any, labels: Any, g: Any) -> Any:
    """g (softmax - onehot(labels)) / n from `e` = exp(logits - max) (the forward's, kept on
    its node and only read here) and its row `sums`, in one fresh array written in place: the
    portable rule's arithmetic."""
    n = e.shape[0]
    scale = g * (1.0 / n if n else np.nan)
    out = np.multiply(e, scale / sums)
    out[np.arange(n), labels] -= scale
    return out
