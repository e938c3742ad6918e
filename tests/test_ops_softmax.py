"""Softmax family: logsoftmax, logsumexp and SoftmaxLoss keep their answer for huge float32
logits; softmax (temperature, causal mask) in float32, second order, one node each way; the cpu
cross-entropy kernel against the portable op. The op table (test_ops.py) checks softmax,
logsoftmax, logsumexp and the cross-entropy ops against numpy and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn
from needle.kernels import reference_only
from needle.ops.reduce import SOFTMAX_XENT, SOFTMAX_XENT_GRAD
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


def np_softmax(z, temperature=1.0, causal=False):
    """float64 reference: the course's softmax of z / temperature (+ the causal mask)."""
    z = np.asarray(z, np.float64) / temperature
    if causal:
        t, tk = z.shape[-2:]
        z = z + np.triu(np.ones((t, tk)), k=tk - t + 1) * -np.finfo(np.float32).max
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("temperature,causal", [(1.0, False), (4.0, True), (0.3, True)])
def test_softmax_matches_numpy(temperature, causal, device):
    z = np.random.default_rng(1).standard_normal((2, 3, 5, 5)).astype(np.float32) * 3
    out = ndl.ops.softmax(ndl.Tensor(z, device=device), temperature, causal)
    expected = np_softmax(z, temperature, causal)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-7)
    assert out.dtype == "float32"
    if causal:  # keys after their query get exactly zero
        assert (out.numpy()[..., np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] == 0).all()


def test_causal_softmax_and_attention_in_float16(device):
    """The mask's 0 * float16(-3.4e38) = 0 * -inf made every causal softmax NaN in float16 on
    cpu and jax (torch multiplies in float32): the mask is now the dtype's lowest finite
    number where float32's max is beyond it."""
    try:
        device.dtype("float16")
    except TypeError:
        pytest.skip(f"{device} has no float16")
    z = np.random.default_rng(1).standard_normal((2, 3, 5)).astype(np.float16)
    x = ndl.Tensor(z, device=device, dtype="float16")
    out = ndl.ops.softmax(x, 1.0, True)
    np.testing.assert_allclose(out.numpy(), np_softmax(z.astype(np.float32), 1.0, True),
                               atol=2e-3)
    (out * ndl.Tensor(z, device=device, dtype="float16")).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    mask = nn.MultiHeadAttention(causal=True, device=device).create_causal_mask(
        3, 5, device, "float16")
    assert mask.dtype == "float16" and np.isfinite(mask.numpy()).all()
    np.random.seed(0)
    layer = nn.AttentionLayer(8, 2, 4, causal=True, device=device, dtype="float16")
    y = layer(ndl.Tensor(np.random.randn(2, 5, 8), device=device, dtype="float16"))
    assert y.dtype == "float16" and np.isfinite(y.numpy()).all()


@pytest.mark.parametrize("big", BIG)
def test_softmax_of_huge_and_fully_masked_float32_logits(big, device):
    z = logits32(big)
    out = ndl.ops.softmax(ndl.Tensor(z, device=device)).numpy()
    np.testing.assert_allclose(out, np.exp(np_logsoftmax(z.astype(np.float64))), atol=1e-7)
    masked = np.full((2, 4), -np.finfo(np.float32).max, np.float32)  # rows all "minus infinity"
    out = ndl.ops.softmax(ndl.Tensor(masked, device=device), temperature=2.0).numpy()
    np.testing.assert_array_equal(out, np.full((2, 4), 0.25, np.float32))


@pytest.mark.parametrize("temperature,causal", [(1.0, False), (2.5, True)])
def test_softmax_second_order(temperature, causal, device):
    rng = np.random.default_rng(3)
    c, d = rng.standard_normal((2, 3, 3)), rng.standard_normal((2, 3, 3))

    def grad_dot_c(z):
        (ndl.ops.softmax(z, temperature, causal) * ndl.Tensor(d, device=z.device)).sum().backward()
        return (z.grad * ndl.Tensor(c, device=z.device)).sum()

    check_gradients(grad_dot_c, rng.standard_normal((2, 3, 3)), device=device)


def test_softmax_rejects_bad_arguments(device):
    with pytest.raises(ValueError, match="temperature"):
        ndl.ops.softmax(ndl.Tensor(np.zeros((2, 2)), device=device), temperature=0.0)
    with pytest.raises(ValueError, match=r"causal.*\(3,\)"):
        ndl.ops.softmax(ndl.Tensor(np.zeros(3), device=device), causal=True)


@pytest.mark.parametrize("fn", [ndl.ops.softmax, lambda x: ndl.ops.softmax(x, 2.0),
                                ndl.ops.logsoftmax], ids=["softmax", "temperature", "log"])
