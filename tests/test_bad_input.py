"""Bad input to Tensors and ops: the same needle error on every device, naming what is wrong
(rule 4), where the error audit found silent casts, library errors or AttributeErrors."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl


def test_array_operands_must_fit_the_tensors_dtype(device):
    """int32 + np.array([0.5, 0.5]) dropped the fractions and 2**40 wrapped to 0, where the
    scalar forms raise."""
    t = ndl.Tensor([1, 2], device=device, dtype="int32")
    with pytest.raises(TypeError, match="an operand of dtype float64 for a tensor of dtype int32"):
        t + np.array([0.5, 0.5])
    with pytest.raises(ValueError, match=r"holds values out of the range of int32"):
        t + np.array([2**40, 0])
    if not device.defers_checks:  # the device's own integers too (one read; else deferred)
        big = ndl.Tensor([2**40, 0], device=device, dtype="int64").realize_cached_data()
        with pytest.raises(ValueError, match=r"int64 holds values out of the range of int32"):
            t + big
    with pytest.raises(TypeError, match="an operand of dtype complex128 for a tensor of dtype "
                                        "float32"):
        ndl.Tensor([1.0, 2.0], device=device, dtype="float32") + np.array([1j, 1j])
    np.testing.assert_array_equal((t + np.array([1, 2])).numpy(), [2, 4])  # int64 values fit
    f = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    np.testing.assert_array_equal((f * np.array([2, 3])).numpy(), [2.0, 6.0])


@pytest.mark.parametrize("data, dtype, match", [
    ([2**40, 300], "int32", "the value 1099511627776 does not fit dtype int32"),
    ([300, -1], "uint8", "the value -1 does not fit dtype uint8"),
    ([float("nan")], "int32", "NaN or infinity in data for an array of dtype int32"),
])
def test_data_out_of_an_integer_dtype_is_refused(data, dtype, match, device):
    """Tensor([2**40, 300], dtype="int32") gave [0, 300] (numpy's cast wraps)."""
    with pytest.raises(ValueError, match=match):
        ndl.Tensor(data, device=device, dtype=dtype)


def test_iterating_a_0d_tensor_is_a_type_error(device):
    """list(t) of a 0-d tensor gave [] (iteration fell back on __getitem__'s IndexError)."""
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        list(ndl.Tensor(1.0, device=device))
    rows = list(ndl.Tensor([[1.0, 2.0], [3.0, 4.0]], device=device))
    assert [r.numpy().tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0]]


def test_a_device_must_be_a_device():
    for call in (lambda: ndl.Tensor([1.0], device="cpu"), lambda: ndl.Tensor([1.0]).to("cpu"),
                 lambda: ndl.Tensor([1.0], device=np), lambda: ndl.init.zeros(2, device="cpu"),
                 lambda: ndl.nn.Linear(2, 2, device="cpu"),
                 lambda: ndl.init.kaiming_uniform(2, 3, device="cpu")):
        with pytest.raises(TypeError, match="device must be a needle Device"):
            call()


def test_functional_ops_name_an_operand_that_is_not_a_tensor(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    for other, kind in ((1.0, "float"), (None, "NoneType"), ("a", "str")):
        with pytest.raises(TypeError, match=f"EWiseAdd: input 1 is a {kind}, not a Tensor"):
            ndl.add(x, other)
        with pytest.raises(TypeError, match=f"EWiseAdd: input 0 is a {kind}, not a Tensor"):
            ndl.add(other, x)
    with pytest.raises(TypeError, match="stack: expected a sequence of tensors, got a Tensor"):
        ndl.stack(x, 0)
    with pytest.raises(TypeError, match="add_n: needs at least one tensor"):
        ndl.add_n()


def test_floating_functions_of_bools_and_astype_without_a_dtype(device):
    """torch's bool kernels raised NotImplementedError ("abs_cpu"); astype(x, None) gave
    float64 on cpu, float32 on torch and an AttributeError on strict."""
    b = ndl.Tensor([True, False], device=device)
    for fn in (ndl.sigmoid, ndl.exp, ndl.tanh):
        with pytest.raises(TypeError, match="needs a floating tensor, got bool"):
            fn(b)
    with pytest.raises(TypeError, match="astype: dtype must be given"):
        ndl.ops.astype(ndl.Tensor([1.0], device=device), None)


def test_stack_of_a_tensor_tuple_still_works(device):
    """The course's Split rule is `stack(out_grad, axis)` with a TensorTuple."""
    x = ndl.Tensor(np.arange(6.0).reshape(3, 2), device=device, dtype="float32")
    out = ndl.stack(ndl.ops.split(x, 0), 1)
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0).reshape(3, 2).T)


