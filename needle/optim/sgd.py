"""Stochastic gradient descent with the course's momentum convention and weight decay."""

from __future__ import annotations

from typing import Any, Iterable

from ..autograd import Tensor
from .optimizer import Optimizer, check_range


class SGD(Optimizer):
    """g = grad + wd p;  u = momentum u + (1 - momentum) g  (u starts at 0);  p -= lr u."""

    hyperparameters = ("lr", "momentum", "weight_decay")
    state_names = ("u",)

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, momentum: float = 0.0,
                 weight_decay: float = 0.0):
        super().__init__(params)
        self.lr = self._check("lr", lr)
        self.momentum = self._check("momentum", momentum)
        self.weight_decay = self._check("weight_decay", weight_decay)

    def _check(self, name: str, value: Any) -> float:
        if name == "momentum":
            return check_range("SGD", name, value, 0.0, 1.0)
        return check_range("SGD", name, value, 0.0)

    def _update(self, param: Any, grad: Any, state: dict) -> tuple[Any, dict]:
        g = grad if self.weight_decay == 0 else grad + self.weight_decay * param
        if self.momentum == 0:
            return param - self.lr * g, {}
        m, u = self.momentum, state.get("u")
        # u starts at 0, where momentum * 0 + (1 - momentum) g is exactly (1 - momentum) g
        u = (1 - m) * g if u is None else m * u + (1 - m) * g
        return param - self.lr * u, {"u": u}

    def _update_in_place(self, device: Any, param: Any, grad: Any, state: dict) -> dict | None:
        u = None
        if self.momentum != 0:
            u = state.get("u")
            if u is None:  # the momentum starts at 0
                u = device.xp.zeros_like(param)
        done = device.sgd_step(param, grad, u, lr=self.lr, momentum=self.momentum,
                               weight_decay=self.weight_decay)
        if not done:
            return None
        return {} if u is None else {"u": u}
