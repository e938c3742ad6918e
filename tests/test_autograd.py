"""The Tensor and the autograd engine: construction, graph structure, backward, memory."""

from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import needle as ndl
import needle.backend_ndarray as nd
from needle import autograd
from needle.testing import check_gradients


@pytest.fixture
def quiet_gc():
    """Collect earlier tests' garbage, then keep the collector off: live-Value counts taken
    in the test change only through the test's own objects, whatever ran before it."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


# ----- construction and members ---------------------------------------------------------


def test_dtype_is_kept_when_not_given(device):
    assert ndl.Tensor(np.ones(3), device=device).dtype == "float64"
    assert ndl.Tensor(np.ones(3, dtype=np.float32), device=device).dtype == "float32"
    assert ndl.Tensor([1, 2, 3], device=device).dtype == np.asarray([1, 2, 3]).dtype
    assert ndl.Tensor([1.0, 2.0], device=device).dtype == "float64"


def test_dtype_accepts_names_and_numpy_types(device):
    for spec in ("float32", np.float32, np.dtype("float32")):
        t = ndl.Tensor([1, 2], device=device, dtype=spec)
        assert t.dtype == "float32" and t.dtype == np.float32
        assert t.numpy().dtype == np.float32


def test_noncontiguous_numpy_view(device):
    base = np.arange(24.0).reshape(4, 6)
    view = base[::2, 1::2].T
    t = ndl.Tensor(view, device=device)
    np.testing.assert_array_equal(t.numpy(), view)
    base[0, 1] = -1.0  # the tensor holds a copy
    assert t.numpy()[0, 0] == 1.0


def test_tensor_from_tensor_copies_to_device(device):
    src = ndl.Tensor([[1.0, 2.0]], device=ndl.cpu(), dtype="float32")
    t = ndl.Tensor(src, device=device)
    assert t.device == device and t.dtype == "float32"
    np.testing.assert_array_equal(t.numpy(), [[1.0, 2.0]])
    back = ndl.Tensor(t, device=ndl.cpu(), dtype="float64")
    assert back.device == ndl.cpu() and back.dtype == "float64"


def test_members(device):
    t = ndl.Tensor(np.zeros((2, 3, 4)), device=device, dtype="float32")
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.device == device
    assert t._array is t._realize()  # the stored array itself
    assert isinstance(t.numpy(), np.ndarray)
    assert t.requires_grad
    t.requires_grad = False
    assert not t.requires_grad
    assert t.op is None and t.inputs == () and t.grad is None


def test_numpy_is_a_host_copy(device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    host = t.numpy()
    host[0] = 5.0
    assert t.numpy()[0] == 1.0


def test_repr_and_str(device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    assert repr(t).startswith("needle.Tensor([1. 2.]")
    assert str(t) == "[1. 2.]"


def test_unknown_keywords_are_rejected_by_name():
    with pytest.raises(TypeError, match="'dvice', 'dtpye'"):
        ndl.Tensor([1.0], dvice=ndl.strict(), dtpye="float16")
    t = ndl.Tensor([1.0], device=ndl.cpu(), dtype="float32", requires_grad=False)
    assert t.dtype == "float32" and not t.requires_grad


@pytest.mark.parametrize("data, named", [
    (None, "NoneType"), ({"a": 1}, "dict"), (["a"], "list.*<U1"), (np.array(["a"]), "<U1"),
    (np.array([b"ab"]), "S2"), (np.array([1.0, None], dtype=object), "object"),
])
def test_strings_objects_and_none_are_not_tensor_data(device, data, named):
    with pytest.raises(TypeError, match=f"numbers or booleans.*{named}"):
        ndl.Tensor(data, device=device)


def test_len_of_a_zero_dim_tensor(device):
    assert len(ndl.Tensor(np.ones((3, 2)), device=device)) == 3
    with pytest.raises(TypeError, match=r"len\(\) of a 0-d tensor"):
        len(ndl.Tensor(1.0, device=device))


def test_course_init_makes_a_leaf(device):
    data = device.asarray([1.0, 2.0])
    t = ndl.Tensor.__new__(ndl.Tensor)
    t._init(None, [], cached_data=data, requires_grad=True, device=device)
    assert t.is_leaf() and t.inputs == () and t.requires_grad and t._array is data
    (t * 2).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 2.0])


def test_tensors_are_dict_keys_compared_by_identity():
    # hashed by identity (sets and dicts never compare two live Tensors' values); == itself
    # is elementwise, as PyTorch's (tests/test_tensor_torch_names.py)
    a, b = ndl.Tensor([1.0]), ndl.Tensor([1.0])
    d = {a: 1, b: 2}
    assert len(d) == 2 and d[a] == 1 and d[b] == 2 and len({a, b, a}) == 2
    assert a is not b and (a == b).numpy().tolist() == [True]


def test_weak_identity_containers_never_compare_values():
    # weakref's WeakSet compares two references to one Tensor with ==, elementwise now
    import gc

    from needle.autograd.weak import WeakIdDict, WeakIdSet

    a, b = ndl.Tensor([1.0, 2.0]), ndl.Tensor([1.0, 2.0])
    seen, where = WeakIdSet(), WeakIdDict()
    seen.add(a)
    where[a] = "line 3"
    assert a in seen and b not in seen and where.get(a) == "line 3" and where.get(b) is None
    assert len(seen) == 1 and a in where and b not in where
    del a
    gc.collect()
    assert len(seen) == 0 and len(where) == 0  # (an entry goes with its Tensor)


# ----- operators build the course's graph ------------------------------------------------


def test_operators_use_the_scalar_ops():
    a, b = ndl.Tensor([2.0]), ndl.Tensor([3.0])
    assert isinstance((a + 1).op, ndl.AddScalar)
    assert isinstance((1 + a).op, ndl.AddScalar)
    assert isinstance((a * 2).op, ndl.MulScalar)
    assert isinstance((a / 2).op, ndl.DivScalar)
    assert isinstance((a**2).op, ndl.PowerScalar)
    assert isinstance((a**b).op, ndl.EWisePow)
    assert isinstance((a / b).op, ndl.EWiseDiv)
    assert isinstance((-a).op, ndl.Negate)
    sub = a - b  # add(a, negate(b))
    assert isinstance(sub.op, ndl.EWiseAdd) and sub.inputs[0] is a
    assert isinstance(sub.inputs[1].op, ndl.Negate) and sub.inputs[1].inputs[0] is b
    assert isinstance((a - 1).op, ndl.AddScalar) and (a - 1).op.scalar == -1
    np.testing.assert_allclose((2 - a).numpy(), [0.0])
    np.testing.assert_allclose((6 / b).numpy(), [2.0])
    np.testing.assert_allclose((np.float32(2.0) * a).numpy(), [4.0])


def test_numpy_scalars_become_python_numbers(device):
    a = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    out = a * np.float64(0.5) + np.float32(1.0)
    assert out.dtype == "float32"  # a numpy float64 scalar must not promote the result
    np.testing.assert_allclose(out.numpy(), [1.5, 2.0])


def test_topological_order_is_post_order_left_to_right():
    a1, b1 = ndl.Tensor(np.ones((2, 2))), ndl.Tensor(np.ones((2, 2)))
    c1 = 3 * a1 * a1 + 4 * b1 * a1 - a1
    order = autograd.find_topo_sort([c1])
    names = [type(n.op).__name__ if n.op is not None else "leaf" for n in order]
    assert names == ["leaf", "MulScalar", "EWiseMul", "leaf", "MulScalar", "EWiseMul",
                     "EWiseAdd", "Negate", "EWiseAdd"]
    assert order[0] is a1 and order[3] is b1 and order[-1] is c1
    assert order[2].inputs == (order[1], a1) and order[6].inputs == (order[2], order[5])
    assert order[7].inputs == (a1,) and c1.inputs == (order[6], order[7])


# ----- backward ---------------------------------------------------------------------------


def test_backward_matches_hand_derivatives(device):
    x = ndl.Tensor([1.0, 2.0, 3.0], device=device)
    w = ndl.Tensor([0.5, -1.0, 2.0], device=device)
    y = (x * w + x**2).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5 + 2, -1 + 4, 2 + 6])
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0, 3.0])
    assert y.grad is not None  # every node gets .grad


def test_backward_defaults_to_ones_for_non_scalar_outputs(device):
    x = ndl.Tensor(np.ones((2, 3)), device=device)
    (x * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 3.0))


def test_backward_out_grad_shape_is_checked(device):
    x = ndl.Tensor(np.ones((2, 3)), device=device)
    with pytest.raises(ValueError, match=r"\(3,\).*\(2, 3\)"):
        (x * 3).backward(ndl.Tensor(np.ones(3), device=device))


def test_backward_out_grad_device_is_checked(device):
    other = ndl.strict(1) if device.kind == "strict" else ndl.strict()
    x = ndl.Tensor([1.0, 2.0], device=device)
    with pytest.raises(ValueError, match=re.escape(f"on {other}, the tensor is on {device}")):
        (x * 3).backward(ndl.Tensor([1.0, 1.0], device=other))
    assert x.grad is None


def test_backward_out_grad_dtype_is_checked(device):
    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    with pytest.raises(ValueError, match="dtype float64, the tensor has float32"):
        (x * 3).backward(ndl.Tensor([1.0, 1.0], device=device, dtype="float64"))
    # host data is converted to the tensor's device and dtype
    (x * 3).backward(np.array([1.0, 2.0]))
    assert x.grad.dtype == "float32" and x.grad.device == device
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 6.0])


def test_second_backward_overwrites_grad(device):
    x = ndl.Tensor([2.0], device=device)
    (x * 3).backward()
    (x * 5).backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0])


def test_second_order_gradient(device):
    x = ndl.Tensor([2.0, -1.0, 0.5], device=device)
    (x**3).sum().backward()
    g = x.grad  # 3 x^2, itself a graph over x
    assert g.requires_grad and g.op is not None
    np.testing.assert_allclose(g.numpy(), 3 * np.array([4.0, 1.0, 0.25]))
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.array([2.0, -1.0, 0.5]))


def test_second_order_through_softmax_like_graph(device):
    # d/dx sum(d/dx logsumexp(x) * c) = Hessian(logsumexp) @ c, checked by finite differences
    c = np.array([0.3, -1.2, 0.7])

    def grad_dot_c(x):
        ndl.logsumexp(x).backward()
        return (x.grad * ndl.Tensor(c, device=x.device)).sum()

    check_gradients(grad_dot_c, np.array([0.1, 0.5, -0.4]), device=device)


def test_create_graph_false_gives_constant_gradients(device):
    x = ndl.Tensor([2.0], device=device)
    (x**3).backward(create_graph=False)
    np.testing.assert_allclose(x.grad.numpy(), [12.0])
    assert x.grad.op is None and not x.grad.requires_grad


def test_gradient_sums_over_reuse(device):
    x = ndl.Tensor([1.5], device=device)
    (x * x * x + x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 * 1.5**2 + 1])


def test_broadcast_gradient_is_summed_to_input_shape(device):
    a = ndl.Tensor(np.ones((2, 3)), device=device)
    b = ndl.Tensor(np.ones((3,)), device=device)
    c = ndl.Tensor(np.ones((2, 1)), device=device)
    ((a + b) * c).sum().backward()
    assert b.grad.shape == (3,) and c.grad.shape == (2, 1)
    np.testing.assert_allclose(b.grad.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(c.grad.numpy(), [[6.0], [6.0]])


def test_long_chain_backward_does_not_recurse(device):
    x = ndl.Tensor([1.0], device=device)
    y = x
    for _ in range(100_000):
        y = y + 1.0
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])
    np.testing.assert_allclose(y.numpy(), [100_001.0])
    assert len(autograd.find_topo_sort([y])) == 100_001


# ----- detach, data, no_grad, memory -------------------------------------------------------


def test_results_without_grad_hold_no_inputs(device):
    a = ndl.Tensor([1.0], device=device, requires_grad=False)
    b = ndl.Tensor([2.0], device=device, requires_grad=False)
    c = a * b + 1
    assert not c.requires_grad and c.op is None and c.inputs == ()


def test_no_grad_records_nothing(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    with ndl.no_grad():
        y = (x * 2).exp()
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()
    assert not y.requires_grad and y.op is None and y.inputs == ()
    np.testing.assert_allclose(y.numpy(), np.exp([2.0, 4.0]))
    assert (x * 2).requires_grad  # recording is back on


def test_no_grad_as_decorator():
    @ndl.no_grad()
    def f(t):
        return t * 2

    assert f(ndl.Tensor([1.0])).op is None


def test_detach_and_data_share_storage_and_add_no_node(device, quiet_gc):
    w = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    d = w.detach()
    assert d._array is w._array and d.op is None and not d.requires_grad
    assert w.data._array is w._array
    g = ndl.Tensor([10.0, 10.0], device=device, dtype="float32")
    before = autograd.TENSOR_COUNTER
    w.data = w.data + (-0.1) * g.data
    assert autograd.TENSOR_COUNTER == before  # temporaries freed at once, nothing recorded
    assert w.op is None and w.inputs == ()
    np.testing.assert_allclose(w.numpy(), [0.0, 1.0], atol=1e-7)


def test_data_setter_allows_new_shape_and_rejects_new_dtype(device):
    w = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    w.data = ndl.Tensor(np.zeros((2, 2)), device=device, dtype="float32")
    assert w.shape == (2, 2)
    with pytest.raises(ValueError, match="float32.*float64"):
        w.data = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    assert w.shape == (2, 2) and w.dtype == "float32"


def test_tensor_counter_returns_to_baseline(device, quiet_gc):
    base = autograd.TENSOR_COUNTER
    x = ndl.Tensor(np.ones((3, 3)), device=device)
    y = ndl.logsumexp(ndl.relu(x @ x) * 2, axes=1).sum()
    y.backward()
    assert autograd.TENSOR_COUNTER > base + 5
    del x, y
    gc.collect()  # x -> x.grad -> its graph -> x is a cycle
    assert autograd.TENSOR_COUNTER == base


# ----- bad input ---------------------------------------------------------------------------


def test_elementwise_shape_mismatch_names_both_shapes(device):
    a = ndl.Tensor(np.ones((2, 3)), device=device)
    b = ndl.Tensor(np.ones((4,)), device=device)
    for fn in (lambda: a + b, lambda: a * b, lambda: a / b, lambda: a**b):
        with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
            fn()


def test_matmul_shape_mismatch_names_both_shapes(device):
    a = ndl.Tensor(np.ones((2, 3)), device=device)
    b = ndl.Tensor(np.ones((4, 5)), device=device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        a @ b


def test_reshape_and_broadcast_errors_name_shapes(device):
    a = ndl.Tensor(np.ones((2, 3)), device=device)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        a.reshape((4,))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 3\)"):
        a.broadcast_to((3, 3))


def test_reshape_and_broadcast_checks_before_the_library(device):
    """The Python checks agree with numpy's rules, so every device raises the same error."""
    a = ndl.Tensor(np.ones((2, 3)), device=device)
    assert a.reshape((-1, 2)).shape == (3, 2) and a.reshape((6, -1)).shape == (6, 1)
    assert ndl.Tensor(np.ones((0, 3)), device=device).reshape((-1, 3)).shape == (0, 3)
    for bad in ((-1, -1), (4, -1), (-2, -3), (7,)):
        with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3\)"):
            a.reshape(bad)
    assert a.broadcast_to((4, 2, 3)).shape == (4, 2, 3)
    for bad in ((3,), (2, 1), (2, -1), (1, 2, 4)):
        with pytest.raises(ValueError, match=r"broadcast_to: cannot broadcast \(2, 3\)"):
            a.broadcast_to(bad)
    for shape in ((3, 1), (2, 2)):
        b = ndl.Tensor(np.ones(shape), device=device)
        with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and"):
            a + b


