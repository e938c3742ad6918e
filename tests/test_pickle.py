"""copy.deepcopy, pickle and multiprocessing of Tensors, Parameters and Modules (issue 7).

A copy is exact (values, dtype, device, requires_grad, a leaf's .grad) and is a leaf: the
graph is not copied. Devices come back as the cached device itself.
"""

from __future__ import annotations

import concurrent.futures
import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import needle as ndl
from needle import nn

COPIES = {
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
    "deepcopy": copy.deepcopy,
}


@pytest.fixture(params=list(COPIES))
def clone(request: pytest.FixtureRequest):
    """A way of copying an object: a pickle round trip or copy.deepcopy."""
    return COPIES[request.param]


def assert_same_tensor(copied: ndl.Tensor, original: ndl.Tensor) -> None:
    assert type(copied) is type(original) and copied is not original
    assert copied.device is original.device and copied.dtype == original.dtype
    assert copied.requires_grad == original.requires_grad
    assert copied._array is not original._array
    assert original.device.owns(copied._array)
    np.testing.assert_array_equal(copied.numpy(), original.numpy(), strict=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool"])
def test_tensor_copy_is_exact(device, clone, dtype):
    values = np.array([[0.1, -2.5, 1e-30], [3.0, 0.0, 7.25]]).astype(dtype)
    for requires_grad in (True, False):
        t = ndl.Tensor(values, device=device, requires_grad=requires_grad)
        assert_same_tensor(clone(t), t)


def test_zero_dim_tensor_copy(device, clone):
    t = ndl.Tensor([1.5, 2.0], device=device, dtype="float32").sum()
    assert_same_tensor(clone(t), t)


def test_leaf_keeps_its_grad_and_a_result_becomes_a_leaf(device, clone):
    x = ndl.Tensor([1.0, -2.0], device=device, dtype="float32")
    y = x * x
    y.sum().backward()
    cx, cy = clone(x), clone(y)
    assert cx.op is None and cx.grad is not None and cx.grad is not x.grad
    assert_same_tensor(cx.grad, x.grad)
    # a result comes back as a leaf holding its value, still requiring grad
    assert cy.op is None and cy.inputs == () and cy.grad is None and cy.requires_grad
    np.testing.assert_array_equal(cy.numpy(), y.numpy(), strict=True)
    cy.sum().backward()
    np.testing.assert_array_equal(cy.grad.numpy(), [1.0, 1.0])


def test_parameter_stays_a_parameter(device, clone):
    p = nn.Parameter(ndl.Tensor([[1.0, 2.0]], device=device, dtype="float32"))
    copied = clone(p)
    assert isinstance(copied, nn.Parameter)
    assert_same_tensor(copied, p)


def test_tensor_tuple_copy(device, clone):
    a = ndl.Tensor([1.0], device=device)
    b = ndl.Tensor([2.0, 3.0], device=device)
    copied = clone(ndl.make_tuple(a, b))
    assert isinstance(copied, ndl.TensorTuple) and copied.op is None
    np.testing.assert_array_equal(copied[0].numpy(), [1.0])
    np.testing.assert_array_equal(copied[1].numpy(), [2.0, 3.0])


def _assert_same_module(copied: nn.Module, original: nn.Module) -> None:
    assert type(copied) is type(original) and copied.training == original.training
    mine, theirs = copied.state_dict(), original.state_dict()
    assert list(mine) == list(theirs)
    for name, tensor in theirs.items():
        assert_same_tensor(mine[name], tensor)
    for p in copied.parameters():
        assert isinstance(p, nn.Parameter)


def test_linear_copy(device, clone):
    model = nn.Linear(2, 3, device=device)
    copied = clone(model)
    _assert_same_module(copied, model)
    x = ndl.Tensor([[1.0, -1.0]], device=device, dtype="float32")
    np.testing.assert_array_equal(copied(x).numpy(), model(x).numpy())


def test_sequential_with_batchnorm_copy(device, clone):
    np.random.seed(1)
    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.BatchNorm1d(4, device=device),
                          nn.ReLU())
    x = ndl.Tensor(np.random.randn(5, 3), device=device, dtype="float32")
    model(x)  # moves the running statistics off their initial values
    model.eval()
    copied = clone(model)
    _assert_same_module(copied, model)
    np.testing.assert_array_equal(copied(x).numpy(), model(x).numpy())


def test_shared_parameters_stay_shared(clone):
    layer = nn.Linear(2, 2)
    copied = clone(nn.Sequential(layer, layer))
    assert copied.modules[0] is copied.modules[1]
    assert copied.modules[0].weight is not layer.weight


def test_copied_parameters_train_on_their_own(clone):
    model = nn.Linear(2, 1)
    copied = clone(model)
    before = model.weight.numpy()
    loss = copied(ndl.Tensor([[1.0, 2.0]], dtype="float32")).sum()
    loss.backward()
    copied.weight.data = copied.weight.data - copied.weight.grad.data
    np.testing.assert_array_equal(model.weight.numpy(), before)
    assert model.weight.grad is None and not np.array_equal(copied.weight.numpy(), before)


def test_module_round_trip_through_a_spawned_process():
    """The model and input are pickled to a fresh interpreter, the output pickled back."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).eval()
    x = ndl.Tensor(np.random.randn(4, 3), dtype="float32")
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        out = pool.submit(nn.Module.__call__, model, x).result(timeout=120)
    assert isinstance(out, ndl.Tensor) and out.device is ndl.cpu()
    np.testing.assert_array_equal(out.numpy(), model(x).numpy(), strict=True)
