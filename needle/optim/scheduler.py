"""The base of the learning-rate schedules (lr_scheduler.py, plateau.py): PyTorch's
LRScheduler for needle's one-`lr` optimizers, and the checks the schedules share."""

from __future__ import annotations

import warnings
from typing import Any, Mapping

from ..arguments import check_range, integer
from ..autograd.graph import replayed
from .optimizer import Optimizer

#: PyTorch's warning for step(epoch), word for word
EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available.")


def check_optimizer(owner: str, optimizer: Any) -> Optimizer:
    """`optimizer` itself, or a TypeError naming it where it is no needle Optimizer."""
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{owner}: optimizer must be a needle.optim.Optimizer, found "
                        f"{type(optimizer).__name__}")
    return optimizer


def check_lrs(owner: str, name: str, value: Any) -> list[float]:
    """`value` as a list of one learning rate (needle's optimizers have one `lr`)."""
    if not isinstance(value, (list, tuple)) or len(value) != 1:
        raise ValueError(f"{owner}: {name} must be a list of 1 learning rate (one per "
                         f"optimizer), found {value!r}")
    return [check_range(owner, name, value[0], 0.0)]


class LRScheduler:
    """Sets its optimizer's `lr` at each step(), as PyTorch's LRScheduler.

    The constructor makes an initial step, setting `lr` to the schedule's value at epoch 0
    (`last_epoch` -1, a fresh schedule) or `last_epoch + 1` (resuming, where the optimizer's
    `initial_lr` was set by an earlier scheduler). Subclasses give `get_lr()`, the lr after
    `last_epoch` was advanced, as PyTorch's chainable form reading the optimizer's `lr`, and
    `_get_closed_form_lr()` from `base_lrs`, used by the deprecated `step(epoch)`.
    """

    #: the constructor's settings: checked by `_check` at every assignment, and saved
    settings: tuple[str, ...] = ()
    #: what state_dict() saves besides the settings
    state_names: tuple[str, ...] = ("base_lrs", "last_epoch", "_step_count", "_last_lr")
    _is_initial = False  # True during the constructor's step

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        owner = type(self).__name__
        self.optimizer = check_optimizer(owner, optimizer)
        last_epoch = integer(owner, "last_epoch", last_epoch, -1)
        if last_epoch == -1:
            if getattr(optimizer, "initial_lr", None) is None:  # (a second scheduler's
                optimizer.initial_lr = optimizer.lr  # base_lrs are the first one's)
        elif getattr(optimizer, "initial_lr", None) is None:
            raise ValueError(f"{owner}: last_epoch={last_epoch} resumes a schedule, but the "
                             "optimizer has no initial_lr (set by a scheduler made with "
                             "last_epoch=-1); use load_state_dict to resume")
        self.base_lrs = [optimizer.initial_lr]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).settings:
            value = self._check(name, value)
        object.__setattr__(self, name, value)

    def _check(self, name: str, value: Any) -> Any:
        """One setting in its canonical form (subclasses check theirs)."""
        return value

    def get_lr(self) -> list[float]:
        """The learning rate at `last_epoch` (just advanced), as a list of one."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rate the last step set, as a list of one (PyTorch's, per group)."""
        return list(self._last_lr)

    @replayed  # inside an ndl.compile'd step: run again at each replay
    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch and set the optimizer's lr (`epoch`: PyTorch's deprecated jump
        to that epoch, with the closed form)."""
        if epoch is not None:
            epoch = integer(type(self).__name__, "epoch", epoch, 0)
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=3)
        if self._step_count == 1 and self.optimizer.t == 0:
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`: "
                          "call them in the opposite order, or the schedule's first value "
                          "is skipped (as in PyTorch)", UserWarning, stacklevel=3)
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            lrs = self.get_lr()
        else:
            self.last_epoch = epoch
            lrs = self._get_closed_form_lr()
        self.optimizer.lr = lrs[0]  # checked (and read at a compiled step's replay)
        self._last_lr = [self.optimizer.lr]

    def _get_closed_form_lr(self) -> list[float]:
        """The learning rate at `last_epoch` from `base_lrs` alone (get_lr where none)."""
        return self.get_lr()

    # ----- state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer: the settings, `base_lrs`, `last_epoch`,
        `_step_count` and `_last_lr` (PyTorch's keys), and any other attribute a subclass
        keeps (a restart counter, as PyTorch saves every one)."""
        names = self.settings + self.state_names + self._own_names()
        return {name: _copied(getattr(self, name)) for name in names}

    def _own_names(self) -> tuple[str, ...]:
        """A subclass's own attributes, beyond those declared: saved and loaded as they are."""
        declared = set(self.settings + self.state_names) | {"optimizer", "_is_initial"}
        return tuple(k for k in vars(self) if k not in declared)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what state_dict() returned; one ValueError lists every problem, and
        nothing changes when it is raised (the optimizer's lr neither: load its own)."""
        owner = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"{owner}: state_dict must be a mapping, found "
                            f"{type(state_dict).__name__}")
        names = self.settings + self.state_names
        own = self._own_names()  # (a subclass's: restored as they are, where present)
        problems = [f"missing keys {[k for k in names if k not in state_dict]}"] if any(
            k not in state_dict for k in names) else []
        unexpected = [k for k in state_dict if k not in names and k not in own]
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        values = {}
        for name in names:
            if name in state_dict:
                try:
                    values[name] = self._loaded(name, state_dict[name])
                except (TypeError, ValueError) as e:
                    problems.append(str(e))
        if problems:
            raise ValueError(f"{owner}: " + "; ".join(problems))
        values.update((k, _copied(state_dict[k])) for k in own if k in state_dict)
        for name, value in values.items():
            setattr(self, name, value)

    def _loaded(self, name: str, value: Any) -> Any:
        """A state_dict entry checked (a TypeError or ValueError naming it)."""
        owner = type(self).__name__
        if name in self.settings:
            return self._check(name, value)
        if name in ("base_lrs", "_last_lr"):
            return check_lrs(owner, name, value)
        return integer(owner, name, value, -1 if name == "last_epoch" else 0)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.settings)
        return f"{type(self).__name__}({args}, last_epoch={self.last_epoch})"


def _copied(value: Any) -> Any:
    """A state value that later steps cannot change (lists and Counters copied)."""
    return type(value)(value) if isinstance(value, (list, dict)) else value
