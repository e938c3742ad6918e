"""The one epoch loop: a training or evaluation pass of a classifier or a language model.

`run_epoch` serves the course's loops (`mlp_resnet.epoch`, `simple_ml.epoch_general_cifar10`,
`simple_ml.run_lm_epoch`) and needle-train. A classifier's batches come from a DataLoader; a
language model's from `LMWindows`, the batch adapter that cuts batchified token ids into
windows and carries the hidden state from one window to the next, detached.

Absolute imports only, so the course files that use it work with this folder on sys.path.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

import needle as ndl
import needle.nn as nn
from needle.data.ptb import get_batch

__all__ = ["NonFiniteLoss", "LMWindows", "run_epoch", "epoch_counts", "training_step"]


class NonFiniteLoss(FloatingPointError):
    """Raised by `run_epoch(check_finite=True)`: batch `batch` (from 1) had a nan or inf loss."""

    def __init__(self, batch: int, loss: float):
        super().__init__(f"the loss is {loss} in batch {batch}")
        self.batch, self.loss = batch, loss


class LMWindows:
    """Batchified token ids `data` (nbatch, bs) as `run_epoch`'s batches: windows of `seq_len`
    rows from `range(0, nbatch - 1, seq_len)` (the last may be shorter), each the inputs X
    (L, bs) and the next tokens y (L*bs,).

    `run_epoch` calls `forward(model, X)`, which runs `model(X, hidden)` and keeps the final
    hidden state, detached from this window's graph, for the next window; every pass starts
    from no state.
    """

    def __init__(self, data: np.ndarray, seq_len: int = 40, device: ndl.Device | None = None,
                 dtype: str = "float32"):
        self.data, self.seq_len, self.device, self.dtype = data, seq_len, device, dtype
        self.hidden: Any = None

    def __len__(self) -> int:
        return len(range(0, self.data.shape[0] - 1, self.seq_len))

    def __iter__(self) -> Iterator[tuple[ndl.Tensor, ndl.Tensor]]:
        self.hidden = None
        for i in range(0, self.data.shape[0] - 1, self.seq_len):
            yield get_batch(self.data, i, self.seq_len, device=self.device, dtype=self.dtype)

    def forward(self, model: nn.Module, X: ndl.Tensor) -> ndl.Tensor:
        """The logits of window X, from the state the previous window left."""
        logits, hidden = model(X, self.hidden)
        self.hidden = _detach(hidden)
        return logits

    def __repr__(self) -> str:
        return f"LMWindows(data of shape {self.data.shape}, seq_len={self.seq_len})"


def _detach(h):
    """The hidden state cut from the window's graph (both h and c for an LSTM)."""
    if h is None:
        return None
    if isinstance(h, tuple):
        return tuple(t.detach() for t in h)
    return h.detach()


def run_epoch(batches: Iterable[tuple[ndl.Tensor, ndl.Tensor]], model: nn.Module,
              loss_fn: nn.Module, opt: ndl.optim.Optimizer | None = None, *,
              create_graph: bool | None = None, clip: float | None = None, bar: Any = None,
              check_finite: bool = False, every: int = 10,
              step: Any = None) -> tuple[float, float]:
    """One pass over `batches` (training when `opt` is given): (error rate, mean loss).

    `batches` yields (X, y) Tensors: a DataLoader's, or a batch adapter's with a
    `forward(model, X)` method that runs the model (`LMWindows`). See `epoch_counts`.
    """
    wrong, count, loss = epoch_counts(batches, model, loss_fn, opt, create_graph=create_graph,
                                      clip=clip, bar=bar, check_finite=check_finite,
                                      every=every, step=step)
    return wrong / count, loss


def epoch_counts(batches: Iterable[tuple[ndl.Tensor, ndl.Tensor]], model: nn.Module,
                 loss_fn: nn.Module, opt: ndl.optim.Optimizer | None = None, *,
                 create_graph: bool | None = None, clip: float | None = None, bar: Any = None,
                 check_finite: bool = False, every: int = 10,
                 step: Any = None) -> tuple[int, int, float]:
    """One pass over `batches`: (wrong predictions, predictions, mean loss per prediction).

    Training when `opt` is given: `opt.reset_grad()`, backward (`create_graph=None` calls the
    course's `loss.backward()`), the gradients' global norm clipped to `clip` if given, then
    `opt.step()`; otherwise nothing is recorded for autograd. A batch counts `y.shape[0]`
    predictions (images, or tokens of a window) and its loss weighs by that. The counts and
    the weighted loss sum stay on the device (the sum in float64, so it equals a host sum of
    the float32 batch losses exactly); the host reads them only every `every` batches (for
    `bar`'s postfix and, with `check_finite`, a NonFiniteLoss naming the first bad batch) and
    at the end. A training `step` from `training_step` (compiled with `ndl.compile`) runs
    each batch's forward, backward and update instead, to the same numbers.
    """
    forward = getattr(batches, "forward", None)
    params = model.parameters() if clip and opt is not None else None
    errors = total = logits = None
    count, recent = 0, []  # recent: (batch number, weighted loss) since the last host read
    for i, (X, y) in enumerate(batches, start=1):
        if step is not None and opt is not None:
            logits, loss = _replayed_step(step, batches, forward, X, y)
        else:
            with ndl.no_grad() if opt is None else contextlib.nullcontext():
                logits = model(X) if forward is None else forward(model, X)
                loss = loss_fn(logits, y)
            if opt is not None:
                _update(opt, loss, create_graph, clip, params)
        errors, total, count = _count(logits, loss, y, errors, total, count, recent,
                                      check_finite, i)
        if i % every == 0 and (bar is not None or check_finite):
            _host_read(logits.device, total, count, recent, bar, check_finite)
        if bar is not None:
            bar.update(1)
    if count == 0:
        raise ValueError(f"run_epoch: the loader {batches!r} yielded no batches")
    device = logits.device
    _host_read(device, total, count, recent, None, check_finite)
    return int(device.to_numpy(errors)), count, float(device.to_numpy(total)) / count