def test_mixing_devices_names_both_devices(device):
    other = ndl.strict(1) if device.kind == "strict" else ndl.strict()
    if not other.enabled():
        pytest.skip(other.unavailable_reason())
    a = ndl.Tensor([1.0], device=device)
    b = ndl.Tensor([1.0], device=other)
    with pytest.raises(ValueError, match=f"{device}.*{other}".replace("(", r"\(").replace(
            ")", r"\)")):
        a + b


def test_scalar_op_rejects_non_numbers():
    with pytest.raises(TypeError, match="list"):
        ndl.Tensor([1.0]) + [1.0]


def test_index_errors():
    t = ndl.Tensor(np.ones((2, 3)))
    with pytest.raises(IndexError, match="out of bounds"):
        t[2]
    with pytest.raises(IndexError, match="too many"):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="list"):
        t[[0, 1]]


def test_the_gradient_checker_catches_a_wrong_gradient(device):
    class WrongSquare(ndl.TensorOp):
        def compute(self, a):
            return a * a

        def gradient(self, out_grad, node):
            return out_grad * node.inputs[0] * 2.01  # off by 0.5%

    with pytest.raises(AssertionError, match="finite differences"):
        check_gradients(lambda a: WrongSquare()(a), np.array([1.0, -2.0]), device=device)


