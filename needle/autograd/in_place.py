"""The in-place operators of a Tensor (`p -= lr * p.grad`): in place where no graph needs
the result, as PyTorch's; a new node of the graph otherwise, as the course's."""

from __future__ import annotations

import warnings
from typing import Any, Callable

from ..grad_mode import _grad_enabled


def in_place(self: Any, op: str, fn: Callable[[Any], Any], other: Any) -> Any:
    """`fn(other)` stored in tensor `self` (in its dtype, as PyTorch's in-place ops), which
    is returned and marked modified, where no graph needs the result: under no_grad(),
    or with nothing that requires grad. Else a new tensor, a node of the graph (`x +=
    y` in a forward; the course's tensors require grad by default), except for a
    Parameter (PyTorch's error: update it under no_grad()); a leaf that has a gradient
    warns (`W -= lr * W.grad` chains every step's W into one growing graph)."""
    if _grad_enabled() and (self.requires_grad or getattr(other, "requires_grad", False)):
        if self.requires_grad and self.op is None:
            if self._in_place_needs_no_grad:
                raise RuntimeError(f"a leaf Tensor that requires grad is used in an "
                                   f"in-place operation ({op}): update it inside `with "
                                   "ndl.no_grad():`, or through .data")
            if self._grad is not None:  # (the course's W -= lr * W.grad: its needle
                warnings.warn(  # rebinds, chaining every step's W into one graph)
                    f"`{op}` on a leaf Tensor that has a gradient makes a new Tensor of "
                    "the graph, as the course's needle does, so each update adds to one "
                    "growing graph; update it inside `with ndl.no_grad():` (in place) or "
                    "with `W = (W - lr * W.grad).detach()`", UserWarning, stacklevel=3)
        return fn(other)
    out = fn(other)
    if out.shape != self.shape:
        raise ValueError(f"in-place {op}: the result's shape {out.shape} is not the "
                         f"tensor's {self.shape}")
    if out.dtype != self.dtype:
        if self.dtype.kind != "f" and out.dtype.kind == "f":
            raise TypeError(f"in-place {op}: the {out.dtype} result cannot be stored in "
                            f"a tensor of dtype {self.dtype}")
        from ..ops import astype

        out = astype(out, self.dtype)
    self.data = out
    return self
