"""Zero-size inputs to the softmax family: PyTorch's results (checked on torch 2.13) or a
clear error, on every device."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn


def zeros(shape, device):
    return ndl.Tensor(np.zeros(shape), device=device, dtype="float32")


# (input shape, axes, output shape): torch.logsumexp gives -inf for every empty slice
LOGSUMEXP = [
    ((3, 0), 1, (3,)),
    ((0, 4), 0, (4,)),
    ((2, 0, 3), 1, (2, 3)),
    ((3, 0), None, ()),
    ((0, 4), 1, (0,)),  # no slices at all: an empty result
]


@pytest.mark.parametrize("shape, axes, out_shape", LOGSUMEXP)
@pytest.mark.parametrize("create_graph", [True, False])
def test_logsumexp_over_an_empty_axis_is_minus_inf(shape, axes, out_shape, create_graph,
                                                   device):
    x = zeros(shape, device)
    out = ndl.logsumexp(x, axes)
    assert out.shape == out_shape and out.dtype == "float32"
    np.testing.assert_array_equal(out.numpy(), np.full(out_shape, -np.inf))
    out.sum().backward(create_graph=create_graph)
    assert x.grad.shape == shape


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (2, 0)])
@pytest.mark.parametrize("fn", [lambda x: ndl.logsoftmax(x, 1), lambda x: ndl.softmax(x),
                                lambda x: ndl.softmax(x, temperature=2.0, causal=True)],
                         ids=["logsoftmax", "softmax", "causal-softmax"])
@pytest.mark.parametrize("create_graph", [True, False])
def test_softmaxes_of_empty_inputs_are_empty(shape, fn, create_graph, device):
    x = zeros(shape, device)
    out = fn(x)
    assert out.shape == shape and out.numpy().size == 0
    out.sum().backward(create_graph=create_graph)
    assert x.grad.shape == shape


@pytest.mark.parametrize("create_graph", [True, False])
def test_softmax_loss_of_an_empty_batch_is_nan(create_graph, device):
    """torch.nn.functional.cross_entropy(torch.empty(0, 3), ...) is nan (a mean of nothing)."""
    logits = zeros((0, 3), device)
    labels = ndl.Tensor(np.zeros(0), device=device, dtype="int32", requires_grad=False)
    loss = nn.SoftmaxLoss()(logits, labels)
    assert loss.shape == () and np.isnan(loss.numpy())
    loss.backward(create_graph=create_graph)
    assert logits.grad.shape == (0, 3)


def test_max_over_an_empty_axis_names_the_shape(device):
    with pytest.raises(ValueError, match=r"max: cannot reduce over an empty axis \(shape "
                                         r"\(3, 0\)"):
        ndl.max(zeros((3, 0), device), 1)
    np.testing.assert_array_equal(ndl.max(zeros((0, 4), device), 1).numpy(), np.zeros(0))
