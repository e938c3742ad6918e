"""The course's hw2 application: a residual MLP on MNIST.

Absolute imports only, so `from mlp_resnet import *` works with this folder on sys.path.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

import needle as ndl
import needle.nn as nn
from needle.apps.epoch_loop import NonFiniteLoss, run_epoch

__all__ = ["ResidualBlock", "MLPResNet", "epoch", "train_mnist",
           "run_epoch", "NonFiniteLoss"]


def ResidualBlock(dim: int, hidden_dim: int, norm: type = nn.BatchNorm1d,
                  drop_prob: float = 0.1, device: ndl.Device | None = None,
                  dtype: str = "float32") -> nn.Module:
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
              norm: type = nn.BatchNorm1d, drop_prob: float = 0.1,
              device: ndl.Device | None = None, dtype: str = "float32") -> nn.Module:
    """Linear, ReLU, `num_blocks` ResidualBlocks of half width, then a Linear classifier."""
    return nn.Sequential(
        nn.Linear(dim, hidden_dim, device=device, dtype=dtype),
        nn.ReLU(),
        *[ResidualBlock(hidden_dim, hidden_dim // 2, norm, drop_prob, device=device,
                        dtype=dtype) for _ in range(num_blocks)],
        nn.Linear(hidden_dim, num_classes, device=device, dtype=dtype),
    )


def epoch(dataloader: Iterable[tuple[ndl.Tensor, ndl.Tensor]], model: nn.Module,
          opt: ndl.optim.Optimizer | None = None) -> tuple[float, float]:
    """One pass over `dataloader`: trains when `opt` is given; returns (error rate, mean loss)."""
    np.random.seed(4)
    model.train() if opt is not None else model.eval()
    return run_epoch(dataloader, model, nn.SoftmaxLoss(), opt)


def train_mnist(batch_size: int = 100, epochs: int = 10, optimizer: type = ndl.optim.Adam,
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

