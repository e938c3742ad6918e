"""Training utilities: clip_grad_norm_."""

from __future__ import annotations

import math
from typing import Iterable

from ..autograd import Tensor


def _norm(xp, array, p: float):
    """The p-norm of a whole array as a 0-d array (p = inf: the largest magnitude)."""
    return xp.linalg.vector_norm(array, ord=p)


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0) -> float:
    """Scale every `.grad` by max_norm / (total_norm + 1e-6) when that is below 1.

    total_norm is the `norm_type`-norm of all the gradients together (parameters whose grad is
    None are skipped), returned as a float, measured before clipping, as PyTorch does. Each
    clipped grad is replaced by a new constant tensor (a grad may be shared between parameters
    or belong to a recorded graph, so it is never changed in place).
    """
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    max_norm, p = float(max_norm), float(norm_type)
    if not params:
        return 0.0
    by_device: dict = {}  # one stacked reduction and one read-back per device
    for param in params:
        grad = param.grad
        xp = grad.device.xp
        norm = _norm(xp, grad._realize(), p)
        by_device.setdefault(grad.device, []).append(xp.astype(norm, xp.float64))
    norms = [float(_norm(d.xp, d.xp.stack(ns), p)) for d, ns in by_device.items()]
    total = max(norms) if math.isinf(p) else math.fsum(n ** p for n in norms) ** (1.0 / p)
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for param in params:
            grad = param.grad
            param.grad = Tensor.make_const(grad._realize() * coef,
                                           device=grad.device)
    return total
