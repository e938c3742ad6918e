"""Labels and indices stored as floats: accepted when whole numbers, refused by value if not."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import init, nn
from needle.ops.indices import as_index_array


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "float32", "float64"])
def test_as_index_array_gives_int64(dtype, device):
    xp = device.xp
    out = as_index_array(xp, device.asarray(np.array([2, 0, 1]), dtype=dtype), 300, "test")
    assert out.dtype == xp.int64  # n = 300 does not fit uint8: compared as int64
    np.testing.assert_array_equal(device.to_numpy(out), [2, 0, 1])


@pytest.mark.parametrize("values, message", [
    ([0.0, 1.5], "test: indices must be whole numbers, found 1.5"),
    ([0.0, np.nan], "test: indices must be whole numbers, found nan"),
    ([np.inf], "test: indices must be whole numbers, found inf"),
    ([2.0, 3.0], r"test: indices must be in \[0, 3\), found 3.0"),
    ([-1.0], r"test: indices must be in \[0, 3\), found -1.0"),
    ([0, 5], r"test: indices must be in \[0, 3\), found 5"),
])
def test_as_index_array_names_the_first_bad_value(values, message, device):
    with pytest.raises(ValueError, match=f"^{message}$"):
        as_index_array(device.xp, device.asarray(np.array(values)), 3, "test")


@pytest.mark.parametrize("dtype", ["uint64", "uint32"])
def test_large_unsigned_ids_are_reported_as_given_not_wrapped(dtype, device):
    if device.kind == "torch":
        pytest.skip(f"torch only stores {dtype} (no arithmetic): the torch device refuses it")
    big = int(np.iinfo(dtype).max)  # negative once cast to the signed index dtype
    ids = device.asarray(np.array([1, big], dtype=dtype))
    given = int(device.to_numpy(ids)[1])  # jax without 64-bit holds uint64 as uint32
    assert given in (big, 2**32 - 1)
    with pytest.raises(ValueError, match=rf"^test: indices must be in \[0, 3\), found {given}$"):
        as_index_array(device.xp, ids, 3, "test")
    with pytest.raises(ValueError, match=rf"SoftmaxLoss: labels must be in \[0, 3\), found "
                                         rf"{given}$"):
        nn.SoftmaxLoss()(ndl.Tensor(np.zeros((2, 3), np.float32), device=device),
                         ndl.Tensor(ids, device=device)).numpy()  # read: GPUs defer the check


def test_as_index_array_refuses_other_dtypes(device):
    with pytest.raises(TypeError, match="test: expected integer indices .*found dtype"):
        as_index_array(device.xp, device.asarray(np.array([True])), 3, "test")


def test_one_hot_accepts_whole_float_labels(device):
    expected = np.eye(4)[[2, 0, 3]]
    for labels in ([2.0, 0.0, 3.0], np.array([2, 0, 3], np.float32),
                   ndl.Tensor([2.0, 0.0, 3.0], device=device, dtype="float32")):
        np.testing.assert_array_equal(init.one_hot(4, labels, device=device).numpy(), expected)


@pytest.mark.parametrize("bad, message", [(0.5, "whole numbers, found 0.5"),
                                          (4.0, r"in \[0, 4\), found 4.0"),
                                          (-1, r"in \[0, 4\), found -1")])
def test_one_hot_refuses_bad_labels(bad, message, device):
    with pytest.raises(ValueError, match=f"one_hot: labels must be {message}"):
        init.one_hot(4, [1, bad], device=device).numpy()  # read: GPUs defer the check


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_loss_accepts_whole_float_labels(dtype, device):
    z = np.random.default_rng(1).standard_normal((3, 4))
    losses, grads = [], []
    for labels in (ndl.Tensor([3, 0, 1], device=device, dtype="int64"),
                   ndl.Tensor([3.0, 0.0, 1.0], device=device, dtype=dtype)):
        logits = ndl.Tensor(z, device=device)
        loss = nn.SoftmaxLoss()(logits, labels)
        loss.backward()
        losses.append(loss.numpy())
        grads.append(logits.grad.numpy())
    np.testing.assert_array_equal(losses[1], losses[0])
    np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("bad, message", [(1.5, "whole numbers, found 1.5"),
                                          (4.0, r"in \[0, 4\), found 4.0")])
def test_softmax_loss_refuses_bad_float_labels(bad, message, device):
    z = ndl.Tensor(np.zeros((2, 4)), device=device)
    with pytest.raises(ValueError, match=f"SoftmaxLoss: labels must be {message}"):
        nn.SoftmaxLoss()(z, ndl.Tensor([0.0, bad], device=device)).numpy()  # read: GPUs defer


# ----- on an accelerator the checks wait for the next read to the host ----------------------
@pytest.fixture
def deferring(device, monkeypatch):
    """`device` behaving as an accelerator does: index checks deferred to the next read."""
    monkeypatch.setattr(type(device), "defers_checks", True)
    device._pending = []
    yield device
    device._pending = []


def test_deferred_check_raises_at_the_next_read_and_never_indexes_out_of_bounds(deferring):
    dev = deferring
    np.random.seed(0)
    emb = nn.Embedding(5, 3, device=dev)
    out = emb(ndl.Tensor([[1, 7]], device=dev))  # no read here: the step goes on
    loss = (out * out).sum()
    loss.backward()
    assert len(dev._pending) == 1
    with pytest.raises(ValueError, match=r"^Embedding: indices must be in \[0, 5\), found 7$"):
        loss.numpy()
    assert dev._pending == []  # reported once; the next read is clean
    good = emb(ndl.Tensor([[1, 4]], device=dev)).numpy()
    np.testing.assert_array_equal(good, emb.weight.numpy()[[1, 4]][None])


def test_deferred_labels_and_one_hot_are_checked_at_the_next_read(deferring):
    dev = deferring
    logits = ndl.Tensor(np.zeros((2, 3)), device=dev)
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor([0.0, 2.5], device=dev))
    with pytest.raises(ValueError, match="SoftmaxLoss: labels must be whole numbers, found 2.5"):
        loss.numpy()
    hot = init.one_hot(3, [0, 3], device=dev)
    with pytest.raises(ValueError, match=r"one_hot: labels must be in \[0, 3\), found 3"):
        hot.numpy()
    ok = nn.SoftmaxLoss()(logits, ndl.Tensor([0, 2], device=dev)).numpy()
    np.testing.assert_allclose(ok, np.log(3), rtol=1e-6)


def test_deferred_checks_are_read_every_max_pending(deferring, monkeypatch):
    dev = deferring
    monkeypatch.setattr(dev, "MAX_PENDING", 4)
    ids = ndl.Tensor([0, 1], device=dev)
    for _ in range(3):
        ndl.ops.embedding(ndl.Tensor(np.ones((2, 2)), device=dev), ids)
    assert len(dev._pending) == 3
    with pytest.raises(ValueError, match=r"found 9"):  # the 4th check: all four are read
        ndl.ops.embedding(ndl.Tensor(np.ones((2, 2)), device=dev), ndl.Tensor([9], device=dev))
    assert dev._pending == []


def test_softmax_loss_checks_its_labels_once(device, monkeypatch):
    """SoftmaxLoss checks the labels, then calls the fused op without the public function's
    second check (on an accelerator each check is a kernel launch and a deferred read)."""
    import sys

    calls = []

    def counting(*args, **kwargs):
        calls.append(args[3])
        return as_index_array(*args, **kwargs)

    for module in ("needle.nn.loss", "needle.ops.reduce"):
        monkeypatch.setattr(sys.modules[module], "as_index_array", counting)
    logits = ndl.Tensor(np.zeros((4, 3), np.float32), device=device)
    labels = ndl.Tensor(np.array([0, 2, 1, 2]), device=device)
    loss = nn.SoftmaxLoss()(logits, labels)
    np.testing.assert_allclose(loss.numpy(), np.log(3), rtol=1e-6)
    assert calls == ["SoftmaxLoss"]
    ndl.ops.softmax_cross_entropy(logits, labels)  # the public op checks its own
    assert calls == ["SoftmaxLoss", "softmax_cross_entropy"]
