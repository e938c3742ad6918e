"""ReduceLROnPlateau: PyTorch's schedule that lowers lr when a metric stops improving
(exported by lr_scheduler.py)."""

from __future__ import annotations

import math
import warnings
from typing import Any

from ..arguments import check_range, integer, real
from ..autograd.graph import replayed
from .optimizer import Optimizer
from .scheduler import EPOCH_DEPRECATION_WARNING, LRScheduler, check_lrs, check_optimizer

_CHOICES = {"mode": ("min", "max"), "threshold_mode": ("rel", "abs")}


class ReduceLROnPlateau(LRScheduler):
    """lr = max(lr * factor, min_lr) once the metric given to step() has not improved on its
    best (by `threshold`, relative or absolute) for more than `patience` epochs; then
    `cooldown` epochs pass before bad epochs count again. Changes smaller than eps are skipped.
    """

    settings = ("mode", "factor", "patience", "threshold", "threshold_mode", "cooldown",
                "min_lrs", "eps")
    state_names = ("last_epoch", "_last_lr", "best", "num_bad_epochs", "cooldown_counter")

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: float | list[float] = 0.0, eps: float = 1e-8):
        self.optimizer = check_optimizer("ReduceLROnPlateau", optimizer)
        self.mode = mode
        self.factor = factor
        self.patience = patience
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.cooldown = cooldown
        self.min_lrs = min_lr if isinstance(min_lr, (list, tuple)) else [min_lr]
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = [optimizer.lr]
        self.best = self.mode_worse
        self.num_bad_epochs = 0
        self.cooldown_counter = 0

    def _check(self, name: str, value: Any) -> Any:
        owner = "ReduceLROnPlateau"
        if name in _CHOICES:
            if value not in _CHOICES[name] or not isinstance(value, str):
                raise ValueError(f"{owner}: {name} must be one of {_CHOICES[name]}, found "
                                 f"{value!r}")
            return value
        if name == "factor":
            return check_range(owner, name, value, 0.0, 1.0)
        if name in ("patience", "cooldown"):
            return integer(owner, name, value, 0)
        if name == "min_lrs":
            return check_lrs(owner, "min_lr", value)
        return check_range(owner, name, value, 0.0)  # threshold, eps

    def _loaded(self, name: str, value: Any) -> Any:
        if name == "best":
            return real("ReduceLROnPlateau", name, value)
        return super()._loaded(name, value)

    @property
    def mode_worse(self) -> float:
        """The worst value of the metric: the best one before the first step."""
        return math.inf if self.mode == "min" else -math.inf

    @property
    def in_cooldown(self) -> bool:
        """Whether bad epochs are not counted now (just after a reduction)."""
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        """Whether metric `a` improves on `best` by more than the threshold."""
        if self.threshold_mode == "rel":
            edge = best * (1 - self.threshold if self.mode == "min" else 1 + self.threshold)
        else:
            edge = best - self.threshold if self.mode == "min" else best + self.threshold
        return a < edge if self.mode == "min" else a > edge

    @replayed  # inside an ndl.compile'd step: run again at each replay
    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Count the epoch as good or bad by `metrics` (a number or 0-d Tensor) and lower
        lr after too many bad ones."""
        current = real("ReduceLROnPlateau", "metrics", metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=3)
            epoch = integer("ReduceLROnPlateau", "epoch", epoch, 0)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in the cooldown are not counted
        if self.num_bad_epochs > self.patience:
            old = self.optimizer.lr
            new = max(old * self.factor, self.min_lrs[0])
            if old - new > self.eps:
                self.optimizer.lr = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [self.optimizer.lr]
