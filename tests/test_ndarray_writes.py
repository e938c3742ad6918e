"""Writes through the course's NDArray views (`a[idx] = v`, `fill`, `a.flat[j] += eps`), as the
course's gradient checks make them, and the course's module-level NDArray functions."""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import needle as ndl
import needle.backend_ndarray as nd


def course_gradient_check(f, *args, eps=1e-4, backward=False):
    """The course's hw1/hw2 finite-difference check, as its test files write it: each entry
    nudged in place through `realize_cached_data().flat[j]`. Returns (numerical, computed)."""
    numerical_grads = [np.zeros(a.shape) for a in args]
    for i in range(len(args)):
        for j in range(args[i].realize_cached_data().size):
            args[i].realize_cached_data().flat[j] += eps
            f1 = float(f(*args).numpy().sum())
            args[i].realize_cached_data().flat[j] -= 2 * eps
            f2 = float(f(*args).numpy().sum())
            args[i].realize_cached_data().flat[j] += eps
            numerical_grads[i].flat[j] = (f1 - f2) / (2 * eps)
    out = f(*args)
    if backward:
        out.sum().backward()
        computed = [a.grad.numpy() for a in args]
    else:
        ones = ndl.Tensor(np.ones(out.shape), device=out.device, dtype=out.dtype)
        computed = [g.numpy() for g in out.op.gradient_as_tuple(ones, out)]
    return numerical_grads, computed


CASES = {
    "multiply": (lambda a, b: a * b, [(5, 4), (5, 4)]),
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 2)]),
    "exp": (lambda a: ndl.exp(a), [(3, 4)]),
    "summation": (lambda a: ndl.summation(a, axes=(1,)), [(3, 4)]),
    "broadcast_to": (lambda a: ndl.broadcast_to(a, (3, 4)), [(1, 4)]),
}