def test_intermediate_nodes_keep_their_gradients(device):
    x = ndl.Tensor([1.0, -2.0], device=device)
    w = ndl.Tensor([3.0, 0.5], device=device)
    z = x * w
    (z * z).sum().backward()
    # z's adjoint 2z is a recorded graph over z, held weakly by z and strongly by x.grad
    assert z.grad is not None and z.grad.op is not None
    np.testing.assert_allclose(z.grad.numpy(), 2 * np.array([3.0, -1.0]))
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([3.0, -1.0]) * [3.0, 0.5])


def test_second_order_through_matmul_tanh_and_broadcasting(device):
    rng = np.random.default_rng(5)
    c, d = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))

    def grad_dot(x, w, b):
        (ndl.tanh(x @ w + b) ** 2).sum().backward()
        return ((x.grad * ndl.Tensor(c, device=device)).sum()
                + (w.grad * ndl.Tensor(d, device=device)).sum())

    check_gradients(grad_dot, rng.standard_normal((3, 4)), rng.standard_normal((4, 2)),
                    rng.standard_normal((2,)), device=device)


def test_second_order_through_relu(device):
    """ReLU's adjoint (ReLUGrad, one kernel) is linear in the output's adjoint: its own
    gradient is ReLUGrad again, and the input gets none (the mask is piecewise constant)."""
    rng = np.random.default_rng(6)
    c = rng.standard_normal((3, 4))

    def grad_dot(x, w):
        z = x @ w  # the relu's adjoint z^2 is not 0 where z < 0: the mask must apply
        (ndl.relu(z) * z ** 2).sum().backward()
        return (x.grad * ndl.Tensor(c, device=device)).sum() + (w.grad ** 2).sum()

    check_gradients(grad_dot, rng.standard_normal((3, 4)), rng.standard_normal((4, 2)),
                    device=device)


