"""Losses: SoftmaxLoss (softmax cross-entropy on integer labels)."""

from __future__ import annotations

from .. import ops
from ..autograd import Tensor
from .module import Module


class SoftmaxLoss(Module):
    """Mean over the batch of logsumexp(logits) - logits[y], for integer labels y."""

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean softmax cross-entropy of (N, k) logits against (N,) integer labels."""
        if logits.ndim != 2:
            raise ValueError(f"SoftmaxLoss: expected logits of shape (N, k), found {logits.shape}")
        n, k = logits.shape
        if not isinstance(y, Tensor):
            raise TypeError(f"SoftmaxLoss: expected labels as a Tensor, found {type(y).__name__}")
        if y.shape != (n,):
            raise ValueError(f"SoftmaxLoss: expected labels of shape ({n},), found {y.shape}")
        device = logits.device
        xp = y.device.xp
        labels = y.realize_cached_data()
        if not xp.isdtype(labels.dtype, "integral"):
            raise TypeError(f"SoftmaxLoss: expected integer labels, found dtype {y.dtype}")
        labels = xp.astype(labels, xp.int64)
        # one 0-d reduction read back: the only host sync of the loss
        if bool(xp.any((labels < 0) | (labels >= k))):
            bad = [v for v in y.numpy().tolist() if not 0 <= v < k]
            raise ValueError(f"SoftmaxLoss: labels must be in [0, {k}) for {k} classes, "
                             f"found {bad[0]}")
        z = device.one_hot(k, labels, dtype=logits.realize_cached_data().dtype)
        picked = (logits * Tensor.make_const(z, device=device)).sum((1,))
        return (ops.logsumexp(logits, axes=(1,)) - picked).sum() / n