@pytest.mark.parametrize("backward", [False, True], ids=["gradient", "backward"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_courses_in_place_gradient_check_runs(name, backward, device):
    """`realize_cached_data().flat[j] += eps` was an AttributeError (no `flat`), and views
    were read-only: the course's gradient checks could not run on needle."""
    f, shapes = CASES[name]
    rng = np.random.default_rng(0)
    args = [ndl.Tensor(rng.standard_normal(s), device=device, dtype="float64") for s in shapes]
    before = [a.numpy().copy() for a in args]
    numerical, computed = course_gradient_check(f, *args, backward=backward)
    for n, c in zip(numerical, computed):
        np.testing.assert_allclose(c, n, rtol=1e-6, atol=1e-7)
    for a, b in zip(args, before):  # every nudge was undone (to rounding)
        np.testing.assert_allclose(a.numpy(), b, rtol=0, atol=1e-15)


def test_writes_go_through_views_as_numpy_writes_in_place(device):
    data = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = ndl.Tensor(data, device=device)
    expected = data.copy()
    v = x.realize_cached_data()
    v[1, ::-2] = nd.NDArray([10.0, 20.0], device=device)
    expected[1, ::-2] = [10.0, 20.0]
    v[0] = 7
    expected[0] = 7
    r = v.reshape((4, 3))
    r[3, 1:] = -1.0
    expected.reshape(4, 3)[3, 1:] = -1.0
    p = v.permute((1, 0))
    p[0, 2] = 99.0
    expected.T[0, 2] = 99.0
    s = v[1:3, 1:3]
    s[0, 0] = 55.0
    s[1] = s[1] + 1.0  # a second write through the same view
    expected[1:3, 1:3][0, 0] = 55.0
    expected[1:3, 1:3][1] += 1.0
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(v.numpy(), expected)
    assert x.dtype == "float32" and device.owns(x._realize())
    y = ndl.Tensor(np.zeros(3), device=device, dtype="float32")
    y.cached_data.fill(2.5)
    np.testing.assert_array_equal(y.numpy(), [2.5, 2.5, 2.5])


def test_a_write_is_an_in_place_change_to_the_tensor(device):
    """A graph built before the write would read the new data: backward() refuses it."""
    w = ndl.Tensor(np.ones((2, 2)), device=device, dtype="float32")
    loss = (w * w).sum()
    w.realize_cached_data()[0, 0] = 3.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_a_stale_view_refuses_writes(device):
    """Views are copies on write: a view whose tensor changed since would overwrite the
    change, so it raises instead."""
    x = ndl.Tensor(np.zeros(4), device=device, dtype="float32")
    a, b = x.realize_cached_data(), x.realize_cached_data()
    a[0] = 1.0
    with pytest.raises(RuntimeError, match="stale"):
        b[1] = 2.0
    flat = a.flat
    a[2] = 3.0
    with pytest.raises(RuntimeError, match="stale"):
        flat[3] = 4.0
    x.data = x.data + 1.0
    with pytest.raises(RuntimeError, match="stale"):
        a[3] = 4.0
    np.testing.assert_array_equal(x.numpy(), [2.0, 1.0, 4.0, 1.0])


def test_read_only_views_and_bad_values(device):
    x = ndl.Tensor(np.zeros((2, 3)), device=device, dtype="float32")
    with pytest.raises(TypeError, match="read-only"):
        x.realize_cached_data().broadcast_to((2, 2, 3))[0, 0, 0] = 1.0
    parts = ndl.ops.split(x, 0).realize_cached_data()
    with pytest.raises(TypeError, match="read-only"):
        parts[0][0] = 1.0
    other = ndl.strict() if device != ndl.strict() else ndl.torch()
    message = re.escape(f"the value is on {other}, the array on {device}")
    for value in (nd.array([1.0, 2.0, 3.0], device=other),
                  ndl.Tensor([1.0, 2.0, 3.0], device=other)):
        with pytest.raises(ValueError, match=message):
            x.realize_cached_data()[0] = value
    with pytest.raises(ValueError, match=r"a value of shape \(2,\) does not fit the "
                                         r"written part's shape \(1, 3\)"):
        x.realize_cached_data()[0] = nd.array([1.0, 2.0], device=device)
    np.testing.assert_array_equal(x.numpy(), np.zeros((2, 3)))
    x.realize_cached_data()[1] = np.array([4.0, 5.0, 6.0])  # host data is copied over
    x.realize_cached_data()[0, 1:] = nd.array([7.0, 8.0], device=ndl.cpu())
    np.testing.assert_array_equal(x.numpy(), [[0, 7, 8], [4, 5, 6]])
    n = ndl.Tensor(np.zeros(3), device=device, dtype="uint8")
    for bad, match in [(300, "out of the range of uint8"), (-1, "out of the range of uint8"),
                       (float("nan"), "holds no NaN or infinity")]:
        with pytest.raises(ValueError, match=match):
            n.realize_cached_data()[0] = bad
        with pytest.raises(ValueError, match=match):
            n.realize_cached_data().fill(bad)
    np.testing.assert_array_equal(n.numpy(), [0, 0, 0])


def test_a_value_of_the_same_size_is_written_in_the_parts_shape(device):
    """The course's Stack writes out[:, i:i+1, :] = a (3, 4) array into a (3, 1, 4) part: its
    NDArray takes any value of the part's size, in order."""
    out = nd.full((3, 2, 4), 0.0, device=device)
    part = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    out[:, 1:2, :] = nd.array(part, device=device)
    np.testing.assert_array_equal(out.numpy()[:, 1, :], part)
    np.testing.assert_array_equal(out.numpy()[:, 0, :], np.zeros((3, 4)))


def test_one_element_ndarrays_are_operands_as_numbers(device):
    """Course code's `z - max_z` with axes=None (a (1, 1) NDArray) raised AttributeError."""
    x = ndl.Tensor(np.arange(12.0).reshape(3, 4), device=device, dtype="float32")
    m = x.realize_cached_data().max(None, keepdims=True)
    np.testing.assert_array_equal((x - m).numpy(), np.arange(12.0).reshape(3, 4) - 11)


def test_standalone_ndarrays_take_writes(device):
    a = nd.array(np.zeros((2, 2)), device=device)
    a[1, :] = 5.0
    b = a + 1.0
    b[0, 0] = -1.0  # a result is its own array: `a` is unchanged
    np.testing.assert_array_equal(a.numpy(), [[0, 0], [5, 5]])
    np.testing.assert_array_equal(b.numpy(), [[-1, 1], [6, 6]])


def test_the_courses_module_functions(device):
    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    a = nd.array(data, device=device)
    e = nd.empty((2, 3), device=device)
    assert e.shape == (2, 3) and e.dtype == "float32" and e.device == device
    f = nd.full((2, 2), 1.5, device=device)
    np.testing.assert_array_equal(f.numpy(), np.full((2, 2), 1.5, dtype=np.float32))
    checks = [
        (nd.reshape(a, (3, 2)), data.reshape(3, 2)),
        (nd.broadcast_to(nd.reshape(a, (1, 2, 3)), (2, 2, 3)),
         np.broadcast_to(data, (2, 2, 3))),
        (nd.maximum(a, 2.0), np.maximum(data, 2.0)), (nd.exp(a), np.exp(data)),
        (nd.log(a + 1.0), np.log(data + 1)), (nd.tanh(a), np.tanh(data)),
        (nd.sum(a, axis=1), data.sum(axis=1)), (nd.flip(a, (0,)), data[::-1]),
    ]
    for got, expected in checks:
        assert type(got) is nd.NDArray and got.device == device
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_a_view_older_than_an_in_place_optimizer_step_is_stale(device):
    """cpu and torch update parameters in place (the array stays the same object): a view
    made before the step, written after it, put the old values back."""
    p = ndl.nn.Parameter(ndl.Tensor(np.zeros((2, 3)), device=device, dtype="float32"))
    opt = ndl.optim.SGD([p], lr=1.0)
    p.grad = ndl.Tensor(np.ones((2, 3)), device=device, dtype="float32")
    opt.step()
    root = p.realize_cached_data()
    v = root.permute((1, 0)).reshape((6,))  # a copy of the data on every device
    opt.step()
    for view in (v, root):
        with pytest.raises(RuntimeError, match="stale"):
            view[0] = 42.0
    np.testing.assert_array_equal(p.numpy(), np.full((2, 3), -2.0))


def test_a_kept_view_does_not_keep_the_graph_alive(device):
    from needle.autograd import live_values

    x = ndl.Tensor(np.ones((4, 3)), device=device, dtype="float32")
    w = ndl.nn.Parameter(ndl.Tensor(np.ones((3, 3)), device=device, dtype="float32"))
    before = live_values()
    kept = []
    for _ in range(5):
        loss = ndl.exp(ndl.tanh(x @ w)).sum()
        loss.backward(create_graph=False)
        kept.append(loss.realize_cached_data())
    del loss
    gc.collect()
    assert live_values() - before <= 2  # w.grad; the graphs went with their losses
    kept[-1][()] = 1.0  # the tensor is gone: the view is its own array
    assert float(kept[-1].numpy()) == 1.0


def test_module_functions_take_raw_arrays_as_an_ops_compute_gets_them(device):
    raw = device.asarray(np.array([[0.5, 2.0]]), dtype="float32")
    out = nd.exp(raw)
    assert device.owns(out) and type(out) is not nd.NDArray  # raw in, raw out
    np.testing.assert_allclose(device.to_numpy(out), np.exp([[0.5, 2.0]]), rtol=1e-6)
    np.testing.assert_array_equal(device.to_numpy(nd.reshape(raw, (2, 1))), [[0.5], [2.0]])
    with pytest.raises(TypeError, match="expected an NDArray or a device's array, got list"):
        nd.exp([1.0])
