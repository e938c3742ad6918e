"""Mixed dtypes follow one rule on every device: the array API's promotion table, a TypeError
naming both dtypes where it has no entry (see ops/dtypes.py and the README)."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn

# (dtype a, dtype b, result): the array API standard's table, written out by hand
PROMOTING = [
    ("float32", "float64", "float64"),
    ("int32", "int64", "int64"),
    ("int8", "int16", "int16"),
    ("int16", "int64", "int64"),
    ("uint8", "int8", "int16"),
    ("uint16", "int8", "int32"),
    ("uint32", "int64", "int64"),
    ("bool", "float32", "float32"),  # a mask, as numpy, torch and jax allow
    ("int16", "bool", "int16"),
]
# pairs with no entry: floating with integer, uint64 with a signed integer
MIXING = [
    ("float32", "int64"),
    ("float32", "int32"),
    ("float64", "uint8"),
    ("int16", "float64"),
    ("uint64", "int64"),
]
BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "add (function)": ndl.add,
    "multiply (function)": ndl.multiply,
    "add_n": lambda a, b: ndl.add_n(a, b),
    "stack": lambda a, b: ndl.stack([a, b], 0),
}


def tensor(values, dtype, device, requires_grad=False):
    if device.kind == "torch" and dtype in ("uint16", "uint32", "uint64"):
        pytest.skip(f"torch only stores {dtype} (no arithmetic): the torch device refuses it")
    return ndl.Tensor(np.asarray(values), device=device, dtype=dtype,
                      requires_grad=requires_grad)


@pytest.mark.parametrize("a, b, result", PROMOTING)
@pytest.mark.parametrize("op", list(BINARY))
def test_same_kind_promotes_by_the_table(a, b, result, op, device):
    x, y = tensor([1, 2], a, device), tensor([3, 4], b, device)
    for out in (BINARY[op](x, y), BINARY[op](y, x)):
        assert out.dtype == result
        assert out.numpy().dtype == np.dtype(result)


@pytest.mark.parametrize("a, b", MIXING)
@pytest.mark.parametrize("op", list(BINARY) + ["divide", "power", "matmul"])
def test_mixed_kinds_raise_a_type_error_naming_both(a, b, op, device):
    fn = BINARY.get(op) or {"divide": lambda a, b: a / b, "power": lambda a, b: a**b,
                            "matmul": lambda a, b: a @ b}[op]
    x, y = tensor([[1, 0], [0, 1]], a, device), tensor([[1, 1], [0, 1]], b, device)
    with pytest.raises(TypeError, match=f"dtypes {a} and {b} do not combine"):
        fn(x, y)


def test_floats_promote_in_divide_power_and_matmul(device):
    x = tensor([[1.0, 2.0], [3.0, 4.0]], "float32", device)
    y = tensor([[2.0, 1.0], [1.0, 2.0]], "float64", device)
    for out in (x / y, y / x, x**y, x @ y, y @ x):
        assert out.dtype == "float64"
    np.testing.assert_allclose((x @ y).numpy(), x.numpy().astype(np.float64) @ y.numpy())


@pytest.mark.parametrize("create_graph", [True, False])
def test_float64_input_into_a_float32_linear(create_graph, device):
    """float64 data promotes the layer's output (torch's matmul used to raise); the weights'
    gradients keep the weights' dtype (as PyTorch's engine casts them)."""
    np.random.seed(0)
    layer = nn.Linear(3, 2, device=device)
    x = np.random.randn(4, 3)
    out = layer(tensor(x, "float64", device, requires_grad=True))
    assert out.dtype == "float64"
    w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    np.testing.assert_allclose(out.numpy(), x @ w + b, rtol=1e-12)
    out.sum().backward(create_graph=create_graph)
    assert layer.weight.grad.dtype == "float32" and layer.bias.grad.dtype == "float32"
    np.testing.assert_allclose(layer.weight.grad.numpy(),
                               np.broadcast_to(x.sum(0)[:, None], (3, 2)), rtol=1e-6)
    np.testing.assert_allclose(layer.bias.grad.numpy(), [[4.0, 4.0]])


@pytest.mark.parametrize("create_graph", [True, False])
def test_promoted_operands_get_gradients_of_their_own_dtype(create_graph, device):
    a = tensor([1.5, 2.0], "float32", device, requires_grad=True)
    b = tensor([3.0, -1.0], "float64", device, requires_grad=True)
    (a * b + a).sum().backward(create_graph=create_graph)
    assert a.grad.dtype == "float32" and b.grad.dtype == "float64"
    np.testing.assert_allclose(a.grad.numpy(), [4.0, 0.0])
    np.testing.assert_allclose(b.grad.numpy(), [1.5, 2.0])


def test_python_scalars_take_the_tensors_dtype(device):
    f = tensor([1.0, 2.0], "float32", device)
    i = tensor([1, 2], "int32", device)
    for out in (f * 2, f + 2.5, 3 - f, f / 2, f**2, 2.0**f, f * True):
        assert out.dtype == "float32"
    for out in (i * 3, i + 1, 2 - i, i**2, i * True):
        assert out.dtype == "int32"
    np.testing.assert_array_equal((i * 3).numpy(), [3, 6])


@pytest.mark.parametrize("fn, match", [
    (lambda i: i * 2.5, "the scalar 2.5 with a tensor of dtype int32"),
    (lambda i: i + 0.5, "the scalar 0.5 with a tensor of dtype int32"),
    (lambda i: i / 2, "int32: true division needs a floating tensor"),
    (lambda i: i / i, "true division needs floating tensors, got int32"),
    (lambda i: 1 / i, "the scalar 1 over a tensor of dtype int32: true division needs a"),
    (lambda i: 2.5 / i, "the scalar 2.5 over a tensor of dtype int32: true division"),
    (lambda i: 2.5**i, "the scalar 2.5 with a tensor of dtype int32"),
    (lambda i: ndl.exp(i), "exp: needs a floating tensor, got int32"),
    (lambda i: ndl.log(i), "log: needs a floating tensor, got int32"),
    (lambda i: ndl.tanh(i), "tanh: needs a floating tensor, got int32"),
    (lambda i: ndl.sigmoid(i), "sigmoid: needs a floating tensor, got int32"),
    (lambda i: i / 2**40, "int32: true division needs a floating tensor"),  # not its range
    (lambda i: ndl.logsumexp(i), "logsumexp: needs a floating tensor, got int32"),
    (lambda i: ndl.logsoftmax(i), "logsoftmax: needs a floating tensor, got int32"),
    (lambda i: ndl.softmax(i), "softmax: needs a floating tensor, got int32"),
    (lambda i: ndl.softmax(i, 2.0), "softmax: needs a floating tensor, got int32"),
    (lambda i: ndl.softmax_cross_entropy(ndl.reshape(i, (1, 2)),
                                         i.device.asarray([1], dtype="int64")),
     "softmax_cross_entropy: needs a floating tensor, got int32"),
    (lambda i: ndl.ops.avg_pool2d(ndl.reshape(i, (1, 1, 1, 2)), 1),
     "avg_pool2d: needs a floating tensor, got int32"),
])
def test_what_an_integer_tensor_cannot_do_is_a_type_error(fn, match, device):
    with pytest.raises(TypeError, match=match):
        fn(tensor([1, 2], "int32", device))


def test_a_bool_mask_takes_the_tensors_dtype_and_its_gradient(device):
    """Course code's dropout: x * init.randb(...) / (1 - p)."""
    x = tensor([1.5, -2.0, 3.0], "float32", device, requires_grad=True)
    mask = tensor([True, False, True], "bool", device)
    out = x * mask / 0.5
    assert out.dtype == "float32"
    np.testing.assert_array_equal(out.numpy(), [3.0, 0.0, 6.0])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 2.0])


