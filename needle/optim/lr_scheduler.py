"""Learning-rate schedules, PyTorch's `torch.optim.lr_scheduler` for needle's one-`lr`
optimizers: LRScheduler (scheduler.py), LambdaLR, StepLR, MultiStepLR, ExponentialLR,
CosineAnnealingLR and ReduceLROnPlateau (plateau.py)."""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from ..arguments import check_range, integer
from .optimizer import Optimizer
from .plateau import ReduceLROnPlateau
from .scheduler import LRScheduler

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR",
           "CosineAnnealingLR", "ReduceLROnPlateau"]


def _gamma(owner: str, value: Any) -> float:
    """A decay factor: a finite float > 0."""
    return check_range(owner, "gamma", value, 0.0, low_inclusive=False)


class LambdaLR(LRScheduler):
    """lr = initial lr * lr_lambda(epoch)."""

    state_names = LRScheduler.state_names + ("lr_lambdas",)

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] |
                 list[Callable[[int], float]], last_epoch: int = -1):
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda]
        if len(fns) != 1:
            raise ValueError(f"LambdaLR: expected 1 lr_lambda (the optimizer has one lr), "
                             f"found {len(fns)}")
        if not callable(fns[0]):
            raise TypeError(f"LambdaLR: lr_lambda must be callable, found "
                            f"{type(fns[0]).__name__}")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        """As LRScheduler's; a function in `lr_lambdas` is saved as None, a callable object
        as a copy of its `__dict__` (PyTorch's)."""
        state = super().state_dict()
        state["lr_lambdas"] = [
            None if isinstance(fn, types.FunctionType) or not hasattr(fn, "__dict__")
            else dict(fn.__dict__) for fn in self.lr_lambdas]
        return state

    def _loaded(self, name: str, value: Any) -> Any:
        if name != "lr_lambdas":
            return super()._loaded(name, value)
        if not isinstance(value, (list, tuple)) or len(value) != 1 or not (
                value[0] is None or isinstance(value[0], Mapping)):
            raise ValueError(f"LambdaLR: lr_lambdas must be [None] or [a dict of a callable "
                             f"object's attributes], found {value!r}")
        return value

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """As LRScheduler's; the callable objects' attributes are restored, functions kept."""
        fns = self.lr_lambdas
        super().load_state_dict(state_dict)
        for fn, attributes in zip(fns, self.lr_lambdas):
            if attributes is not None:
                fn.__dict__.update(attributes)
        self.lr_lambdas = fns


class StepLR(LRScheduler):
    """lr *= gamma every `step_size` epochs: initial lr * gamma^(epoch // step_size)."""

    settings = ("step_size", "gamma")

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check(self, name: str, value: Any) -> Any:
        if name == "step_size":
            return integer("StepLR", name, value, 1)
        return _gamma("StepLR", value)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each epoch of `milestones` (gamma^n at one listed n times)."""

    settings = ("milestones", "gamma")

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1,
                 last_epoch: int = -1):
        self.milestones = milestones
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check(self, name: str, value: Any) -> Any:
        if name == "gamma":
            return _gamma("MultiStepLR", value)
        if isinstance(value, Mapping):  # a Counter, as state_dict() holds it
            items = [n for n, count in value.items()
                     for _ in range(integer("MultiStepLR", "a milestone's count", count, 1))]
        elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
            items = list(value)
        else:
            raise TypeError(f"MultiStepLR: milestones must be a list of epochs, found "
                            f"{type(value).__name__}")
        return Counter(integer("MultiStepLR", "milestones", n, 0) for n in items)

    def get_lr(self) -> list[float]:
        if self.last_epoch not in self.milestones:
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma ** self.milestones[self.last_epoch]]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch)
                for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch: initial lr * gamma^epoch."""

    settings = ("gamma",)

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check(self, name: str, value: Any) -> Any:
        return _gamma("ExponentialLR", value)

    def get_lr(self) -> list[float]:
        if self._is_initial:  # (resuming: the optimizer's lr is already this epoch's)
            return [self.optimizer.lr]
        return [self.optimizer.lr * self.gamma]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (initial lr - eta_min) (1 + cos(pi epoch / T_max)) / 2, as PyTorch
    computes it: each step from the last lr (so other changes to lr carry on), past T_max
    back up again."""

    settings = ("T_max", "eta_min")

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def _check(self, name: str, value: Any) -> Any:
        if name == "T_max":
            return integer("CosineAnnealingLR", name, value, 1)
        return check_range("CosineAnnealingLR", name, value, 0.0)

    def get_lr(self) -> list[float]:
        lr, base, low, t, T = (self.optimizer.lr, self.base_lrs[0], self.eta_min,
                               self.last_epoch, self.T_max)
        if self._is_initial:
            return [lr]
        if (t - 1 - T) % (2 * T) == 0:  # from the minimum, where the ratio below is 0 / 0
            return [lr + (base - low) * (1 - math.cos(math.pi / T)) / 2]
        # eta_t - eta_min = (eta_{t-1} - eta_min) (1 + cos(pi t / T)) / (1 + cos(pi (t-1) / T))
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (lr - low) + low]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]
