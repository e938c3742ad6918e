"""The course's simple_ml: hw1's softmax regression and two-layer net, hw4's CIFAR-10 loops.

Absolute imports only, so `from simple_ml import *` works with this folder on sys.path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

import needle as ndl
import needle.nn as nn
from needle.apps.epoch_loop import LMWindows, epoch_counts
from needle.data.mnist import parse_mnist

__all__ = ["parse_mnist", "softmax_loss", "nn_epoch", "loss_err",
           "epoch_general_cifar10", "train_cifar10", "evaluate_cifar10",
           "epoch_general_ptb", "train_ptb", "evaluate_ptb", "run_lm_epoch"]


def softmax_loss(Z: ndl.Tensor, y_one_hot: ndl.Tensor) -> ndl.Tensor:
    """Batch mean of logsumexp(z) - z_y, for logits Z (n, k) and one-hot labels (n, k)."""
    n = Z.shape[0]
    return (ndl.logsumexp(Z, axes=(1,)).sum() - (Z * y_one_hot).sum()) / n


def nn_epoch(X: np.ndarray, y: np.ndarray, W1: ndl.Tensor, W2: ndl.Tensor, lr: float = 0.1,
             batch: int = 100) -> tuple[ndl.Tensor, ndl.Tensor]:
    """One epoch of SGD on relu(X W1) W2, in order, without shuffling; returns (W1, W2)."""
    device = W1.device
    k = W2.shape[1]
    for start in range(0, X.shape[0], batch):
        Xb = ndl.Tensor(X[start:start + batch], device=device, dtype=W1.dtype,
                        requires_grad=False)
        Yb = ndl.init.one_hot(k, np.asarray(y[start:start + batch]), device=device,
                              dtype=W1.dtype)
        loss = softmax_loss(ndl.relu(Xb @ W1) @ W2, Yb)
        loss.backward(create_graph=False)
        W1.data = W1.data - lr * W1.grad.data
        W2.data = W2.data - lr * W2.grad.data
    return W1, W2


def loss_err(h: ndl.Tensor, y: np.ndarray) -> tuple[float, float]:
    """(softmax loss, error rate) of logits h against integer labels y."""
    y = np.asarray(y)
    y_one_hot = ndl.init.one_hot(h.shape[1], y, device=h.device, dtype=h.dtype)
    loss = float(softmax_loss(h, y_one_hot).numpy())
    return loss, float(np.mean(h.numpy().argmax(axis=1) != y))


# ----- hw4: CIFAR-10 ---------------------------------------------------------------------------


class _OnDevice:
    """The batches of `loader` as (float32 X, y) Tensors on `device`."""

    def __init__(self, loader, device: ndl.Device):
        self.loader, self.device = loader, device

    def __iter__(self):
        for X, y in self.loader:
            if X.device != self.device or X.dtype != "float32":
                X = ndl.Tensor(X, device=self.device, dtype="float32", requires_grad=False)
            if y.device != self.device:
                y = ndl.Tensor(y, device=self.device, requires_grad=False)
            yield X, y

    def __repr__(self) -> str:
        return repr(self.loader)


def epoch_general_cifar10(dataloader: Iterable[tuple[ndl.Tensor, ndl.Tensor]], model: nn.Module,
                          loss_fn: nn.Module = nn.SoftmaxLoss(),  # noqa: B008  (the course's)
                          opt: ndl.optim.Optimizer | None = None) -> tuple[float, float]:
    """One pass over `dataloader`, training when `opt` is given: (accuracy, mean loss).

    Batches go to the device of the model's first parameter (images as float32); the mean
    loss weights each batch's loss by its size. Without `opt` the model is in eval mode and
    nothing is recorded for autograd.
    """
    np.random.seed(4)
    model.train() if opt is not None else model.eval()
    params = model.parameters()
    batches = _OnDevice(dataloader, params[0].device if params else ndl.default_device())
    wrong, n, loss = epoch_counts(batches, model, loss_fn, opt)
    return (n - wrong) / n, loss  # correct / n, as the course counts it


def train_cifar10(model: nn.Module, dataloader: Iterable[tuple[ndl.Tensor, ndl.Tensor]],
                  n_epochs: int = 1, optimizer: type = ndl.optim.Adam, lr: float = 0.001,
                  weight_decay: float = 0.001,
                  loss_fn: type = nn.SoftmaxLoss) -> tuple[float, float]:
    """`n_epochs` training passes with `optimizer(model.parameters(), lr, weight_decay)`.

    Returns the last epoch's (accuracy, mean loss); `loss_fn` is a class, made once.
    """
    if n_epochs < 1:
        raise ValueError(f"train_cifar10: n_epochs must be at least 1, got {n_epochs}")
    np.random.seed(4)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss = loss_fn()
    for _ in range(n_epochs):
        result = epoch_general_cifar10(dataloader, model, loss, opt)
    return result


def evaluate_cifar10(model: nn.Module, dataloader: Iterable[tuple[ndl.Tensor, ndl.Tensor]],
                     loss_fn: type = nn.SoftmaxLoss) -> tuple[float, float]:
    """One evaluation pass (eval mode, no optimizer): (accuracy, mean loss)."""
    np.random.seed(4)
    return epoch_general_cifar10(dataloader, model, loss_fn())


# ----- hw4: Penn Treebank language models ---------------------------------------------------


def run_lm_epoch(data: np.ndarray, model: nn.Module, loss_fn: nn.Module,
                 opt: ndl.optim.Optimizer | None = None, seq_len: int = 40,
                 clip: float | None = None, device: ndl.Device | None = None,
                 dtype: str = "float32", bar: Any = None, every: int = 10) -> tuple[float, float]:
    """One pass of a language model over batchified `data` (nbatch, bs): (accuracy, loss).

    The one epoch loop (`epoch_loop.epoch_counts`) over `LMWindows(data, seq_len)`: windows
    from `range(0, nbatch - 1, seq_len)`, the hidden state carried from window to window,
    detached each time; training when `opt` is given (`backward(create_graph=False)`), with
    gradients clipped to a global norm of `clip`; the loss is averaged over the predicted
    tokens. The host reads the device's sums every `every` windows and at the end, and a nan
    or inf loss then raises NonFiniteLoss naming the window (from 1). `device` defaults to
    that of the model's first parameter.
    """
    if device is None:
        params = model.parameters()
        device = params[0].device if params else ndl.default_device()
    windows = LMWindows(data, seq_len, device, dtype)
    if len(windows) == 0:
        raise ValueError(f"run_lm_epoch: data of shape {data.shape} holds no window of "
                         f"seq_len {seq_len}")
    wrong, count, loss = epoch_counts(windows, model, loss_fn, opt, create_graph=False,
                                      clip=clip, bar=bar, check_finite=True, every=every)
    return (count - wrong) / count, loss


def epoch_general_ptb(data: np.ndarray, model: nn.Module, seq_len: int = 40,
                      loss_fn: nn.Module = nn.SoftmaxLoss(),  # noqa: B008  (the course's)
                      opt: ndl.optim.Optimizer | None = None, clip: float | None = None,
                      device: ndl.Device | None = None,
                      dtype: str = "float32") -> tuple[float, float]:
    """One pass over batchified `data` (nbatch, bs) in windows of `seq_len`: (accuracy, loss).

    The course's loop: seeds numpy with 4, sets train or eval mode by `opt`, then
    `run_lm_epoch` (the hidden state carried and detached, the loss averaged per token).
    """
    np.random.seed(4)
    model.train() if opt is not None else model.eval()
    return run_lm_epoch(data, model, loss_fn, opt, seq_len, clip, device, dtype)


def train_ptb(model: nn.Module, data: np.ndarray, seq_len: int = 40, n_epochs: int = 1,
              optimizer: type = ndl.optim.SGD, lr: float = 4.0, weight_decay: float = 0.0,
              loss_fn: type = nn.SoftmaxLoss, clip: float | None = None,
              device: ndl.Device | None = None, dtype: str = "float32") -> tuple[float, float]:
    """`n_epochs` training passes; returns the last one's (accuracy, loss)."""
    if n_epochs < 1:
        raise ValueError(f"train_ptb: n_epochs must be at least 1, got {n_epochs}")
    np.random.seed(4)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss = loss_fn()
    for _ in range(n_epochs):
        result = epoch_general_ptb(data, model, seq_len, loss, opt, clip, device, dtype)
    return result


def evaluate_ptb(model: nn.Module, data: np.ndarray, seq_len: int = 40,
                 loss_fn: type = nn.SoftmaxLoss, device: ndl.Device | None = None,
                 dtype: str = "float32") -> tuple[float, float]:
    """One evaluation pass (eval mode, no optimizer): (accuracy, loss)."""
    np.random.seed(4)
    return epoch_general_ptb(data, model, seq_len, loss_fn(), None, None, device, dtype)