def test_split_adjoints_add_element_by_element(device, monkeypatch):
    # each split(x)[t] used once: T tuple adjoints that are zero but for element t. Added
    # tuple by tuple they would cost T^2 additions; the engine picks the T elements instead
    t = 30
    x = ndl.Tensor(np.arange(t * 2.0).reshape(t, 2), device=device, dtype="float64")
    parts = ndl.split(x, 0)
    loss = parts[0].sum()
    for i in range(1, t):
        loss = loss + parts[i].sum() * float(i + 1)
    calls = []
    for op in (ndl.ops.EWiseAdd, ndl.ops.AddN):
        compute = op.compute
        monkeypatch.setattr(op, "compute", lambda self, *a, _f=compute: calls.append(1)
                            or _f(self, *a))
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat(np.arange(1.0, t + 1), 2)
                                  .reshape(t, 2))
    assert len(calls) <= 2 * t  # the loss's own adds, not t * t


def test_split_backward_is_linear_in_the_steps(device):
    # each step's adjoint is a OneHotTuple, added by picking: T + O(1) nodes, no T^2 zeros
    x = ndl.Tensor(np.arange(24.0).reshape(6, 2, 2), device=device)
    steps = list(ndl.split(x, 0))
    loss = steps[0].sum()
    for t, step in enumerate(steps[1:], start=2):
        loss = loss + (step * float(t)).sum()
    loss.backward(create_graph=False)
    expected = np.repeat(np.arange(1.0, 7.0), 4).reshape(6, 2, 2)
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    one_hot = steps[3].op.gradient(ndl.Tensor(np.ones((2, 2)), device=device), steps[3])
    assert type(one_hot.op).__name__ == "OneHotTuple"
    parts = [p.numpy() for p in one_hot]
    np.testing.assert_array_equal(parts[3], np.ones((2, 2)))
    assert all(not p.any() for i, p in enumerate(parts) if i != 3)


