"""Losses: SoftmaxLoss (softmax cross-entropy on class labels), and PyTorch's names
CrossEntropyLoss (the same, with a reduction) and MSELoss (mean squared error)."""

from __future__ import annotations

from typing import Any

from .. import ops
from ..autograd import Tensor
from ..autograd.graph import array_function
from ..ops.indices import as_index_array
from .module import Module


class SoftmaxLoss(Module):
    """Mean over the batch of -logsoftmax(logits)[y], for class labels y."""

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The mean softmax cross-entropy of (N, k) logits against (N,) labels.

        Labels are integers, or floats holding whole numbers (as the course's batches are).
        """
        # one fused op: shifted by the row max first, so huge float32 logits keep their answer
        return ops.SoftmaxCrossEntropy(self._labels(logits, y))(logits)

    def _labels(self, logits: Tensor, y: Tensor) -> Any:
        """`y` checked against (N, k) `logits`, as the int64 array of the fused op."""
        who = type(self).__name__
        if logits.ndim != 2:
            raise ValueError(f"{who}: expected logits of shape (N, k), found {logits.shape}")
        n, k = logits.shape
        if not isinstance(y, Tensor):
            raise TypeError(f"{who}: expected labels as a Tensor, found {type(y).__name__}")
        if y.shape != (n,):
            raise ValueError(f"{who}: expected labels of shape ({n},), found {y.shape}")
        if y.device != logits.device:
            raise ValueError(f"{who}: logits on {logits.device}, labels on {y.device}; "
                             "move them with .to()")
        # checked by one 0-d reduction read back (on an accelerator: at the next read)
        return as_index_array(y.device.xp, y, k, who, "labels", y.device)  # (not again)


REDUCTIONS = ("mean", "sum", "none")


def _reduction(owner: str, name: str, value: Any) -> str:
    """`value`, one of REDUCTIONS (PyTorch's names)."""
    if not isinstance(value, str) or value not in REDUCTIONS:
        raise ValueError(f"{owner}: {name} must be one of {REDUCTIONS}, found {value!r}")
    return value


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    """The elementwise `loss` summed, averaged (NaN for no elements, as PyTorch) or kept."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.summation(loss)
    return ops.mean(loss)  # (float16 in float32)


def _per_sample(logits: Tensor, labels: Any) -> Tensor:
    """Each row's cross-entropy, logsumexp(logits) - logits[y], the target picked as an
    embedding row of the flat logits (a one-hot mask times logsoftmax is NaN at a -inf
    logit of another class: -inf * 0)."""
    n, k = logits.shape
    rows = _target_rows(logits.device.xp, labels, k)
    picked = ops.embedding(ops.reshape(logits, (n * k, 1)), rows)
    return ops.logsumexp(logits, (1,)) - ops.reshape(picked, (n,))


@array_function
def _target_rows(xp: Any, labels: Any, k: int) -> Any:
    """The flat index i * k + labels[i] of each row's target (recorded by ndl.compile)."""
    return xp.arange(labels.shape[0], dtype=labels.dtype, device=labels.device) * k + labels


#: CrossEntropyLoss's other arguments, with the only values it takes (PyTorch's defaults)
_CROSS_ENTROPY_DEFAULTS = {"weight": None, "size_average": None, "ignore_index": -100,
                           "reduce": None, "label_smoothing": 0.0}


class CrossEntropyLoss(SoftmaxLoss):
    """PyTorch's name for SoftmaxLoss: softmax cross-entropy of (N, k) logits against (N,)
    class labels in [0, k), averaged over the batch, summed, or per sample ("none").

    Only PyTorch's defaults are taken for its other arguments (a class weight, label
    smoothing, `ignore_index` other than -100, the deprecated `size_average`/`reduce`: a
    ValueError); a label of -100 is out of range, as any other (PyTorch skips it). The mean
    is SoftmaxLoss's own number, to the bit.
    """

    _setting_checks = {"reduction": _reduction}

    def __init__(self, weight: Any = None, size_average: Any = None, ignore_index: int = -100,
                 reduce: Any = None, reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        given = {"weight": weight, "size_average": size_average, "ignore_index": ignore_index,
                 "reduce": reduce, "label_smoothing": label_smoothing}
        for name, value in given.items():
            default = _CROSS_ENTROPY_DEFAULTS[name]
            if not (value is default or (type(value) in (int, float)
                                         and type(default) in (int, float) and value == default)):
                raise ValueError(f"CrossEntropyLoss: {name}={value!r} is not supported (only "
                                 f"PyTorch's default, {name}={default!r})")
        self.reduction = reduction

    def forward(self, logits: Tensor, y: Tensor) -> Tensor:
        """The cross-entropy of (N, k) logits against (N,) labels, reduced."""
        labels = self._labels(logits, y)
        n = logits.shape[0]
        if self.reduction == "mean":
            return ops.SoftmaxCrossEntropy(labels)(logits)
        narrow = logits.dtype.itemsize < 4
        if self.reduction == "sum" and n and not narrow:
            return ops.SoftmaxCrossEntropy(labels)(logits) * float(n)
        if self.reduction == "sum":
            # float16: the samples' losses and their sum in float32, as PyTorch's (n times
            # the float16 mean multiplies its rounding by n, and 70,000 is inf in float16)
            wide = ops.astype(logits, "float32")
            return ops.astype(ops.summation(_per_sample(wide, labels)), logits.dtype)
        return _reduce(_per_sample(logits, labels), self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class MSELoss(Module):
    """Squared differences of a prediction and a target of the same shape, averaged
    (`reduction="mean"`, PyTorch's default), summed, or kept ("none")."""

    _setting_checks = {"reduction": _reduction}

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, prediction: Tensor, target: Tensor) -> Tensor:
        """(prediction - target)^2, reduced."""
        for name, value in (("prediction", prediction), ("target", target)):
            if not isinstance(value, Tensor):
                raise TypeError(f"MSELoss: expected the {name} as a Tensor, found "
                                f"{type(value).__name__}")
        if prediction.shape != target.shape:
            # (PyTorch broadcasts with a warning, which mostly hides a bug: (N, 1) vs (N,))
            raise ValueError(f"MSELoss: prediction of shape {prediction.shape} and target "
                             f"of shape {target.shape} differ")
        diff = prediction - target
        return _reduce(diff * diff, self.reduction)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"
