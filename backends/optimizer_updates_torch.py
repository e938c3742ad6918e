"""Adam and SGD updates in place on the torch device (fast versions of needle.optim.adam.ADAM
and needle.optim.sgd.SGD_STEP), as the cpu and cuda kernels of optimizer_updates.py.

Whole-array torch ops with in-place variants and two temporaries, every product and sum in
the portable rule's order (torch's elementwise kernels round each op once), so the numbers
are the portable rule's to the bit. Updating in place lets the optimizer keep its flat arrays
and the parameters' views of them from one step to the next, where new arrays would be
sliced and reshaped back into every parameter at every step (three views per parameter).
State given as None starts as zeros (laid out as the parameter); a tensor whose elements do
not fill its memory once each in some order of its axes (an expanded view) is copied
first, and the copy returned.
"""

from __future__ import annotations

from typing import Any

import torch


def _dense(a: torch.Tensor) -> bool:
    """Whether `a`'s elements fill its memory once each in some order of its axes (C order,
    or a permutation of it: torch's conv weights are (C_out, C_in, K, K) in memory)."""
    order = sorted(range(a.ndim), key=lambda i: -a.stride(i))
    return a.permute(order).is_contiguous()


def _own(a: torch.Tensor) -> torch.Tensor:
    """`a` where it can be updated in place (its layout kept), else a contiguous copy."""
    return a if a.is_contiguous() or _dense(a) else a.contiguous()


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


# ----- many tensors at once: foreach ops (a GPU launches one kernel per pass for the list) --
# On the cpu a launch costs little and a fresh array (page faults) much, so there the lists
# go to the reference, adam_torch / sgd_torch per tensor; the foreach versions are tested on
# the cpu directly (tests/test_kernels.py) and through the kernels on a GPU.
def _decayed_many(params: list, grads: list, weight_decay: float) -> list:
    """grad + wd param per tensor (the grads themselves without decay: never written)."""
    if not weight_decay:
        return list(grads)
    g = torch._foreach_mul(params, weight_decay)
    torch._foreach_add_(g, grads)
    return g


def adam_many_torch(params: list, grads: list, ms: list, vs: list, *, lr_t: float,
                    beta1: float, beta2: float, eps_t: float,
                    weight_decay: float) -> list[tuple[Any, Any, Any]]:
    """adam_foreach on a GPU (the reference's loop of adam_torch on the cpu)."""
    if not params[0].is_cuda:
        return NotImplemented
    return adam_foreach(params, grads, ms, vs, lr_t=lr_t, beta1=beta1, beta2=beta2,
                        eps_t=eps_t, weight_decay=weight_decay)


def adam_foreach(params: list, grads: list, ms: list, vs: list, *, lr_t: float,
                 beta1: float, beta2: float, eps_t: float,
                 weight_decay: float) -> list[tuple[Any, Any, Any]]:
    """adam_torch on every tensor of the lists, pass by pass: the same roundings."""
    params = [_own(p) for p in params]
    ms = [_state(m, p) for m, p in zip(ms, params)]
    vs = [_state(v, p) for v, p in zip(vs, params)]
    g = _decayed_many(params, grads, weight_decay)
    u = torch._foreach_mul(g, 1 - beta1)  # m = g (1 - b1) + m b1
    torch._foreach_mul_(ms, beta1)
    torch._foreach_add_(ms, u)
    u = torch._foreach_mul(g, g)  # v = g g (1 - b2) + v b2
    torch._foreach_mul_(u, 1 - beta2)
    torch._foreach_mul_(vs, beta2)
    torch._foreach_add_(vs, u)
    denom = torch._foreach_sqrt(vs)  # sqrt(v) + eps_t
    torch._foreach_add_(denom, eps_t)
    t = torch._foreach_mul(ms, lr_t)  # update = m lr_t / denominator
    torch._foreach_div_(t, denom)
    torch._foreach_sub_(params, t)
    return list(zip(params, ms, vs))


def sgd_many_torch(params: list, grads: list, us: list, *, lr: float, momentum: float,
                   weight_decay: float) -> list[tuple[Any, Any]]:
    """sgd_foreach on a GPU (the reference's loop of sgd_torch on the cpu)."""
    if not params[0].is_cuda:
        return NotImplemented
    return sgd_foreach(params, grads, us, lr=lr, momentum=momentum, weight_decay=weight_decay)


def sgd_foreach(params: list, grads: list, us: list, *, lr: float, momentum: float,
                weight_decay: float) -> list[tuple[Any, Any]]:
    """sgd_torch on every tensor of the lists, pass by pass: the same roundings."""
    if momentum and len({u is None for u in us}) > 1:
        return NotImplemented  # some have momentum state and some not: one by one
    params = [_own(p) for p in params]
    g = _decayed_many(params, grads, weight_decay)
    if momentum:
        step = torch._foreach_mul(g, 1 - momentum)
        if us[0] is None:
            us = step  # momentum * 0 + (1 - momentum) g is exactly (1 - momentum) g
        else:
            us = [_own(u) for u in us]
            torch._foreach_mul_(us, momentum)
            torch._foreach_add_(us, step)
        g = us
    torch._foreach_sub_(params, torch._foreach_mul(g, lr))
    return list(zip(params, us if momentum else [None] * len(params)))
