"""The course's hw2 application: a residual MLP on MNIST.

Absolute imports only, so `from mlp_resnet import *` works with this folder on sys.path.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

import needle as ndl
import needle.nn as nn

__all__ = ["ResidualBlock", "MLPResNet", "epoch", "train_mnist",
           "run_epoch", "NonFiniteLoss"]


def ResidualBlock(dim: int, hidden_dim: int, norm=nn.BatchNorm1d, drop_prob: float = 0.1,
                  device=None, dtype: str = "float32") -> nn.Module:
    """relu(x + norm(Linear(drop(relu(norm(Linear(x))))))) as the course builds it."""
    return nn.Sequential(
        nn.Residual(nn.Sequential(
            nn.Linear(dim, hidden_dim, device=device, dtype=dtype),
            norm(hidden_dim, device=device, dtype=dtype),
            nn.ReLU(),
            nn.Dropout(drop_prob),
            nn.Linear(hidden_dim, dim, device=device, dtype=dtype),
            norm(dim, device=device, dtype=dtype),
        )),
        nn.ReLU(),
    )


def MLPResNet(dim: int, hidden_dim: int = 100, num_blocks: int = 3, num_classes: int = 10,
              norm=nn.BatchNorm1d, drop_prob: float = 0.1, device=None,
              dtype: str = "float32") -> nn.Module:
    """Linear, ReLU, `num_blocks` ResidualBlocks of half width, then a Linear classifier."""
    return nn.Sequential(
        nn.Linear(dim, hidden_dim, device=device, dtype=dtype),
        nn.ReLU(),
        *[ResidualBlock(hidden_dim, hidden_dim // 2, norm, drop_prob, device=device,
                        dtype=dtype) for _ in range(num_blocks)],
        nn.Linear(hidden_dim, num_classes, device=device, dtype=dtype),
    )


class NonFiniteLoss(FloatingPointError):
    """Raised by `run_epoch(check_finite=True)`: batch `batch` (from 1) had a nan or inf loss."""

    def __init__(self, batch: int, loss: float):
        super().__init__(f"the loss is {loss} in batch {batch}")
        self.batch, self.loss = batch, loss


def run_epoch(loader, model: nn.Module, loss_fn, opt=None, *, create_graph: bool | None = None,
              bar=None, check_finite: bool = False, every: int = 10) -> tuple[float, float]:
    """One pass over `loader` (training when `opt` is given): (error rate, mean loss).

    Errors and the batch-size-weighted loss sum stay on the device (the sum in float64, so it
    equals a host sum of the float32 batch losses exactly); the host reads them only every
    `every` batches (for `bar`'s postfix and, with `check_finite`, a NonFiniteLoss naming the
    first bad batch) and at the end. `create_graph=None` calls the course's `loss.backward()`.
    """
    errors = total = None
    count, recent = 0, []  # recent: (batch number, weighted loss) since the last host read
    for i, (X, y) in enumerate(loader, start=1):
        with ndl.no_grad() if opt is None else contextlib.nullcontext():
            logits = model(X)
            loss = loss_fn(logits, y)
        if opt is not None:
            opt.reset_grad()
            if create_graph is None:
                loss.backward()
            else:
                loss.backward(create_graph=create_graph)
            opt.step()
        xp, n = logits.device.xp, X.shape[0]
        wrong = xp.sum(xp.astype(xp.argmax(logits._array, axis=1)
                                 != xp.astype(y._array, xp.int64), xp.int64))
        part = xp.astype(loss._array, xp.float64) * n
        errors = wrong if errors is None else errors + wrong
        total = part if total is None else total + part
        count += n
        if check_finite:
            recent.append((i, part))
        if i % every == 0 and (bar is not None or check_finite):
            _host_read(logits.device, total, count, recent, bar, check_finite)
        if bar is not None:
            bar.update(1)
    if count == 0:
        raise ValueError(f"run_epoch: the loader {loader!r} yielded no batches")
    device = logits.device
    _host_read(device, total, count, recent, None, check_finite)
    return int(device.to_numpy(errors)) / count, float(device.to_numpy(total)) / count


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


def epoch(dataloader, model: nn.Module, opt=None) -> tuple[float, float]:
    """One pass over `dataloader`: trains when `opt` is given; returns (error rate, mean loss)."""
    np.random.seed(4)
    model.train() if opt is not None else model.eval()
    return run_epoch(dataloader, model, nn.SoftmaxLoss(), opt)


def train_mnist(batch_size: int = 100, epochs: int = 10, optimizer=ndl.optim.Adam,
                lr: float = 0.001, weight_decay: float = 0.001, hidden_dim: int = 100,
                data_dir: str = "data") -> tuple[float, float, float, float]:
    """Train MLPResNet on MNIST in `data_dir`: (train_err, train_loss, test_err, test_loss)."""
    np.random.seed(4)
    files = ndl.data.find_mnist_files(data_dir)
    train_images, train_labels, test_images, test_labels = (
        files[name] for name in ndl.data.MNIST_FILES
    )
    train_set = ndl.data.MNISTDataset(train_images, train_labels)
    test_set = ndl.data.MNISTDataset(test_images, test_labels)
    train_loader = ndl.data.DataLoader(train_set, batch_size, shuffle=True)
    test_loader = ndl.data.DataLoader(test_set, batch_size)
    model = MLPResNet(784, hidden_dim)
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        train_err, train_loss = epoch(train_loader, model, opt)
    test_err, test_loss = epoch(test_loader, model)
    return train_err, train_loss, test_err, test_loss