@pytest.mark.parametrize("data, dtype, match", [
    (np.array([300]), "uint8", "the value 300 does not fit dtype uint8"),  # the device's own
    (np.array([np.nan, 300.0]), "int32", "NaN or infinity"),
    (np.array([2.0**63]), "int64", "does not fit dtype int64"),  # (rounds to int64's max)
    (np.array([2.0**31], dtype=np.float32), "int32", "does not fit dtype int32"),
])
def test_arrays_out_of_an_integer_dtype_are_refused_too(data, dtype, match, device):
    """On cpu numpy arrays are the device's own and skipped the check; a float at the limit
    compared equal to it."""
    if device.defers_checks:
        pytest.skip("an accelerator's own arrays are not read")
    with pytest.raises(ValueError, match=match):
        ndl.Tensor(data, device=device, dtype=dtype)
    with pytest.raises(TypeError, match="complex data for an array of dtype int32"):
        ndl.Tensor(np.array([1 + 2j]), device=device, dtype="int32")
    np.testing.assert_array_equal(ndl.Tensor(np.array([2.0**31 - 1]), device=device,
                                             dtype="int32").numpy(), [2**31 - 1])


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # (cast, then read)
@pytest.mark.parametrize("data, dtype, match", [
    (np.array([300, 1]), "uint8", r"int64 holds values out of the range of dtype uint8 "
                                  r"\[0, 255\]$"),
    (np.array([np.nan, 3.0]), "int32", "out of the range of dtype int32 .* NaN or infinity"),
    (np.array([2.0**31], dtype=np.float32), "int32", "float32 holds values out of the range"),
])
def test_an_accelerators_own_arrays_out_of_an_integer_dtype_fail_at_the_next_read(
        data, dtype, match, device, monkeypatch):
    """(A GPU audit.) An accelerator's own array made a tensor of an integer dtype it does
    not fit was cast without a check (300 as uint8: 44 on cuda): the check is deferred to
    the next read, as the index checks are."""
    monkeypatch.setattr(type(device), "defers_checks", True)
    device._pending = []
    if device.kind == "jax" and data.dtype.itemsize == 8 and not device.x64:
        pytest.skip("jax without x64 holds no 64-bit data")
    own = device.asarray(data)
    t = ndl.Tensor(own, device=device, dtype=dtype)  # no read here
    with pytest.raises(ValueError, match=match):
        t.numpy()
    assert device._pending == []
    fits = ndl.Tensor(device.asarray(np.array([255, 0])), device=device, dtype="uint8")
    np.testing.assert_array_equal(fits.numpy(), [255, 0])


def test_a_user_rule_returning_another_librarys_array_is_named(device):
    class Triple(ndl.autograd.TensorOp):
        def compute(self, a):
            return a * 3

        def gradient(self, out_grad, node):
            return ndl.backend_ndarray.NDArray(out_grad.numpy() * 3, device=ndl.cpu())

    for create_graph in (True, False):
        w = ndl.Tensor(np.ones(3), device=device, dtype="float32")
        if device.kind == "cpu":  # an NDArray of the node's device is taken as a constant
            Triple()(w).sum().backward(create_graph=create_graph)
            np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0, 3.0])
        else:
            with pytest.raises(TypeError, match="Triple.gradient returned NDArray for a node"):
                Triple()(w).sum().backward(create_graph=create_graph)


def test_ndarray_writes_follow_the_operand_rules(device):
    t = ndl.Tensor(np.zeros((2, 3)), device=device, dtype="int32")
    with pytest.raises(ValueError, match="out of the range of int32"):
        t.realize_cached_data()[:] = np.full((2, 3), 2**40)
    with pytest.raises(TypeError, match="an operand of dtype float64 for a tensor of dtype int32"):
        t.realize_cached_data()[:] = np.full((2, 3), 0.7)
    t.realize_cached_data()[:] = np.full((2, 3), 5)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 5))


def test_manual_seed_takes_integers_only():
    with pytest.raises(TypeError):
        ndl.manual_seed(1.7)


def test_matmul_of_a_list_names_it(device):
    """`x @ [[1.0]]` and `ndl.matmul([[1.0]], x)` were AttributeErrors ('list' object has no
    attribute 'ndim'); they are MatMul's TypeError naming the operand."""
    x = ndl.Tensor(np.ones((2, 1), dtype=np.float32), device=device)
    with pytest.raises(TypeError, match="MatMul: input 1 is a list, not a Tensor"):
        x @ [[1.0]]
    with pytest.raises(TypeError, match="MatMul: input 0 is a list, not a Tensor"):
        ndl.matmul([[1.0]], x)


def test_big_endian_host_arrays_become_native(device):
    """A '>f4' numpy array made a cpu Tensor of dtype '>f4' (not "float32": `t * 2` raised a
    misleading TypeError) and failed with each library's own error on the other devices: it
    is converted to the native byte order, the same values on every device."""
    for little, big in [(np.float32, ">f4"), (np.int32, ">i4"), (np.float64, ">f8")]:
        data = np.array([[1, -2], [3, 4]], dtype=big)
        t = ndl.Tensor(data, device=device, dtype=None)
        native = ndl.Tensor(data.astype(little), device=device, dtype=None)  # (jax: 32 bits)
        assert t.dtype == native.dtype and t.numpy().dtype == native.numpy().dtype
        assert t.numpy().dtype.isnative
        np.testing.assert_array_equal(t.numpy(), [[1, -2], [3, 4]])
        np.testing.assert_array_equal((t * 2).numpy(), [[2, -4], [6, 8]])
    t = ndl.Tensor(np.array([[1.0, 2.0]], dtype=">f4"), device=device)
    assert t.dtype == "float32"
    np.testing.assert_array_equal((t + np.array([[1.0, 1.0]], dtype=">f8")).numpy(), [[2, 3]])
    x = device.asarray(np.array([0.5, 1.5], dtype=">f4"))
    assert ndl.Tensor(x, device=device).dtype == "float32"