def test_softmaxes_of_a_0d_tensor_name_the_shape(fn, device):
    with pytest.raises(ValueError, match=r"softmax: .*shape \(\)"):
        fn(ndl.Tensor(np.array(2.0), device=device, dtype="float32"))


def labels_on(device, values, dtype="int64"):
    return device.asarray(np.array(values), dtype=device.dtype(dtype))


@pytest.mark.parametrize("labels, match", [
    ([[0, 1, 2]], r"labels of shape \(3,\) for logits of shape \(3, 4\), found \(1, 3\)"),
    ([0, 1], r"labels of shape \(3,\) for logits of shape \(3, 4\), found \(2,\)"),
    ([0, 1, 2, 3], r"labels of shape \(3,\) for logits of shape \(3, 4\), found \(4,\)"),
    (5, r"labels of shape \(3,\) for logits of shape \(3, 4\), found \(\)"),
])
def test_softmax_cross_entropy_op_checks_the_labels_shape(labels, match, device):
    logits = ndl.Tensor(np.zeros((3, 4)), device=device, dtype="float32")
    with pytest.raises(ValueError, match=match):
        ndl.softmax_cross_entropy(logits, labels_on(device, labels))


@pytest.mark.parametrize("labels, bad", [([0, 1, 4], 4), ([0, -1, 2], -1), ([7, 1, 2], 7)])
def test_softmax_cross_entropy_op_checks_the_labels_range(labels, bad, device):
    """As SoftmaxLoss: a ValueError naming the value (on an accelerator at the next read)."""
    logits = ndl.Tensor(np.zeros((3, 4)), device=device, dtype="float32")
    with pytest.raises(ValueError, match=rf"softmax_cross_entropy: labels must be in "
                                         rf"\[0, 4\), found {bad}"):
        ndl.softmax_cross_entropy(logits, labels_on(device, labels)).numpy()


def test_softmax_cross_entropy_op_checks_the_logits(device):
    with pytest.raises(ValueError, match=r"logits of shape \(N, k\), found \(2, 3, 4\)"):
        ndl.softmax_cross_entropy(ndl.Tensor(np.zeros((2, 3, 4)), device=device),
                                  labels_on(device, [0, 1]))
    with pytest.raises(TypeError, match="expected integer labels"):
        ndl.softmax_cross_entropy(ndl.Tensor(np.zeros((2, 3)), device=device),
                                  labels_on(device, [True, False], "bool"))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float32"])
def test_softmax_cross_entropy_op_takes_other_label_dtypes(dtype, device):
    """As SoftmaxLoss: any integer dtype, or floats holding whole numbers."""
    a = np.random.default_rng(3).standard_normal((3, 4))
    logits = ndl.Tensor(a, device=device, dtype="float64")
    loss = ndl.softmax_cross_entropy(logits, labels_on(device, [2, 0, 3], dtype))
    shifted = a - a.max(1, keepdims=True)
    expected = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[[0, 1, 2], [2, 0, 3]])
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)


def test_attention_softmax_records_one_node_each_way(device):
    q = ndl.Tensor(np.random.default_rng(4).standard_normal((1, 2, 3, 4)), device=device)
    _, probs = nn.MultiHeadAttention(causal=True)(q, q, q)  # training, dropout 0
    ops = [type(n.op).__name__ for n in autograd.find_topo_sort([probs]) if n.op is not None]
    assert ops == ["MatMul", "Softmax"]  # q kᵀ with k transposed inside the MatMul


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_cross_entropy_kernel_equals_the_portable_op_to_the_bit(dtype):
    # the cpu's softmax_xent kernels (fewer fresh arrays) against their portable references
    rng = np.random.default_rng(7)
    z = rng.standard_normal((6, 5)) * 3
    z[2] = [1e4, -1e4, 3.0, 1e4, 0.0]
    y = ndl.Tensor(rng.integers(0, 5, 6), device=ndl.cpu(), dtype="int64")

    def loss_and_grad():
        x = ndl.Tensor(z, device=ndl.cpu(), dtype=dtype)
        loss = nn.SoftmaxLoss()(x, y)
        (loss * 1.7).backward(create_graph=False)
        return loss.numpy(), x.grad.numpy()

    fast = loss_and_grad()
    with reference_only(SOFTMAX_XENT, SOFTMAX_XENT_GRAD):
        portable = loss_and_grad()
    for a, b in zip(fast, portable):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_the_causal_mask_cache_is_bounded():
    """One mask per (rows, columns, dtype) was kept forever: decoding lengths 1..400 kept
    82 MiB (about 4 L^3 / 3 bytes up to length L)."""
    from needle.backends import softmax as cpu_softmax

    for t in range(1, 3 * cpu_softmax.MAX_ADDENDS):
        cpu_softmax._causal_addend(t, t, np.dtype("float32"))
        assert len(cpu_softmax._ADDENDS) <= cpu_softmax.MAX_ADDENDS
