"""A copy to another device that gradients flow back through (`Tensor.to`)."""

from __future__ import annotations

from typing import Any

from ..autograd.graph import Value
from ..autograd.tensor import Tensor, TensorOp
from ..backends import Device


class ToDevice(TensorOp):
    """A copy of a tensor of device `source` on device `target` (as `dtype`, None: its own);
    its adjoint is copied back in the input's dtype."""

    def __init__(self, source: Device, target: Device, dtype: Any = None):
        self.source, self.target, self.dtype = source, target, dtype

    def __call__(self, a: Tensor) -> Tensor:
        out = Tensor.make_from_op(self, (a,))
        out.device = self.target  # (make_from_op gives an output its input's device)
        return out

    def compute(self, a: Any) -> Any:
        return self.target.asarray(a, dtype=self.dtype)

    def gradient(self, out_grad: Any, node: Any) -> Any:
        dtype = node.inputs[0].dtype  # (the input's: jax without x64 gives float32)
        if isinstance(out_grad, Value):
            return ToDevice(self.target, self.source, dtype)(out_grad)
        return self.source.asarray(out_grad, dtype=dtype)  # (raw arrays: no graph recorded)


def to_device(a: Tensor, device: Device) -> Tensor:
    """`a` on `device`: a copy in the graph, so its gradient reaches `a` (as PyTorch's .to)."""
    return ToDevice(a.device, device)(a)