def test_unused_split_elements_get_zero_adjoints(device):
    x = ndl.Tensor(np.ones((3, 2)), device=device)
    parts = ndl.split(x, 0)
    (parts[1] * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0], [3, 3], [0, 0]])


# ----- one backward rule per op, saved values on the node ---------------------------------


def test_an_op_on_raw_arrays_evaluates_at_once(device):
    xp = device.xp
    a = device.asarray(np.array([[1.0, -2.0]]), dtype=device.dtype("float64"))
    out = ndl.ops.relu(a)  # no Tensor among the inputs: compute's array, no node
    assert not isinstance(out, ndl.Tensor)
    np.testing.assert_array_equal(device.to_numpy(out), [[1.0, 0.0]])
    summed = ndl.ops.summation(ndl.ops.multiply(a, a), (1,))
    np.testing.assert_array_equal(device.to_numpy(summed), [5.0])
    assert xp is device.xp
    with pytest.raises(TypeError, match="EWiseMul: got both Tensors and raw arrays"):
        ndl.ops.multiply(ndl.Tensor(np.ones((1, 2)), device=device, dtype="float64"), a)


def test_no_op_has_a_second_backward_rule():
    import inspect

    ops = [cls for module in vars(ndl.ops).values() if inspect.ismodule(module)
           for cls in vars(module).values()
           if inspect.isclass(cls) and issubclass(cls, ndl.autograd.Op)]
    assert len(ops) > 40
    assert [cls.__name__ for cls in ops if hasattr(cls, "vjp")] == []


def _saving_ops(device) -> tuple[str, ...]:
    """The ops that keep values on `device`: Conv keeps its windows where it gathers them (not
    on torch, whose own convolution gathers none)."""
    import sys

    conv = sys.modules["needle.ops.conv"]
    gathers = conv.CONV.implementation(device.kind) is conv.conv_portable
    return ("Conv",) * gathers + ("Normalize", "SoftmaxCrossEntropy")


def _saving_model(device):
    """A conv, a normalisation and a cross-entropy: the three ops that keep values."""
    np.random.seed(3)
    x = ndl.Tensor(np.random.standard_normal((4, 5, 5, 2)), device=device, dtype="float32",
                   requires_grad=False)
    w = ndl.Tensor(np.random.standard_normal((3, 3, 2, 3)), device=device, dtype="float32")
    h = ndl.ops.conv(x, w, padding=1)
    h = ndl.ops.normalize(ndl.ops.reshape(h, (4, 75)), (1,))
    labels = device.asarray(np.array([0, 3, 7, 1]), dtype=device.dtype("int64"))
    return w, ndl.ops.softmax_cross_entropy(h, labels)


