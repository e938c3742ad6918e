"""The course's hw1 application: softmax regression / a two-layer net trained with autograd.

Absolute imports only, so `from simple_ml import *` works with this folder on sys.path.
"""

from __future__ import annotations

import numpy as np

import needle as ndl
from needle.data.mnist import parse_mnist

__all__ = ["parse_mnist", "softmax_loss", "nn_epoch", "loss_err"]


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
