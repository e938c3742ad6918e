"""Adam and SGD updates in place on the torch device (fast versions of needle.optim.adam.ADAM
and needle.optim.sgd.SGD_STEP), as the cpu and cuda kernels of optimizer_updates.py.

Whole-array torch ops with in-place variants and two temporaries, every product and sum in
the portable rule's order (torch's elementwise kernels round each op once), so the numbers
are the portable rule's to the bit. Updating in place lets the optimizer keep its flat arrays
and the parameters' views of them from one step to the next, where new arrays would be
sliced and reshaped back into every parameter at every step (three views per parameter).
State given as None starts as zeros; a tensor that is not contiguous is copied first, and
the copy returned.
"""

from __future__ import annotations

from typing import Any

import torch


def _own(a: torch.Tensor) -> torch.Tensor:
    """`a` where it can be updated in place, else a contiguous copy."""
    return a if a.is_contiguous() else a.contiguous()


def _state(a: torch.Tensor | None, param: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(param) if a is None else _own(a)


def _decayed(param: torch.Tensor, grad: torch.Tensor, weight_decay: float) -> torch.Tensor:
    """grad + wd param, a new tensor (grad itself without decay: never written)."""
    if not weight_decay:
        return grad
    g = torch.mul(param, weight_decay)
    g += grad
    return g


def adam_torch(param: Any, grad: Any, m: Any, v: Any, *, lr_t: float, beta1: float,
               beta2: float, eps_t: float, weight_decay: float) -> tuple[Any, Any, Any]:
    """Adam in place: m, v = moving averages of g = grad + wd param and g^2, then param -=
    lr_t m / (sqrt(v) + eps_t); returns (param, m, v)."""
    param = _own(param)
    m, v = _state(m, param), _state(v, param)
    g = _decayed(param, grad, weight_decay)
    u = torch.mul(g, 1 - beta1)  # m = g (1 - b1) + m b1
    m *= beta1
    m += u
    torch.mul(g, g, out=u)  # v = g g (1 - b2) + v b2
    u *= 1 - beta2
    v *= beta2
    v += u
    torch.sqrt(v, out=u)  # denominator sqrt(v) + eps_t
    u += eps_t
    t = torch.mul(m, lr_t)  # update = m lr_t / denominator
    t /= u
    param -= t
    return param, m, v


def sgd_torch(param: Any, grad: Any, u: Any, *, lr: float, momentum: float,
              weight_decay: float) -> tuple[Any, Any]:
    """SGD in place: g = grad + wd param; u = momentum u + (1 - momentum) g (no u without
    momentum); param -= lr u (or lr g); returns (param, u)."""
    param = _own(param)
    g = _decayed(param, grad, weight_decay)
    if momentum:
        step = torch.mul(g, 1 - momentum)
        if u is None:
            u = step  # momentum * 0 + (1 - momentum) g is exactly (1 - momentum) g
        else:
            u = _own(u)
            u *= momentum
            u += step
        g = u
    param -= torch.mul(g, lr)
    return param, (u if momentum else None)
