"""Training utilities: clip_grad_norm_."""

from __future__ import annotations

import math
from typing import Iterable

from ..arguments import flag
from ..autograd import Tensor
from ..autograd.graph import replayed


def _norm(xp, array, p: float):
    """The p-norm of a whole array as a 0-d array (p = inf: the largest magnitude)."""
    return xp.linalg.vector_norm(array, ord=p)


@replayed  # ndl.compile runs it again at replay, on the gradients of that step
def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
    """Scale every `.grad` by min(1, max_norm / (total_norm + 1e-6)); returns total_norm.

    total_norm is the `norm_type`-norm of all the gradients together (parameters whose grad is
    None are skipped), measured before clipping, returned as a 0-d Tensor (float64 where the
    device has it; `float()` reads it), as PyTorch does. Nothing is read to the host: the
    factor is computed and applied on the device, so every grad is multiplied (by exactly 1.0
    when the norm is below `max_norm`). Each grad is replaced by a new constant tensor (a grad
    may be shared between parameters or belong to a recorded graph, so it is never changed in
    place). Gradients on several devices are combined through the host. Parameters of a
    needle.distributed optimizer have their gradients averaged over the ranks first (its
    step() then does not average them again), so every rank clips the same mean gradient.
    With `error_if_nonfinite`, a NaN or infinite total norm is a RuntimeError and nothing is
    clipped (this reads the norm to the host, as PyTorch's does).
    """
    from ..distributed import parallel

    if isinstance(parameters, Tensor):
        parameters = [parameters]
    params = [p for p in parameters if p.grad is not None]
    max_norm, p = float(max_norm), float(norm_type)
    if not params:
        return Tensor(0.0, dtype="float32", requires_grad=False)
    owners = parallel.average_for_clipping(params) if parallel.WRAPPERS else ()
    by_device: dict = {}  # one stacked reduction per device
    for param in params:
        grad = param.grad
        xp = grad.device.xp
        g = grad._realize()
        if xp.finfo(g.dtype).bits < 32:  # float16: its sum of squares overflows at 65504
            g = xp.astype(g, xp.float32)
        norm = _norm(xp, g, p)
        by_device.setdefault(grad.device, []).append(xp.astype(norm, xp.float64))
    totals = {d: _norm(d.xp, d.xp.stack(ns), p) for d, ns in by_device.items()}
    if len(totals) > 1:  # across devices: the per-device norms meet on the host
        norms = [float(d.to_numpy(t)) for d, t in totals.items()]
        first = params[0].grad.device  # (the p-norm of the norms, p < 0 too; p = 0 counts
        xp = first.xp  # the nonzero elements: the sum of the counts)
        total_norm = math.fsum(norms) if p == 0 else float(first.to_numpy(_norm(
            xp, xp.asarray(norms, dtype=xp.float64, device=first.native), p)))
        totals = {d: d.xp.asarray(total_norm, dtype=d.xp.float64, device=d.native)
                  for d in totals}
    else:
        first = next(iter(totals))
    if flag("clip_grad_norm_", "error_if_nonfinite", error_if_nonfinite):
        total = float(first.to_numpy(totals[first]))
        if not math.isfinite(total):
            raise RuntimeError(f"clip_grad_norm_: the total norm of order {p} of the gradients "
                               f"is {total}, so they cannot be clipped (error_if_nonfinite="
                               "False scales them by it anyway)")
    factors = {}
    for d, total in totals.items():
        coef = max_norm / (total + 1e-6)
        # min(coef, 1), NaN kept (a NaN norm makes every gradient NaN, as PyTorch's: a
        # where(coef < 1) took NaN for 1 and left the gradients unclipped)
        factors[d] = d.xp.minimum(coef, d.xp.ones_like(coef))
    scaled: dict[int, Tensor] = {}  # a grad shared by parameters is scaled once
    for param in params:
        grad = param.grad
        new = scaled.get(id(grad))
        if new is None:
            data = grad._realize()
            factor = grad.device.xp.astype(factors[grad.device], data.dtype)
            new = scaled[id(grad)] = Tensor.make_const(data * factor, device=grad.device)
        param.grad = new
    for owner in owners:
        owner.mark_averaged()
    return Tensor.make_const(totals[first], device=first)
