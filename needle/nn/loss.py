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
        if y.device != logits.device:
            raise ValueError(f"SoftmaxLoss: logits on {logits.device}, labels on {y.device}; "
                             "move them with .to()")
        # checked by one 0-d reduction read back (on an accelerator: at the next read)
        labels = as_index_array(y.device.xp, y, k, "SoftmaxLoss", "labels", y.device)
        # one fused op: shifted by the row max first, so huge float32 logits keep their answer
        return ops.SoftmaxCrossEntropy(labels)(logits)  # (checked above: not again)