def test_bool_tensors_take_no_scalar_arithmetic(device):
    with pytest.raises(TypeError, match="bool tensors take no part in arithmetic"):
        tensor([True, False], "bool", device) + 1


def test_astype_is_differentiable(device):
    a = tensor([1.25, -2.0], "float64", device, requires_grad=True)
    out = ndl.astype(a, "float32")
    assert out.dtype == "float32"
    (out * 3.0).sum().backward()
    assert a.grad.dtype == "float64"
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "int64"])
def test_integer_tensors_to_non_negative_powers_stay_integers(dtype, device):
    i = tensor([1, 2, 3], dtype, device)
    for power, expected in ((0, [1, 1, 1]), (1, [1, 2, 3]), (3, [1, 8, 27])):
        out = i**power
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("deferred", [False, True], ids=["device's own", "deferred"])
def test_integer_tensor_exponents_with_negative_entries_raise_on_every_device(device, deferred,
                                                                             monkeypatch):
    """numpy refuses integers to negative integer powers; torch and jax gave 2 ** -1 = 0. On
    an accelerator (`defers_checks`: cuda, torch:cuda, jax on a GPU) the check waits for the
    next read to the host, so each case reads its result; "deferred" makes any device wait."""
    if deferred and device.kind in ("cpu", "strict"):
        pytest.skip("numpy and array-api-strict refuse the power themselves, before any check")
    if deferred:
        monkeypatch.setattr(type(device), "defers_checks", True)
    x = tensor([-1, 0, 2], "int32", device)
    two = tensor([2, 2, 2], "int32", device)
    for call, who in [(lambda: 2 ** x, "rpower_scalar"), (lambda: ndl.power(two, x), "power")]:
        with pytest.raises(ValueError, match=f"{who}: an integer tensor to negative integer "
                                             "powers"):
            call().numpy()
    ok = tensor([0, 1, 2], "int32", device)
    np.testing.assert_array_equal((2 ** ok).numpy(), [1, 2, 4])
    np.testing.assert_array_equal(ndl.power(two, ok).numpy(), [1, 2, 4])
    step = ndl.compile(lambda e: 3 ** e)  # the check runs again at each replay
    np.testing.assert_array_equal(step(ok).numpy(), [1, 3, 9])
    with pytest.raises(ValueError, match="rpower_scalar: an integer tensor to negative"):
        step(x).numpy()


