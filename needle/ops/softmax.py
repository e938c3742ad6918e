"""Softmax over the last axis, fused with attention's scaling and causal mask.

As a composite, attention's `softmax(q kᵀ / sqrt(D) + mask)` costs four nodes forward (divide,
add the mask, logsoftmax, exp) and as many gradient chains backward, each a pass over the
(B, H, T, T_k) logits. Here it is one node, computed as the course's softmax is,
exp(z - max) / sum(exp(z - max)), and its gradient is one node, y (g - sum(g y)) / temperature,
whose own gradient (second order) is built from needle ops.
"""

from __future__ import annotations

from typing import Any

from ..arguments import flag, real
from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..kernels import SUM, Kernel
from .dtypes import check_floating
from .movement import broadcast_to, reshape
from .reduce import _finite_max, summation

# the course's causal mask value, -np.finfo(np.float32).max: finite, so masked logits
# give exact zeros after the max shift rather than NaN
NEG_MAX = -3.4028234663852886e38


def _causal(xp, z):
    """z plus the course's mask, -max * triu(ones, j - i + 1) over the last two axes (i
    queries, the last i of j keys): keys after their query get NEG_MAX (float32 rounds any
    ordinary logit away)."""
    i, j = z.shape[-2], z.shape[-1]
    later = xp.arange(j, device=z.device)[None, :] > xp.arange(j - i, j, device=z.device)[:, None]
    return z + xp.astype(later, z.dtype) * mask_value(xp, z.dtype)


def mask_value(xp: Any, dtype: Any) -> float:
    """NEG_MAX, or the dtype's lowest finite number where NEG_MAX is beyond it (float16:
    -65504): a mask of -inf would make its 0 entries 0 * -inf = NaN."""
    return max(NEG_MAX, -float(xp.finfo(dtype).max))


def softmax_portable(a: Any, temperature: float, causal: bool) -> Any:
    """softmax(a / temperature) over the last axis, the course's way: exp(z - max) /
    sum(exp(z - max)), with the causal mask added to z first when asked."""
    xp = namespace(a)
    z = a / temperature if temperature != 1.0 else a
    if causal:
        z = _causal(xp, z)
    e = xp.exp(z - _finite_max(xp, z, (a.ndim - 1,)))
    return e / SUM(e, (e.ndim - 1,), True)


def softmax_grad_portable(y: Any, g: Any, temperature: float) -> Any:
    """y (g - sum(g y)) / temperature, the sum over the last axis."""
    gy = g * y
    out = gy - y * SUM(gy, (gy.ndim - 1,), True)
    return out / temperature if temperature != 1.0 else out


#: on cpu the same passes made in place, with the causal mask made once per shape: a fresh
#: array each way instead of six forward and three backward (attention's logits are big);
#: on cuda one kernel each way, a block per row; on torch PyTorch's fused softmax
SOFTMAX = Kernel("softmax", softmax_portable,
                 fast={"cpu": "needle.backends.softmax:softmax_cpu",
                       "cuda": "needle.backends.softmax:softmax_cuda",
                       "torch": "needle.backends.softmax_torch:softmax_torch"})
SOFTMAX_GRAD = Kernel("softmax_grad", softmax_grad_portable,
                      fast={"cpu": "needle.backends.softmax:softmax_grad_cpu",
                            "cuda": "needle.backends.softmax:softmax_grad_cuda",
                            "torch": "needle.backends.softmax_torch:softmax_grad_torch"})


class Softmax(TensorOp):
    """softmax(a / temperature) over the last axis; with `causal`, a key after its query
    (j > i over the last two axes) gets probability 0."""

    def __init__(self, temperature: float = 1.0, causal: bool = False):
        temperature = real("softmax", "temperature", temperature)
        if not temperature > 0:
            raise ValueError(f"softmax: temperature must be positive, found {temperature}")
        self.temperature = temperature
        self.causal = flag("softmax", "causal", causal)

    def compute(self, a):
        check_floating("softmax", a)
        if a.ndim < 1 + self.causal:  # checked here: each library fails in its own way
            need = "a causal mask needs 2" if self.causal else "softmax over the last axis needs 1"
            raise ValueError(f"softmax: {need} or more dimensions, found shape {tuple(a.shape)}")
        if self.causal and a.shape[-2] > a.shape[-1] > 0:
            # the first queries would see no key and attend to all of them alike (no keys
            # at all: an empty result, nothing to mask)
            raise ValueError(f"softmax: a causal mask needs at least as many keys (the last "
                             f"axis) as queries (the axis before), found shape "
                             f"{tuple(a.shape)}")
        return SOFTMAX(a, self.temperature, self.causal)

    def gradient(self, out_grad, node):
        return SoftmaxGrad(self.temperature)(node.result, out_grad)


def softmax(a: Tensor, temperature: float = 1.0, causal: bool = False) -> Tensor:
    """softmax(a / temperature) over the last axis, max-stabilised; `causal` masks keys
    after their query (the last two axes)."""
    return Softmax(temperature, causal)(a)


class SoftmaxGrad(TensorOp):
    """The adjoint of Softmax given its output y and output adjoint g:
    y (g - sum(g y)) / temperature, sums over the last axis."""

    def __init__(self, temperature: float = 1.0):
        self.temperature = float(temperature)

    def compute(self, y, g):
        return SOFTMAX_GRAD(y, g, self.temperature)

    def gradient(self, h, node):
        # F(y, g) = c y (g - s) with s = sum(g y) and c = 1 / temperature. F is linear in g:
        # dF/dg . h = F(y, h); and dF/dy . h = c (h (g - s) - g sum(h y)).
        y, g = node.inputs
        need_y, need_g = node.needs_input_grad
        grad_g = SoftmaxGrad(self.temperature)(y, h) if need_g else None
        if not need_y:
            return None, grad_g
        shape, last = tuple(y.shape), y.ndim - 1

        def row_sum(t: Tensor) -> Tensor:  # over the last axis, broadcast back
            return broadcast_to(reshape(summation(t, (last,)), shape[:-1] + (1,)), shape)

        grad_y = h * (g - row_sum(g * y)) - g * row_sum(h * y)
        return grad_y / self.temperature, grad_g