@pytest.mark.parametrize("create_graph", [False, True])
def test_two_backwards_over_a_retained_graph_agree_without_recomputing(
        device, create_graph, monkeypatch):
    import sys

    conv, norm, reduce = (sys.modules[f"needle.ops.{m}"] for m in ("conv", "norm", "reduce"))
    w, loss = _saving_model(device)
    saving = [n for n in autograd.find_topo_sort([loss]) if type(n.op).__name__ in
              _saving_ops(device)]
    assert len(saving) == len(_saving_ops(device)) and all(n.saved is not None for n in saving)
    recomputed = []
    for module, name in ((conv, "im2col_array"), (norm, "_stats"), (reduce, "_finite_max")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: (
            recomputed.append(_name), _real(*a, **k))[1])
    grads = []
    for _ in range(2):
        w.grad = None
        loss.backward(create_graph=create_graph, retain_graph=True)
        grads.append(w.grad.numpy())
    assert recomputed == []
    w2, loss2 = _saving_model(device)  # a fresh graph gives the same numbers
    loss2.backward(create_graph=create_graph)
    if device.kind == "jax" and device.defers_checks:  # jax on a GPU: its convolution's
        # weight adjoint runs in no fixed order (an H100: two runs 5e-7 relative apart)
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(w2.grad.numpy(), grads[0], rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_array_equal(grads[0], grads[1])
        np.testing.assert_array_equal(w2.grad.numpy(), grads[0])


@pytest.mark.parametrize("create_graph", [True, False])
def test_without_retain_graph_saved_values_are_freed_and_recomputed_alike(
        device, create_graph, monkeypatch):
    """retain_graph defaults to create_graph (PyTorch's rule): a backward that does not retain
    the graph drops what the ops saved (im2col's windows, a norm's statistics, the softmax's
    exponentials) as it passes; a second backward recomputes them, to the same numbers."""
    import sys

    w, loss = _saving_model(device)
    saving = [n for n in autograd.find_topo_sort([loss])
              if type(n.op).__name__ in _saving_ops(device)]
    loss.backward(create_graph=create_graph, retain_graph=False)
    first = w.grad.numpy()
    assert len(saving) == len(_saving_ops(device)) and all(n.saved is None for n in saving)
    recomputed = []
    norm = sys.modules["needle.ops.norm"]
    real = norm.NORMALIZE  # the statistics, on every device (a kernel on cuda)
    monkeypatch.setattr(norm, "NORMALIZE", lambda *a: (recomputed.append(1), real(*a))[1])
    w.grad = None
    loss.backward(create_graph=create_graph)
    assert recomputed
    np.testing.assert_array_equal(w.grad.numpy(), first)
    if not create_graph:  # the default for create_graph=False: not retained
        _, loss3 = _saving_model(device)
        loss3.backward(create_graph=False)
        assert all(n.saved is None for n in autograd.find_topo_sort([loss3])
                   if type(n.op).__name__ == "Normalize")


class _BroadcastPlus(ndl.autograd.TensorOp):
    """A user's op, a + b with b broadcast, whose rule hands back b's adjoint unsummed."""

    def compute(self, a, b):
        return a + b

    def gradient(self, out_grad, node):
        return out_grad, out_grad  # b's adjoint still has a's shape


@pytest.mark.parametrize("create_graph", [True, False])
def test_a_user_ops_broadcast_adjoint_is_summed_back_to_its_inputs_shape(device, create_graph):
    """The engine's safety net, kept for ops defined outside needle (needle's own return
    adjoints shaped like their inputs, as the op table checks, and skip the check)."""
    a = ndl.Tensor(np.ones((4, 3)), device=device)
    b = ndl.Tensor(np.ones((3,)), device=device)
    _BroadcastPlus()(a, b).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(b.grad.numpy(), np.full(3, 4.0))
    assert not _BroadcastPlus.adjoints_fit and ndl.ops.EWiseAdd.adjoints_fit


class _CourseMatMul(ndl.autograd.TensorOp):
    """A student's batched MatMul as the course writes it: the rule uses Tensor methods
    (`transpose()` swaps the last two axes; a raw array's would reverse them all)."""

    def compute(self, a, b):
        return a @ b

    def gradient(self, out_grad, node):
        lhs, rhs = node.inputs
        return out_grad @ rhs.transpose(), lhs.transpose() @ out_grad


class _CourseReLU(ndl.autograd.TensorOp):
    def compute(self, a):
        xp = ndl.backends.namespace(a)
        return xp.where(a > 0, a, xp.zeros_like(a))

    def gradient(self, out_grad, node):  # reads the node's data as course code does
        mask = node.realize_cached_data().numpy() > 0
        return out_grad * ndl.Tensor(mask, device=out_grad.device, dtype=out_grad.dtype)


def test_a_user_ops_rule_gets_tensors_without_a_graph_too(device):
    """backward(create_graph=False) ran every rule on raw arrays: a course-style rule crashed
    (no realize_cached_data on the node) or, with a raw array's transpose, gave wrong
    gradients silently (train_ptb and evaluate use that backward)."""
    rng = np.random.default_rng(0)
    a, b = (ndl.Tensor(rng.standard_normal((2, 3, 3)), device=device) for _ in range(2))
    grads = []
    for create_graph in (True, False):
        _CourseReLU()(_CourseMatMul()(a, b)).sum().backward(create_graph=create_graph)
        grads.append((a.grad.numpy(), b.grad.numpy()))
    ones = np.ones((2, 3, 3))
    mask = (a.numpy() @ b.numpy() > 0).astype(np.float32)
    np.testing.assert_allclose(grads[0][0], (mask * ones) @ b.numpy().swapaxes(1, 2), rtol=1e-5)
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_array_equal(got, want)
    assert not _CourseMatMul.array_rules and ndl.ops.EWiseAdd.array_rules

    class Renamed(ndl.ops.EWiseAdd):  # a subclass that keeps needle's rule keeps its arrays
        pass

    assert Renamed.array_rules


def test_a_backward_that_frees_the_graph_lets_the_cross_entropy_reuse_its_exponentials(
        device, monkeypatch):
    """Not retained (create_graph=False's default): the gradient may be written over the
    forward's exp(logits - max), whose only holder is the node; retained or recorded: never,
    since a later backward reads them again."""
    import sys

    reduce = sys.modules["needle.ops.reduce"]
    real, given = reduce.SOFTMAX_XENT_GRAD, []
    monkeypatch.setattr(reduce, "SOFTMAX_XENT_GRAD",
                        lambda *a: (given.append(a[4]), real(*a))[1])
    grads = []
    for kwargs in ({"create_graph": False}, {"create_graph": False, "retain_graph": True}, {}):
        w, loss = _saving_model(device)
        loss.backward(**kwargs)
        grads.append(w.grad.numpy())
    assert given == [True, False, False]
    for g in grads[1:]:  # the same arithmetic, in place or not
        np.testing.assert_array_equal(g, grads[0])


def test_assigning_a_grad_of_another_shape_or_device_is_refused(device):
    """`.grad =` takes a Tensor of the tensor's shape and device, as PyTorch's does: a (200,)
    gradient given to a (3, 200) parameter was broadcast into the optimizer's update on some
    devices (and its state took the wrong shape) and failed obscurely on others."""
    p = ndl.nn.Parameter(ndl.init.zeros(3, 200, device=device))
    with pytest.raises(ValueError, match=r"shape \(200,\) to a tensor with shape \(3, 200\)"):
        p.grad = ndl.init.ones(200, device=device)
    other = ndl.strict() if device != ndl.strict() else ndl.cpu()
    if other.enabled():
        with pytest.raises(ValueError, match="device"):
            p.grad = ndl.init.ones(3, 200, device=other)
    with pytest.raises(TypeError, match="needle Tensor or None, got list"):
        p.grad = [[0.0] * 200] * 3
    assert p.grad is None
    opt = ndl.optim.Adam([p], lr=1.0)
    p.grad = ndl.Tensor(np.ones((3, 200)), device=device, dtype="float64")  # another float dtype
    opt.step()
    assert p.dtype == "float32" and p.shape == (3, 200)
    np.testing.assert_allclose(p.numpy(), -np.ones((3, 200)), rtol=1e-6)
    p.grad = None


def test_arrays_of_several_elements_are_constant_operands(device):
    """Course code mixes arrays into Tensor arithmetic (`Z - max_Z` with an NDArray,
    `out_grad * (a > 0)` with a numpy mask): they are constants of the tensor's device and
    dtype, broadcast as Tensors are, with no gradient of their own (a TypeError before)."""
    z = np.arange(6.0).reshape(2, 3) - 2
    x = ndl.Tensor(z, device=device, dtype="float32")
    m = x.realize_cached_data().max((1,), keepdims=True)  # an NDArray of shape (2, 1)
    cases = [(x - m, z - z.max(1, keepdims=True)), (x * (z > 0), z * (z > 0)),
             (np.ones((2, 1)) + x, 1 + z), (np.full(3, 2.0) - x, 2 - z),
             (x / np.full((2, 3), 4.0), z / 4), (np.full((2, 3), 3.0) / (x + 3), 3 / (z + 3)),
             (x.realize_cached_data() * x, z * z)]
    for y, expected in cases:
        assert y.dtype == "float32" and y.device == device
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    (x * (z > 0) - m).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (z > 0).astype(np.float32))
    other = ndl.strict() if device != ndl.strict() else ndl.cpu()
    if other.enabled() and other.kind != "cpu":
        with pytest.raises(ValueError, match="operand on"):
            x + other.asarray(z, dtype="float32")
    assert (x * np.array([2.0])).shape == (2, 3)  # one element: the scalar op, as before


