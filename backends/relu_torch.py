"""ReLU's adjoint on the torch device (fast version of needle.ops.unary.RELU_GRAD): g times
the boolean mask a > 0, two ops where the portable rule makes three (the mask's cast to a's
dtype). The product by a boolean is the product by its 1.0 or 0.0, so the numbers are the
reference's to the bit (-0 and NaN included)."""

from __future__ import annotations

from typing import Any

import torch


def relu_grad_torch(g: Any, a: Any) -> Any:
    """g * (a > 0)."""
    if g.dtype != a.dtype or not g.is_floating_point():
        return NotImplemented  # the reference's promotion
    return torch.mul(g, a > 0)
