"""Adam with bias correction and (L2) weight decay."""

from __future__ import annotations

import math
from typing import Any, Iterable

from ..autograd import Tensor
from ..backends import namespace
from ..kernels import Kernel
from .optimizer import Optimizer, check_range


def adam_portable(param: Any, grad: Any, m: Any, v: Any, *, lr_t: float, beta1: float,
                  beta2: float, eps_t: float, weight_decay: float) -> tuple[Any, Any, Any]:
    """(param, m, v) after one Adam update with bias-corrected `lr_t` and `eps_t`: g = grad
    + wd param; m, v = moving averages of g and g^2 (None: they start at 0); param - lr_t m /
    (sqrt(v) + eps_t)."""
    # the in-place operators below only touch arrays made here: fewer big temporaries on
    # mutable arrays; on immutable ones (jax) Python falls back to `a = a + b`, which is
    # why every result is rebound, never assumed changed in place (test_optim checks both)
    if weight_decay == 0:
        g = grad
    else:
        g = param * weight_decay
        g += grad
    step = g * (1 - beta1)
    if m is not None:  # the moments start at 0, where b m + (1 - b) g is (1 - b) g
        step += m * beta1
    m = step
    sq = g * g
    sq *= 1 - beta2
    if v is not None:
        sq += v * beta2
    v = sq
    denom = namespace(param).sqrt(v)
    denom += eps_t
    update = m * lr_t
    update /= denom
    return param - update, m, v


#: on cpu (chunked numpy), cuda (one kernel) and torch (whole-array in-place ops) the
#: update is made in place
ADAM = Kernel("adam", adam_portable, fast={
    "cpu": "needle.backends.optimizer_updates:adam_cpu",
    "cuda": "needle.backends.optimizer_updates:adam_cuda",
    "torch": "needle.backends.optimizer_updates_torch:adam_torch",
})


def adam_many_portable(params: list, grads: list, ms: list, vs: list, *, lr_t: float,
                       beta1: float, beta2: float, eps_t: float,
                       weight_decay: float) -> list[tuple[Any, Any, Any]]:
    """[(param, m, v)] of ADAM on each parameter of the lists (an m or v of None: zeros)."""
    return [ADAM(p, g, m, v, lr_t=lr_t, beta1=beta1, beta2=beta2, eps_t=eps_t,
                 weight_decay=weight_decay) for p, g, m, v in zip(params, grads, ms, vs)]


#: the big parameters of a device and dtype in one call: on torch foreach ops (one launch
#: per pass for all of them on a GPU), in place, the same numbers as ADAM
ADAM_MANY = Kernel("adam_many", adam_many_portable, fast={
    "torch": "needle.backends.optimizer_updates_torch:adam_many_torch"})


def _betas(betas: Any, beta1: Any, beta2: Any) -> tuple[float, float]:
    """PyTorch's `betas=(beta1, beta2)` as the two values, checked as betas[0], betas[1]."""
    given = [name for name, value in (("beta1", beta1), ("beta2", beta2)) if value is not None]
    if given:
        raise TypeError(f"Adam: betas is PyTorch's spelling of beta1 and beta2; give one "
                        f"spelling, not betas and {' and '.join(given)}")
    if not isinstance(betas, (tuple, list)):
        raise TypeError(f"Adam: betas must be a tuple (beta1, beta2), found "
                        f"{type(betas).__name__}")
    if len(betas) != 2:
        raise ValueError(f"Adam: betas must be a tuple of 2 numbers (beta1, beta2), found "
                         f"{len(betas)}: {tuple(betas)!r}")
    return check_range("Adam", "betas[0]", betas[0], 0.0, 1.0), check_range(
        "Adam", "betas[1]", betas[1], 0.0, 1.0)


class Adam(Optimizer):
    """g = grad + wd p; m, v = moving averages of g and g^2; p -= lr m^ / (sqrt(v^) + eps).

    m^ = m / (1 - beta1^t) and v^ = v / (1 - beta2^t), where t counts the steps that updated
    the parameter (as PyTorch's per-parameter step: `opt.t`, the step() calls, where every
    parameter had a gradient at every step, as in the course).
    """

    counts_steps = True

    hyperparameters = ("lr", "beta1", "beta2", "eps", "weight_decay")
    state_names = ("m", "v")

    def __init__(self, params: Iterable[Tensor], lr: float = 0.01, beta1: float | None = None,
                 beta2: float | None = None, eps: float = 1e-8, weight_decay: float = 0.0,
                 *, betas: tuple[float, float] | None = None):
        """beta1 and beta2 default to 0.9 and 0.999; `betas=(beta1, beta2)` is PyTorch's
        spelling of both (giving it with either of them is a TypeError)."""
        super().__init__(params)
        if betas is not None:
            beta1, beta2 = _betas(betas, beta1, beta2)
        self.lr = lr
        self.beta1 = 0.9 if beta1 is None else beta1
        self.beta2 = 0.999 if beta2 is None else beta2
        self.eps = eps
        self.weight_decay = weight_decay

    def _check(self, name: str, value: Any) -> float:
        if name in ("beta1", "beta2"):
            return check_range("Adam", name, value, 0.0, 1.0)
        return check_range("Adam", name, value, 0.0)

    def _settings(self) -> dict[str, float]:
        # lr m^ / (sqrt(v^) + eps) = (lr sqrt(c2) / c1) m / (sqrt(v) + eps sqrt(c2)),
        # with c = 1 - beta^t: the same quantity in fewer whole-array passes
        t = self._step_count  # the updates of the parameters at hand, this one included
        c1, c2 = 1 - self.beta1**t, math.sqrt(1 - self.beta2**t)
        return dict(lr_t=self.lr * c2 / c1, beta1=self.beta1, beta2=self.beta2,
                    eps_t=self.eps * c2, weight_decay=self.weight_decay)

    def _update(self, param: Any, grad: Any, state: dict) -> tuple[Any, dict]:
        param, m, v = ADAM(param, grad, state.get("m"), state.get("v"), **self._settings())
        return param, {"m": m, "v": v}

    def _update_many(self, params: list, grads: list, states: list[dict]) -> list:
        out = ADAM_MANY(params, grads, [s.get("m") for s in states],
                        [s.get("v") for s in states], **self._settings())
        return [(p, {"m": m, "v": v}) for p, m, v in out]
