"""Dropout's mask-and-scale as one op: x * (draws <= keep) / keep.

The draws are uniform numbers of x's shape from the device's generator (`Device.random`); an
entry is kept where its draw is at most `keep` = 1 - p. The op is linear in x, so its
gradient is the same op on the output's adjoint (and so to every order). On cuda it is one
kernel (backends/dropout.py) where the portable version makes the mask, the product and the
quotient as three arrays; both round the same two operations in the same order.
"""

from __future__ import annotations

from typing import Any

from ..arguments import check_range
from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..kernels import Kernel
from .dtypes import check_floating


def dropout_portable(x: Any, draws: Any, keep: float) -> Any:
    """x * mask / keep with mask = (draws <= keep) as x's dtype (the course's float32 order)."""
    return x * namespace(x).astype(draws <= keep, x.dtype) / keep


DROPOUT = Kernel("dropout", dropout_portable,
                 fast={"cuda": "needle.backends.dropout:dropout_cuda",
                       "torch": "needle.backends.dropout_torch:dropout_torch"})


class DropoutMask(TensorOp):
    """x * (draws <= keep) / keep for uniform `draws` of x's shape (a constant input)."""

    def __init__(self, keep: float):
        # keep > 1 would scale by 1 / keep with no entry dropped, 0 divide by 0
        if keep.__class__ is float and 0.0 < keep <= 1.0:  # (made at every forward)
            self.keep = keep
        else:
            self.keep = check_range("dropout", "keep", keep, 0.0, 1.0, high_inclusive=True,
                                    low_inclusive=False)

    def compute(self, x, draws):
        if tuple(draws.shape) != tuple(x.shape):
            raise ValueError(f"dropout: draws of shape {tuple(draws.shape)} for an input of "
                             f"shape {tuple(x.shape)}")
        check_floating("dropout", x)
        return DROPOUT(x, draws, self.keep)

    def gradient(self, out_grad, node):
        return DropoutMask(self.keep)(out_grad, node.inputs[1]), None


def dropout_mask(x: Tensor, draws: Tensor, keep: float) -> Tensor:
    """x * (draws <= keep) / keep: Dropout's mask and scale in one node."""
    return DropoutMask(keep)(x, draws)