def _count(logits, loss, y, errors, total, count: int, recent: list, check_finite: bool,
           i: int) -> tuple[Any, Any, int]:
    """The running (wrong predictions, weighted loss sum, predictions), kept on the device."""
    xp, n = logits.device.xp, y.shape[0]
    wrong = xp.sum(xp.astype(xp.argmax(logits._array, axis=1)
                             != xp.astype(y._array, xp.int64), xp.int64))
    part = xp.astype(loss._array, xp.float64) * n
    errors = wrong if errors is None else errors + wrong
    total = part if total is None else total + part
    if check_finite:
        recent.append((i, part))
    return errors, total, count + n


def _backward(loss, create_graph: bool | None) -> None:
    """`loss.backward()`, the course's call, for `create_graph=None`; else with that flag."""
    if create_graph is None:
        loss.backward()
    else:
        loss.backward(create_graph=create_graph)


def _update(opt, loss, create_graph: bool | None, clip: float | None, params) -> None:
    """A training step's update: reset_grad, backward (`create_graph=None`: the course's
    `loss.backward()`), the gradients' global norm clipped to `clip` if given, opt.step()."""
    opt.reset_grad()
    _backward(loss, create_graph)
    if clip:
        nn.utils.clip_grad_norm_(params, clip)
    opt.step()


def _replayed_step(step, batches, forward, X, y) -> tuple[Any, Any]:
    """(logits, loss) of a `training_step`; a language model's window starts from the state
    the previous one left, and leaves its own in `batches.hidden`."""
    if forward is None:
        return step(X, y)
    hidden = batches.hidden
    pair = isinstance(hidden, tuple)
    logits, loss, *state = step(X, y, pair, *(
        () if hidden is None else hidden if pair else (hidden,)))
    batches.hidden = tuple(state) if pair else state[0] if state else None
    return logits, loss


def training_step(model: nn.Module, loss_fn: nn.Module, opt: ndl.optim.Optimizer, *,
                  create_graph: bool | None = None, clip: float | None = None,
                  cuda_graph: bool = False) -> Any:
    """One training step as `epoch_counts` runs it eagerly (reset_grad, forward, loss,
    backward, clipping, update), compiled with `ndl.compile`: `step(X, y)` -> (logits, loss)
    for a classifier; `step(X, y, pair, *state)` -> (logits, loss, *new state) for a language
    model's window (`pair`: the state is an LSTM's (h, c); none before the first window).

    With `cuda_graph`, the forward and backward alone are compiled with `cuda_graph=True`
    (one CUDA graph per batch shape on torch:cuda and cuda), and reset_grad, the clipping
    and the update run eagerly around them: a graph would freeze their Python. The same
    numbers as the eager step, on a GPU up to the kernels cuBLAS picks.
    """
    params = model.parameters() if clip else None

    def run(X, y, pair, state, after_loss):
        """(logits, loss, *new state), with `after_loss(loss)` called before the state is
        detached (backward, or the whole update)."""
        if pair is None:
            logits = model(X)
            loss = loss_fn(logits, y)
            after_loss(loss)
            return logits, loss
        logits, hidden = model(X, (tuple(state) if pair else state[0]) if state else None)
        loss = loss_fn(logits, y)
        after_loss(loss)
        hidden = _detach(hidden)
        return (logits, loss, *(() if hidden is None else hidden if pair else (hidden,)))

    def update(loss):
        _update(opt, loss, create_graph, clip, params)

    def backward(loss):
        _backward(loss, create_graph)

    def step(X, y, pair=None, *state):
        return run(X, y, pair, state, update)

    if not cuda_graph:
        return ndl.compile(step)

    def forward_backward(X, y, pair=None, *state):
        return run(X, y, pair, state, backward)

    graphed = ndl.compile(forward_backward, cuda_graph=True)

    def graphed_step(X, y, pair=None, *state):
        opt.reset_grad()
        out = graphed(X, y, pair, *state)
        if clip:
            nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return out
    return graphed_step


def _host_read(device, total, count: int, recent: list, bar, check_finite: bool) -> None:
    """The periodic host read (through the device, which also raises its deferred checks):
    bar postfix, then (optionally) the nan/inf check."""
    mean = float(device.to_numpy(total)) / count
    if bar is not None:
        bar.set_postfix(loss=f"{mean:.4f}")
    if check_finite and not math.isfinite(mean):
        batch, part = next(((j, p) for j, p in recent if not math.isfinite(float(p))),
                           recent[-1])
        raise NonFiniteLoss(batch, float(part))
    recent.clear()
