"""Embedding: the lookup op, its segment-sum gradient, the device kernels and the layer,
against numpy and PyTorch. The op table (test_ops.py) checks embedding and segment_sum against
numpy and finite differences."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import needle as ndl
import needle.ops.embedding  # noqa: F401  (the module: `needle.ops.embedding` names the function)
from needle.backends.index_add import scatter_add_rows
from needle.nn.embedding import Embedding
from needle.nn.module import Parameter
from needle.ops.embedding import INDEX_ADD, embedding, index_add_portable
from needle.testing import check_gradients


def tensor(x, device, dtype="float64", requires_grad=True):
    return ndl.Tensor(x, device=device, dtype=dtype, requires_grad=requires_grad)


def add_at(indices, values, n):
    """The independent reference: numpy's unbuffered scatter-add."""
    out = np.zeros((n,) + values.shape[indices.ndim:], dtype=values.dtype)
    np.add.at(out, indices, values)
    return out


def ids(shape, n, seed=0):
    """Random ids in [0, n), with repeats."""
    return np.random.default_rng(seed).integers(0, n, size=shape)


# ----- forward -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "int32", "float32", "float64"])
def test_forward_picks_the_rows(dtype, device):
    np.random.seed(0)
    layer = Embedding(7, 3, device=device)
    x = ids((5, 4), 7)
    out = layer(ndl.Tensor(x, device=device, dtype=dtype, requires_grad=False))
    assert out.shape == (5, 4, 3) and out.dtype == "float32"
    np.testing.assert_array_equal(out.numpy(), layer.weight.numpy()[x])


def test_embedding_function_takes_tensors_arrays_and_lists(device):
    w = np.arange(12.0).reshape(4, 3)
    for idx in ([2, 0, 2], np.array([2, 0, 2]), tensor([2.0, 0.0, 2.0], device, "float32")):
        np.testing.assert_array_equal(embedding(tensor(w, device), idx).numpy(), w[[2, 0, 2]])
    with pytest.raises(ValueError, match=r"embedding: expected a \(num, dim\) weight"):
        embedding(tensor(np.zeros(4), device), [0])


def test_forward_reads_the_weight_on_each_call(device):
    layer = Embedding(4, 2, device=device)
    x = tensor([[1, 3]], device, "int64", requires_grad=False)
    layer.weight = Parameter(tensor(np.arange(8.0).reshape(4, 2), device, "float32"))
    np.testing.assert_array_equal(layer(x).numpy(), [[[2, 3], [6, 7]]])
    layer.weight.data = tensor(np.zeros((4, 2)), device, "float32")
    np.testing.assert_array_equal(layer(x).numpy(), np.zeros((1, 2, 2)))


@pytest.mark.parametrize("bad, message", [
    (10001, r"in \[0, 10000\), found 10001"),
    (10000.0, r"in \[0, 10000\), found 10000.0"),
    (-1, r"in \[0, 10000\), found -1"),
    (2.5, "whole numbers, found 2.5"),
])
def test_bad_indices_name_the_value_and_the_table_size(bad, message, device):
    layer = Embedding(10000, 2, device=device)
    x = tensor([[0, bad], [1, 2]], device, "float64" if isinstance(bad, float) else "int64")
    with pytest.raises(ValueError, match=f"^Embedding: indices must be {message}$"):
        layer(x).numpy()  # on an accelerator: raised at the read
    with pytest.raises(ValueError, match=f"^embedding: indices must be {message}$"):
        embedding(layer.weight, x).numpy()


def test_init_draws_the_weight_like_the_course(device):
    np.random.seed(4)
    layer = Embedding(6, 5, device=device, dtype="float32")
    np.random.seed(4)
    expected = np.random.randn(6, 5).astype(np.float32)
    np.testing.assert_array_equal(layer.weight.numpy(), expected)
    assert [n for n, _ in layer.named_parameters()] == ["weight"]
    assert repr(layer) == "Embedding(6, 5)"
    with pytest.raises(ValueError, match="Embedding: embedding_dim must be >= 1, found 0"):
        Embedding(3, 0)


