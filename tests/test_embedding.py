"""Embedding (the lookup op, its segment-sum gradient and the device kernels) and
clip_grad_norm_, against numpy and PyTorch."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import needle as ndl
import needle.ops.embedding  # noqa: F401  (the module: `needle.ops.embedding` names the function)
from needle.backends.index_add import scatter_add_rows
from needle.nn.embedding import Embedding
from needle.nn.module import Parameter
from needle.nn.utils import clip_grad_norm_
from needle.ops.embedding import INDEX_ADD, SegmentSum, embedding, index_add_array, index_tensor
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


def test_segment_sum_gradient_is_the_lookup(device):
    idx = index_tensor([[1, 1], [0, 3]], 4, "test", device)
    values = np.random.default_rng(4).standard_normal((2, 2, 3))
    check_gradients(lambda v: SegmentSum(4)(v, idx), values, device=device)


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
        fast = device.to_numpy(index_add_array(idx, v, n))
        portable = device.to_numpy(index_add_array(idx, v, n, portable=True))
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


# ----- clip_grad_norm_ -----------------------------------------------------------------------
def params_with_grads(device, scale, seed=0):
    rng = np.random.default_rng(seed)
    hosts = [rng.standard_normal(s) * scale for s in ((3, 4), (5,), (2, 2, 2))]
    params = [Parameter(tensor(h, device, "float32")) for h in hosts]
    for p, h in zip(params, hosts):
        p.grad = tensor(h * 2, device, "float32", requires_grad=False)
    return params, [(h * 2).astype(np.float32) for h in hosts]


def test_clip_grad_norm_scales_to_max_norm(device):
    params, grads = params_with_grads(device, 3.0)
    params.insert(1, Parameter(tensor(np.ones(2), device, "float32")))  # grad None: skipped
    total = clip_grad_norm_(params, 1.5)
    ref = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    assert isinstance(total, ndl.Tensor) and total.shape == ()  # as PyTorch: no host read
    np.testing.assert_allclose(float(total), ref, rtol=1e-6)
    clipped = [p.grad.numpy() for p in params if p.grad is not None]
    for got, g in zip(clipped, grads):
        np.testing.assert_allclose(got, g * (1.5 / (ref + 1e-6)), rtol=1e-6)
        assert got.dtype == np.float32
    np.testing.assert_allclose(np.sqrt(sum(np.sum(c.astype(np.float64) ** 2) for c in clipped)),
                               1.5, rtol=1e-5)
    assert params[1].grad is None


def test_clip_grad_norm_below_max_changes_nothing(device):
    params, grads = params_with_grads(device, 0.01)
    before = [p.grad.numpy() for p in params]
    total = clip_grad_norm_(params, 10.0)
    np.testing.assert_allclose(float(total), np.sqrt(sum(np.sum(g ** 2.0) for g in grads)),
                               rtol=1e-6)
    for p, b in zip(params, before):  # multiplied by exactly 1 on the device
        np.testing.assert_array_equal(p.grad.numpy(), b)


def test_clip_grad_norm_single_tensor_and_shared_grads(device):
    w = tensor([3.0, 4.0], device)
    w.grad = tensor([3.0, 4.0], device, requires_grad=False)
    assert float(clip_grad_norm_(w, 1.0)) == pytest.approx(5.0)
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-6)
    # a + b hands both leaves the same gradient tensor: each is scaled once
    a, b = tensor([3.0], device), tensor([4.0], device)
    (a + b).backward(tensor([2.0], device, requires_grad=False))
    assert a.grad is b.grad
    assert float(clip_grad_norm_([a, b], 1.0)) == pytest.approx(np.sqrt(8.0))
    np.testing.assert_allclose([a.grad.item(), b.grad.item()], [2 / np.sqrt(8)] * 2, rtol=1e-6)
    assert float(clip_grad_norm_([tensor([1.0], device)], 1.0)) == 0.0  # no grads at all


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3, float("inf")])
def test_clip_grad_norm_matches_pytorch(norm_type, device):
    torch = pytest.importorskip("torch")
    params, grads = params_with_grads(device, 2.0, seed=1)
    refs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for r, g in zip(refs, grads):
        r.grad = torch.tensor(g)
    total = clip_grad_norm_(params, 0.7, norm_type)
    ref_total = torch.nn.utils.clip_grad_norm_(refs, 0.7, norm_type)
    np.testing.assert_allclose(float(total), ref_total.item(), rtol=1e-5)
    for p, r in zip(params, refs):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_optimizer_steps_with_the_clipped_gradient(device):
    p = Parameter(tensor([1.0, 1.0], device, "float32"))
    p.grad = tensor([30.0, 40.0], device, "float32", requires_grad=False)
    clip_grad_norm_([p], 5.0)
    ndl.optim.SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [1 - 0.1 * 3, 1 - 0.1 * 4], rtol=1e-5)
