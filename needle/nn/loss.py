"""Losses: SoftmaxLoss (softmax cross-entropy on class labels)."""

from __future__ import annotations

from .. import ops
from ..autograd import Tensor
from ..ops.indices import as_index_array
from .module import Module


class SoftmaxLoss(Module):
    """Mean over the batch of -logsoftmax(logits)[y], for class labels y."""

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean softmax cross-entropy of (N, k) logits against (N,) labels.

        Labels are integers, or floats holding whole numbers (as the course's batches are).
        """
        if logits.ndim != 2:
            raise ValueError(f"SoftmaxLoss: expected logits of shape (N, k), found {logits.shape}")
        n, k = logits.shape
        if not isinstance(y, Tensor):
            raise TypeError(f"SoftmaxLoss: expected labels as a Tensor, found {type(y).__name__}")
        if y.shape != (n,):
            raise ValueError(f"SoftmaxLoss: expected labels of shape ({n},), found {y.shape}")
        device = logits.device
        # one 0-d reduction read back: the only host sync of the loss
        labels = as_index_array(y.device.xp, y.realize_cached_data(), k, "SoftmaxLoss", "labels")
        z = device.one_hot(k, labels, dtype=logits.realize_cached_data().dtype)
        # logsoftmax shifts by the row max first, so huge float32 logits keep their answer;
        # the one-hot rows pick each label's entry from the shifted values
        picked = ops.logsoftmax(logits, 1) * Tensor.make_const(z, device=device)
        return picked.sum() / -n
