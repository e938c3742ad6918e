"""Dropout's mask-and-scale on the torch device (fast version of needle.ops.dropout.DROPOUT):
x times the boolean mask, then divided by keep in place: three ops where the portable rule
makes four (the mask's cast to x's dtype). The product by a boolean is the product by its
1.0 or 0.0, so the numbers are the reference's to the bit (-0, inf and NaN included)."""

from __future__ import annotations

from typing import Any

import torch


def dropout_torch(x: Any, draws: Any, keep: float) -> Any:
    """x * (draws <= keep) / keep."""
    if not x.is_floating_point():
        return NotImplemented  # the reference's promotion (and error)
    return torch.mul(x, draws <= keep).div_(keep)