class _ReturnsHostArray(ndl.autograd.TensorOp):
    def compute(self, a):
        return np.ones(tuple(a.shape), dtype=np.float32)

    def gradient(self, out_grad, node):
        return out_grad


class _ReturnsNDArray(ndl.autograd.TensorOp):
    def compute(self, a):  # as the course's NDArray-backend ops return
        return nd.full(tuple(a.shape), 2.0, device=ndl.backends.device_of(a))

    def gradient(self, out_grad, node):
        return out_grad


def test_what_a_user_ops_compute_returns_is_checked(device):
    """A numpy array returned on torch was stored in the Tensor and failed much later
    (KeyError: dtype('float32')); an NDArray is taken as its array."""
    x = ndl.Tensor(np.zeros(3), device=device, dtype="float32")
    np.testing.assert_array_equal(_ReturnsNDArray()(x).numpy(), [2.0, 2.0, 2.0])
    assert device.owns(_ReturnsNDArray()(x)._realize())
    if device.kind == "cpu":
        np.testing.assert_array_equal(_ReturnsHostArray()(x).numpy(), [1.0, 1.0, 1.0])
    else:
        with pytest.raises(TypeError, match=rf"_ReturnsHostArray.compute returned ndarray for "
                                            rf"inputs on {re.escape(str(device))}"):
            _ReturnsHostArray()(x)


