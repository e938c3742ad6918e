"""Matrix multiplication, batched with broadcasting of the batch dimensions."""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor
from ..backends import namespace
from ..kernels import ADD_TO_FRESH, Kernel
from .dtypes import PromotingOp, check_not_bool, is_bool
from .elementwise import check_broadcast
from .movement import reshape, sum_to_shape


def matmul_portable(a: Any, b: Any) -> Any:
    """a @ b of two arrays (xp's matmul: jax's computes float32 at full precision)."""
    return namespace(a).matmul(a, b)


#: cuda: one cuBLAS call made directly, skipping cupy.matmul's Python-side checks
#: (backends/matmul.py)
MATMUL = Kernel("matmul", matmul_portable, fast={"cuda": "needle.backends.matmul:matmul_cuda"})


class MatMul(PromotingOp):
    """a @ b for tensors of 2 or more dimensions; batch dimensions broadcast.

    `transpose_a` / `transpose_b` multiply by the swapped last two axes instead (as BLAS
    does), so the gradients below need no Transpose nodes.
    """

    op_name = "matmul"

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b

    def compute(self, a, b):
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not "
                             "aligned (the op needs 2 or more dimensions)")
        for m, n in zip(a.shape[-3::-1], b.shape[-3::-1]):  # batch dimensions, from the right
            if m != n and m != 1 and n != 1:
                raise ValueError(f"matmul: the batch dimensions of shapes {tuple(a.shape)} and "
                                 f"{tuple(b.shape)} do not broadcast")
        if is_bool(a):  # (numpy and jax gave bools, torch and strict refused them)
            check_not_bool("matmul", a)
        xp = namespace(a)
        if self.transpose_a:
            a = xp.matrix_transpose(a)
        if self.transpose_b:
            b = xp.matrix_transpose(b)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not aligned"
            )
        if a.ndim > 2 and b.ndim == 2:
            # a stack of rows times one matrix (Linear on (B, T, F)): one 2-d product, where
            # a batched matmul would make one small product per leading index
            lead = tuple(a.shape[:-1])
            out = MATMUL(xp.reshape(a, (-1, a.shape[-1])), b)
            return xp.reshape(out, lead + (b.shape[-1],))
        return MATMUL(a, b)

    def gradient(self, out_grad, node):
        a, b = node.inputs
        return matmul_adjoints(a, b, out_grad, self.transpose_a, self.transpose_b,
                               node.needs_input_grad)


def matmul_adjoints(a: Tensor, b: Tensor, out_grad: Tensor, ta: bool = False,
                    tb: bool = False, needs: tuple[bool, bool] = (True, True),
                    ) -> tuple[Tensor | None, Tensor | None]:
    """The adjoints of a and b in C = op(A) op(B) for dC = out_grad (None where an operand
    needs no gradient).

    d op(A) = G op(B)^T and d op(B) = op(A)^T G, each transposed back when its operand was,
    and summed over the batch dimensions that were broadcast. An operand that needs no
    gradient (`needs`, the node's `needs_input_grad`) costs no matmul. Tensors or arrays.
    """
    grad_a = grad_b = None
    if needs[0]:
        grad_a = sum_to_shape(MatMul(tb, True)(b, out_grad) if ta else
                              MatMul(False, not tb)(out_grad, b), a.shape)
    if needs[1]:
        if b.ndim == 2 and a.ndim > 2 and not ta:
            # the batch folded into the rows: one (F, N) @ (N, out) product, no batch sum
            rows_a = reshape(a, (-1, a.shape[-1]))
            rows_g = reshape(out_grad, (-1, out_grad.shape[-1]))
            grad_b = (MatMul(True, False)(rows_g, rows_a) if tb else
                      MatMul(True, False)(rows_a, rows_g))
        else:
            grad_b = sum_to_shape(MatMul(True, ta)(out_grad, a) if tb else
                                  MatMul(not ta, False)(a, out_grad), b.shape)
    return grad_a, grad_b


class Affine(PromotingOp):
    """x @ w + b in one node (a Linear layer): x (..., n_in), w (n_in, n_out), b broadcasting
    against (..., n_out).

    The bias is added to the product's fresh array (in place where the device allows), and
    the gradient is MatMul's plus the bias's sum over the broadcast axes, all needle ops.
    """

    op_name = "linear"

    def compute(self, x, w, b):
        out = MatMul().compute(x, w)
        check_broadcast("affine", out, b)
        return ADD_TO_FRESH(out, b)

    def gradient(self, out_grad, node):
        x, w, b = node.inputs
        needs = node.needs_input_grad
        grad_x, grad_w = matmul_adjoints(x, w, out_grad, needs=needs[:2])
        return grad_x, grad_w, (sum_to_shape(out_grad, b.shape) if needs[2] else None)


def affine(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """x @ w + b as one node (x of 2 or more dimensions)."""
    return Affine()(x, w, b)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b; 1-d operands are treated as a row (left) or column (right) vector, as numpy does."""
    if isinstance(a, (list, tuple, int, float)) or isinstance(b, (list, tuple, int, float)):
        return MatMul()(a, b)  # (its error names the operand)
    if a.ndim == 1 and b.ndim == 1:
        return reshape(MatMul()(reshape(a, (1, -1)), reshape(b, (-1, 1))), ())
    if a.ndim == 1:
        out = MatMul()(reshape(a, (1, -1)), b)
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = MatMul()(a, reshape(b, (-1, 1)))
        return reshape(out, out.shape[:-1])
    return MatMul()(a, b)