# ----- backward ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_weight_gradient_adds_repeated_rows(dtype, device):
    n, dim = 9, 4
    x = ids((6, 5), n, seed=1)
    x[0, :3] = 2  # certainly repeated
    layer = Embedding(n, dim, device=device, dtype="float64")
    g = np.random.default_rng(2).standard_normal((6, 5, dim))
    out = layer(tensor(x, device, dtype, requires_grad=False))
    out.backward(tensor(g, device, requires_grad=False))
    np.testing.assert_allclose(layer.weight.grad.numpy(), add_at(x, g, n), rtol=1e-12,
                               atol=1e-12)


def test_gradients_match_finite_differences(device):
    idx = [[0, 2, 0], [1, 0, 2]]
    w = np.random.default_rng(3).standard_normal((3, 2))
    check_gradients(lambda t: embedding(t, idx), w, device=device)
    # second order: the gradient of the gradient is the lookup again
    def weight_grad(t):
        (embedding(t, idx) ** 3).sum().backward()
        return t.grad

    check_gradients(weight_grad, w, device=device)


def test_indices_get_no_gradient(device):
    w = tensor(np.ones((3, 2)), device)
    x = tensor([0.0, 2.0], device)  # a float tensor that requires grad: still a constant index
    embedding(w, x).sum().backward()
    assert x.grad is None
    np.testing.assert_array_equal(w.grad.numpy(), [[1, 1], [0, 0], [1, 1]])


def test_matches_pytorch_embedding(device):
    torch = pytest.importorskip("torch")
    np.random.seed(5)
    layer = Embedding(20, 6, device=device)
    x = ids((7, 3), 20, seed=5)
    g = np.random.default_rng(6).standard_normal((7, 3, 6)).astype(np.float32)
    out = layer(tensor(x, device, "float32", requires_grad=False))
    out.backward(tensor(g, device, "float32", requires_grad=False))
    ref = torch.nn.Embedding(20, 6)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(layer.weight.numpy()))
    tout = ref(torch.tensor(x))
    tout.backward(torch.tensor(g))
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    np.testing.assert_allclose(layer.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-6,
                               atol=1e-6)


# ----- the segment-sum kernels ---------------------------------------------------------------
@pytest.mark.parametrize("m, n, rest", [(40, 7, (3,)), (40, 100, (2, 3)), (1, 5, (4,)),
                                        (0, 5, (4,)), (12, 3, ())])
def test_kernel_agrees_with_the_portable_one_hot(m, n, rest, device):
    rng = np.random.default_rng(m + n)
    idx_host = rng.integers(0, n, size=m)
    whole = rng.integers(-8, 8, size=(m,) + rest).astype(np.float32)  # sums exact in float32
    real = rng.standard_normal((m,) + rest)
    idx = device.asarray(idx_host, dtype="int64")
    for values, exact in ((whole, True), (real, False)):
        v = device.asarray(values)
        fast = device.to_numpy(INDEX_ADD(idx, v, n))
        portable = device.to_numpy(index_add_portable(idx, v, n))
        assert fast.dtype == portable.dtype == values.dtype
        assert fast.shape == portable.shape == (n,) + rest
        if exact:
            np.testing.assert_array_equal(fast, portable)
            np.testing.assert_array_equal(fast, add_at(idx_host, values, n))
        else:
            np.testing.assert_allclose(fast, portable, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(fast, add_at(idx_host, values, n), rtol=1e-12,
                                       atol=1e-12)


def test_cuda_scatter_add_logic_on_numpy():
    # cuda's index_add is scatter_add_rows with cupy's zeros and cupyx.scatter_add, which
    # has np.add.at's signature and meaning
    idx = np.array([3, 0, 3, 3])
    values = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    out = scatter_add_rows(np.zeros, np.add.at, idx, values, 5)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[2, 3], [0, 0], [0, 0], [0 + 4 + 6, 1 + 5 + 7], [0, 0]])


def test_a_device_with_a_kernel_never_builds_the_one_hot(device, monkeypatch):
    if device.kind not in INDEX_ADD.fast:
        pytest.skip(f"{device} has no index_add kernel: the portable one-hot is its path")

    def refuse(*args):
        raise AssertionError("the portable (T*B x num) one-hot was built")

    embedding_ops = sys.modules["needle.ops.embedding"]
    monkeypatch.setattr(embedding_ops, "index_add_portable", refuse)
    layer = Embedding(10000, 8, device=device)
    x = ids((40, 20), 10000, seed=7)
    layer(tensor(x, device, "float32", requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(layer.weight.grad.numpy(),
                                  add_at(x, np.ones((40, 20, 8), np.float32), 10000))