def test_a_leaf_reached_only_through_rules_without_its_adjoint_loses_an_older_grad(device):
    """A gradient penalty on a ReLU net: the second pass reaches b only through ReLU's
    adjoint, whose rule gives its input no adjoint; b kept the first pass's gradient
    ([0, 1]) as if it were the penalty's. backward overwrites .grad, so b's is None."""
    def t(a):
        return ndl.Tensor(np.array(a), device=device, dtype="float32", requires_grad=True)
    x, w, b = t([[1.0, -2.0]]), t([[1.0, 1.0], [2.0, -1.0]]), t([0.5, 0.5])
    ndl.relu(x @ w + b).sum().backward(create_graph=True)
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 1.0])
    penalty = (x.grad ** 2).sum()
    penalty.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0.0, 2.0], [0.0, -2.0]])
    assert b.grad is None


def test_backward_of_a_tensor_that_requires_no_grad_raises(device):
    """A loss made under no_grad() (or with every parameter frozen): backward() did nothing,
    every .grad stayed None and the optimizer skipped them all. As PyTorch, a RuntimeError."""
    w = ndl.Tensor(np.ones((3, 2), dtype=np.float32), device=device, requires_grad=True)
    x = ndl.Tensor(np.ones((4, 3), dtype=np.float32), device=device, requires_grad=False)
    with ndl.no_grad():
        loss = (x @ w).sum()
    with pytest.raises(RuntimeError, match="backward: the tensor does not require grad"):
        loss.backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2.0).sum().backward(create_graph=False)
    assert w.grad is None


def test_numpy_asarray_of_a_tensor_is_its_data(device):
    """np.asarray(t) was an object array of 0-d Tensors (numpy walked __len__ and
    __getitem__); it is the data, a host copy, as `t.numpy()`."""
    t = ndl.Tensor(np.arange(6, dtype=np.float32).reshape(3, 2), device=device)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (3, 2)
    np.testing.assert_array_equal(a, np.arange(6).reshape(3, 2))
    assert np.array(t, dtype=np.float64).dtype == np.float64
    a[0, 0] = 100.0  # a copy: the tensor is unchanged
    assert t.numpy()[0, 0] == 0.0
    with pytest.raises(ValueError, match="cannot be taken without a copy"):
        t.__array__(copy=False)  # (numpy 2's np.asarray(t, copy=False))


def test_requires_grad_in_place_as_pytorchs(device):
    """(A port audit.) A gradient penalty's interpolated input, `x.requires_grad_()`."""
    x = ndl.Tensor(np.array([1.0, 2.0]), device=device, requires_grad=False)
    assert x.requires_grad_() is x and x.requires_grad
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    y = x * 2
    with pytest.raises(RuntimeError, match="only leaves change requires_grad"):
        y.requires_grad_(False)
    with pytest.raises(TypeError, match="requires_grad must be True or False"):
        x.requires_grad_("no")
    assert not x.requires_grad_(False).requires_grad


def test_a_user_rule_with_too_few_or_ill_shaped_adjoints_is_named(device):
    """(A port audit.) One adjoint for a two-input op left the second input without .grad,
    silently (PyTorch: "returned an incorrect number of gradients"); an ill-shaped one gave
    sum_to_shape's error, which named no op."""
    class Few(ndl.autograd.TensorOp):
        def compute(self, a, b):
            return a * b

        def gradient(self, out_grad, node):
            return out_grad * node.inputs[1]

    class Bent(Few):
        def gradient(self, out_grad, node):
            return ndl.ops.transpose(out_grad), out_grad

    a = ndl.Tensor(np.ones((3, 4)), device=device)
    b = ndl.Tensor(np.ones((3, 4)), device=device)
    for create_graph in (True, False):
        with pytest.raises(ValueError, match=r"Few.gradient returned 1 adjoint\(s\) for 2"):
            Few()(a, b).sum().backward(create_graph=create_graph)
        with pytest.raises(ValueError, match=r"Bent.gradient: the adjoint of input 0 does "
                                             r"not fit its shape \(3, 4\)"):
            Bent()(a, b).sum().backward(create_graph=create_graph)
