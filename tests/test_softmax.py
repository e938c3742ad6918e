"""logsoftmax, logsumexp and SoftmaxLoss keep their answer for huge float32 logits."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn
from needle.testing import check_gradients

BIG = [1e4, 1e8, 1e30]


def logits32(big):
    """float32 logits with ties, gaps and opposite signs at the scale `big`."""
    return np.array([[big, big, 0.0], [0.0, -big, big], [big, 0.5 * big, -big]], np.float32)


def np_logsoftmax(z):
    """float64 reference: max-shifted."""
    shifted = z - z.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("big", BIG)
def test_softmax_loss_of_huge_float32_logits(big, device):
    z, y = logits32(big), np.array([0, 2, 1])
    logits = ndl.Tensor(z, device=device, dtype="float32")
    labels = ndl.Tensor(y, device=device, dtype="int64", requires_grad=False)
    loss = nn.SoftmaxLoss()(logits, labels)
    loss.backward()
    z64 = z.astype(np.float64)
    expected = -np_logsoftmax(z64)[np.arange(3), y].mean()
    expected_grad = (np.exp(np_logsoftmax(z64)) - np.eye(3)[y]) / 3
    assert loss.dtype == "float32" and logits.grad.dtype == "float32"
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), expected_grad, rtol=1e-6, atol=1e-7)


def test_softmax_loss_of_the_issue_example(device):
    logits = ndl.Tensor([[1e8, 1e8, 0.0]], device=device, dtype="float32")
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor([0], device=device, dtype="int64"))
    loss.backward()
    np.testing.assert_allclose(loss.numpy(), np.log(2), rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), [[-0.5, 0.5, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("big", BIG)
def test_logsoftmax_of_huge_float32_logits(big, device):
    z = logits32(big)
    c = np.random.default_rng(0).standard_normal(z.shape)
    x = ndl.Tensor(z, device=device, dtype="float32")
    out = ndl.logsoftmax(x)
    out.backward(ndl.Tensor(c, device=device, dtype="float32"))
    expected = np_logsoftmax(z.astype(np.float64))
    softmax = np.exp(expected)
    # the adjoint of y = z - logsumexp(z): c - softmax(z) sum(c)
    expected_grad = c - softmax * c.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), expected_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("big", BIG)
def test_logsumexp_gradient_of_huge_float32_logits_is_the_softmax(big, device):
    z = logits32(big)
    x = ndl.Tensor(z, device=device, dtype="float32")
    ndl.logsumexp(x, axes=1).sum().backward()
    softmax = np.exp(np_logsoftmax(z.astype(np.float64)))
    np.testing.assert_allclose(x.grad.numpy(), softmax, rtol=1e-6, atol=1e-7)


def test_softmax_loss_second_order(device):
    # d/dz sum(d loss/dz * c): the Hessian of the loss times c, by finite differences
    y = ndl.Tensor([2, 0], device=device, dtype="int64")
    c = np.array([[0.3, -1.2, 0.7], [1.0, 0.5, -0.4]])

    def grad_dot_c(z):
        nn.SoftmaxLoss()(z, y).backward()
        return (z.grad * ndl.Tensor(c, device=z.device)).sum()

    check_gradients(grad_dot_c, np.array([[0.1, 0.5, -0.4], [2.0, -1.0, 0.3]]), device=device)


def test_logsoftmax_second_order(device):
    c = np.array([[0.3, -1.2, 0.7], [1.0, 0.5, -0.4]])

    def grad_dot_c(z):
        (ndl.logsoftmax(z) * ndl.Tensor(c[::-1].copy(), device=z.device)).sum().backward()
        return (z.grad * ndl.Tensor(c, device=z.device)).sum()

    check_gradients(grad_dot_c, np.array([[0.1, 0.5, -0.4], [2.0, -1.0, 0.3]]), device=device)


def test_softmax_loss_records_few_nodes(device):
    logits = ndl.Tensor(np.zeros((4, 3)), device=device)
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor([0, 1, 2, 1], device=device, dtype="int64"))
    ops = [type(n.op).__name__ for n in autograd.find_topo_sort([loss]) if n.op is not None]
    assert ops == ["SoftmaxCrossEntropy"]  # one fused node