@pytest.mark.parametrize("dtype, fn, scalar", [
    ("int32", lambda i, s: i + s, 2**40),
    ("int32", lambda i, s: i - s, 2**40),
    ("int32", lambda i, s: s - i, -(2**40)),
    ("int8", lambda i, s: i * s, 300),
    ("int8", lambda i, s: i + s, -129),
    ("uint8", lambda i, s: i * s, -1),
    ("uint8", lambda i, s: i + s, 256),
    ("uint8", lambda i, s: i**s, 256),
    ("int16", lambda i, s: s**i, 2**15),
    ("int64", lambda i, s: i + s, 2**63),
    ("uint64", lambda i, s: i * s, 2**64),
    ("int64", lambda i, s: i * s, np.uint64(2**63)),
    ("int8", lambda i, s: i - s, -128),  # x - c is x + (-c): 128 (numpy's x - (-128) wraps)
])
def test_python_ints_outside_the_dtype_are_a_value_error(dtype, fn, scalar, device):
    """numpy and strict raise OverflowError, torch and jax would wrap (int8 * 300 = -124)."""
    i = tensor([3, 0], dtype, device)
    with pytest.raises(ValueError, match=rf"the scalar -?{abs(int(scalar))} is out of the "
                                         rf"range of {dtype}"):
        fn(i, scalar)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_subtracting_from_unsigned_integers_wraps_as_numpy(dtype, device):
    """x - 1 is added as -1, which no unsigned dtype holds: subtracted instead, it wraps as
    numpy's (and every library's) unsigned arithmetic does."""
    if device.kind == "torch" and dtype != "uint8":
        pytest.skip(f"PyTorch has no addition for {dtype}")
    i = tensor([3, 0], dtype, device)
    top = np.iinfo(dtype).max
    for out, expected in ((i - 1, [2, top]), (i + (-1), [2, top]), (i - top, [4, 1]),
                          (i + (-top), [4, 1])):
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.numpy(), np.array(expected, dtype=dtype))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_the_ends_of_a_signed_range_are_python_ints_it_takes(dtype, device):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    i = tensor([0, -1], dtype, device)
    np.testing.assert_array_equal((i + hi).numpy(), np.array([hi, hi - 1], dtype))
    np.testing.assert_array_equal((i + lo).numpy(), np.array([lo, hi], dtype))  # wraps
    np.testing.assert_array_equal((i - hi).numpy(), np.array([-hi, lo], dtype))
    np.testing.assert_array_equal((i * lo).numpy(), np.array([0, lo], dtype))
    np.testing.assert_array_equal((i**hi).numpy(), np.array([0, -1], dtype))


