"""needle.backend_ndarray: the course's `nd` names (array, NDArray, device factories)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
import needle.backend_ndarray as nd


def test_array_makes_a_float32_array_of_the_device(device):
    a = nd.array([[1, 2], [3, 4]], device=device)
    assert device.owns(a) and device.public_dtype(a.dtype) == np.float32
    np.testing.assert_array_equal(device.to_numpy(a), [[1, 2], [3, 4]])
    # from a numpy array and from another device's array alike
    b = nd.array(np.arange(3, dtype=np.int64), device=device)
    assert device.owns(b) and device.public_dtype(b.dtype) == np.float32
    c = nd.array(nd.array([0.5, 1.5], device=ndl.cpu()), device=device)
    np.testing.assert_array_equal(device.to_numpy(c), [0.5, 1.5])


@pytest.mark.parametrize("dtype, data, expected", [
    ("float64", [1.0, 2.0], np.float64),
    ("int32", [1, 2], np.int32),
    (np.float64, np.ones(2, np.float32), np.float64),
    (None, np.ones(2, np.float64), np.float64),  # None keeps the input's dtype
    (None, [1, 2], np.int64),
])
def test_array_dtypes(device, dtype, data, expected):
    a = nd.array(data, dtype=dtype, device=device)
    assert device.owns(a) and device.public_dtype(a.dtype) == expected


def test_array_defaults_to_the_default_device():
    a = nd.array([1.0, 2.0])
    assert ndl.default_device().owns(a) and type(a) is np.ndarray and a.dtype == np.float32
    source = np.ones(2, np.float32)
    assert nd.array(source) is not source  # a copy, as the course's array() makes


def test_ndarray_isinstance_holds_for_every_devices_arrays(device):
    assert isinstance(device.zeros(2), nd.NDArray)
    assert isinstance(nd.array([1.0], device=device), nd.NDArray)
    x = ndl.Tensor([1.0, 2.0], device=device)
    assert isinstance(x.cached_data, nd.NDArray)
    assert isinstance(x.sum().realize_cached_data(), nd.NDArray)  # 0-d results too
    assert isinstance(device.zeros(2, dtype="bool"), nd.NDArray)


@pytest.mark.parametrize("obj", [
    [1.0, 2.0], 1, 2.5, None, "abc", np.array(["a"]), np.array([object()]), np.float32,
    np.dtype("float32"),
])
def test_ndarray_isinstance_is_false_for_other_objects(obj):
    assert not isinstance(obj, nd.NDArray)


def test_ndarray_isinstance_is_false_for_tensors(device):
    assert not isinstance(ndl.Tensor([1.0], device=device), nd.NDArray)


def test_ndarray_isinstance_recognises_cupy_arrays_by_their_type():
    # stand-ins named like cupy's classes: the check must not import cupy or touch a GPU
    fake_array = type("ndarray", (), {"__module__": "cupy._core.core"})
    fake_stream = type("Stream", (), {"__module__": "cupy.cuda.stream"})
    assert isinstance(fake_array(), nd.NDArray)
    assert not isinstance(fake_stream(), nd.NDArray)


def test_ndarray_constructor_is_the_courses(device):
    a = nd.NDArray(np.arange(4, dtype=np.int64).reshape(2, 2), device=device)
    assert device.owns(a) and device.public_dtype(a.dtype) == np.float32
    assert isinstance(a, nd.NDArray)
    assert type(nd.NDArray([1, 2])) is np.ndarray  # default device


def test_course_names_resolve_to_the_one_ndarray_class():
    for module in (ndl, ndl.autograd, ndl.ops, nd):
        assert module.NDArray is nd.NDArray
        assert module.array_api is ndl.default_device().xp
    from needle.ops import NDArray

    assert NDArray is nd.NDArray


def test_device_factories_are_needles():
    assert nd.cpu() is ndl.cpu() and nd.cpu_numpy() is ndl.cpu()
    assert nd.cuda() is ndl.cuda() and nd.cuda(1) is ndl.cuda(1)
    assert nd.default_device() is ndl.default_device()
    assert all(hasattr(nd, name) for name in nd.__all__)


def test_import_and_isinstance_start_no_device(tmp_path):
    code = ("import sys; import numpy as np; import needle.backend_ndarray as nd; "
            "import needle; "
            "assert isinstance(np.zeros(2), nd.NDArray) and not isinstance([1], nd.NDArray); "
            "assert 'cupy' not in sys.modules, 'cupy imported'; "
            "assert 'array_api_strict' not in sys.modules, 'array-api-strict imported'; "
            "assert all(d._xp is None for d in needle.all_devices()), 'a device was loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)
