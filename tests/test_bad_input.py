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
    with pytest.raises(ValueError, match=r"holds 1099511627776, out of the range of int32"):
        t + np.array([2**40, 0])
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
                 lambda: ndl.Tensor([1.0], device=np)):
        with pytest.raises(TypeError, match="device must be a needle Device"):
            call()


def test_functional_ops_name_an_operand_that_is_not_a_tensor(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    for other, kind in ((1.0, "float"), (None, "NoneType"), ("a", "str")):
        with pytest.raises(TypeError, match=f"EWiseAdd: input 1 is a {kind}, not a Tensor"):
            ndl.add(x, other)
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