def test_sums_of_bools_count_in_the_default_integer(device):
    """An accuracy count, (a == b).sum(): int64 everywhere (strict refused bools)."""
    m = tensor([[True, False], [True, True]], "bool", device)
    empty = tensor([], "bool", device)
    for out, expected in ((m.sum(), 3), (ndl.summation(m, axes=(0,)), [2, 1]),
                          (ndl.summation(m, axes=1), [1, 2]), (empty.sum(), 0)):
        assert out.dtype == "int64"  # (jax without x64: int32, its default integer)
        np.testing.assert_array_equal(out.numpy(), expected)


def test_max_of_bools_is_any(device):
    """numpy's, PyTorch's and jax's max of bools is a bool (strict refused them)."""
    m = tensor([[True, False], [False, False]], "bool", device)
    for out, expected in ((ndl.ops.max(m), True), (ndl.ops.max(m, axes=1), [True, False]),
                          (ndl.ops.max(m, axes=(1,), keepdims=True), [[True], [False]])):
        assert out.dtype == "bool"
        np.testing.assert_array_equal(out.numpy(), expected)


def test_bool_tensors_add_and_multiply_as_logical_or_and(device):
    """numpy, PyTorch and jax take b + b and b * b as or and and (strict refused them)."""
    a = tensor([True, True, False, False], "bool", device)
    b = tensor([True, False, True, False], "bool", device)
    for out, expected in ((a + b, [1, 1, 1, 0]), (ndl.add(a, b), [1, 1, 1, 0]),
                          (ndl.add_n(a, b, b), [1, 1, 1, 0]), (a * b, [1, 0, 0, 0]),
                          (ndl.multiply(a, b), [1, 0, 0, 0])):
        assert out.dtype == "bool"
        np.testing.assert_array_equal(out.numpy(), np.array(expected, bool))
    pooled = ndl.ops.max_pool2d(ndl.reshape(a, (1, 1, 2, 2)), 2)  # a max of bools: any
    assert pooled.dtype == "bool" and pooled.numpy().item() is True


@pytest.mark.parametrize("op, fn", [
    ("negate", lambda b: -b),
    ("negate", lambda b: b - b),
    ("negate", lambda b: 1 - b),
    ("power", lambda b: b**b),
    ("power", lambda b: ndl.power(b, b)),
    ("relu", ndl.relu),
    ("matmul", lambda b: ndl.reshape(b, (1, 2)) @ ndl.reshape(b, (2, 1))),
    ("conv", lambda b: ndl.conv(ndl.reshape(b, (1, 2, 1, 1)), ndl.reshape(b[:1], (1, 1, 1, 1)))),
    ("power_scalar", lambda b: b**-1),
    ("power_scalar", lambda b: b**2),
    ("power_scalar", lambda b: 2 / b),
    ("add_scalar", lambda b: 1 + b),
    ("divide", lambda b: b / b[:1]),
])
def test_other_arithmetic_on_bool_tensors_is_a_type_error_naming_the_op(op, fn, device):
    """numpy gave int8 for b ** b, jax int32, torch and strict raw errors; -b: raw errors."""
    with pytest.raises(TypeError, match=rf"^{op}\b.*\bbool\b"):
        fn(tensor([True, False], "bool", device))


@pytest.mark.parametrize("fn, power", [
    (lambda i: i**-1, -1),
    (lambda i: i**-3, -3),
])
@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_integer_tensors_to_negative_int_powers_are_a_value_error(fn, power, dtype, device):
    """As with negative tensor exponents and 2 ** x (README); a Python int power was a
    TypeError."""
    with pytest.raises(ValueError, match=rf"power_scalar: the {dtype} tensor to the negative "
                                         rf"power {power}"):
        fn(tensor([1, 2], dtype, device))
