"""Stochastic gradient descent with the course's momentum convention and weight decay."""

from __future__ import annotations

from typing import Any, Iterable

from ..autograd import Tensor
from ..kernels import Kernel
from .optimizer import Optimizer, check_range


def sgd_portable(param: Any, grad: Any, u: Any, *, lr: float, momentum: float,
                 weight_decay: float) -> tuple[Any, Any]:
    """(param, u) after one SGD update: g = grad + wd param; u = momentum u + (1 - momentum)
    g (u None: it starts at 0; no u at all without momentum); param - lr u (or lr g)."""
    g = grad if weight_decay == 0 else grad + weight_decay * param
    if momentum == 0:
        return param - lr * g, None
    m = momentum
    # u starts at 0, where momentum * 0 + (1 - momentum) g is exactly (1 - momentum) g
    u = (1 - m) * g if u is None else m * u + (1 - m) * g
    return param - lr * u, u


#: on cpu (chunked numpy), cuda (one kernel) and torch (whole-array in-place ops) the
#: update is made in place
SGD_STEP = Kernel("sgd", sgd_portable, fast={
    "cpu": "needle.backends.optimizer_updates:sgd_cpu",
    "cuda": "needle.backends.optimizer_updates:sgd_cuda",
    "torch": "needle.backends.optimizer_updates_torch:sgd_torch",
})


def sgd_many_portable(params: list, grads: list, us: list, *, lr: float, momentum: float,
                      weight_decay: float) -> list[tuple[Any, Any]]:
    """[(param, u)] of SGD_STEP on each parameter of the lists."""
    return [SGD_STEP(p, g, u, lr=lr, momentum=momentum, weight_decay=weight_decay)
            for p, g, u in zip(params, grads, us)]


#: the big parameters of a device and dtype in one call: on torch foreach ops (one launch
#: per pass for all of them on a GPU), in place, the same numbers as SGD_STEP
SGD_MANY = Kernel("sgd_many", sgd_many_portable, fast={
    "torch": "needle.backends.optimizer_updates_torch:sgd_many_torch"})


class SGD(Optimizer):
    """g = grad + wd p;  u = momentum u + (1 - momentum) g  (u starts at 0);  p -= lr u."""

    hyperparameters = ("lr", "momentum", "weight_decay")
    state_names = ("u",)

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        super().__init__(params)
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay

    def _check(self, name: str, value: Any) -> float:
        if name == "momentum":
            return check_range("SGD", name, value, 0.0, 1.0)
        return check_range("SGD", name, value, 0.0)

    def _update(self, param: Any, grad: Any, state: dict) -> tuple[Any, dict]:
        param, u = SGD_STEP(param, grad, state.get("u"), lr=self.lr, momentum=self.momentum,
                            weight_decay=self.weight_decay)
        return param, ({} if u is None else {"u": u})

    def _update_many(self, params: list, grads: list, states: list[dict]) -> list:
        out = SGD_MANY(params, grads, [s.get("u") for s in states], lr=self.lr,
                       momentum=self.momentum, weight_decay=self.weight_decay)
        return [(p, {} if u is None else {"u": u}) for p, u in out]
