"""Matrix multiplication, batched with broadcasting of the batch dimensions."""

from __future__ import annotations

from ..autograd import Tensor, TensorOp
from .movement import reshape, transpose


class MatMul(TensorOp):
    """a @ b for tensors of 2 or more dimensions; batch dimensions broadcast."""

    def compute(self, a, b):
        if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not aligned"
            )
        return a @ b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # the engine sums broadcast batch dimensions back to each operand's shape;
        # an operand that needs no gradient (data) costs no matmul
        grad_a = out_grad @ transpose(b) if a.requires_grad else None
        grad_b = transpose(a) @ out_grad if b.requires_grad else None
        return grad_a, grad_b


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b; 1-d operands are treated as a row (left) or column (right) vector, as numpy does."""
    if a.ndim == 1 and b.ndim == 1:
        return reshape(MatMul()(reshape(a, (1, -1)), reshape(b, (-1, 1))), ())
    if a.ndim == 1:
        out = MatMul()(reshape(a, (1, -1)), b)
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = MatMul()(a, reshape(b, (-1, 1)))
        return reshape(out, out.shape[:-1])
    return MatMul()(a, b)
