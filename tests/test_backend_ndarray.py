"""needle.backend_ndarray: the course's `nd` names (array, NDArray, device factories)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
import needle.backend_ndarray as nd


def test_array_makes_a_float32_ndarray_of_the_device(device):
    a = nd.array([[1, 2], [3, 4]], device=device)
    assert type(a) is nd.NDArray and a.device == device and device.owns(a._array)
    assert a.dtype == np.float32 and a.dtype == "float32"
    np.testing.assert_array_equal(a.numpy(), [[1, 2], [3, 4]])
    # from a numpy array, from another device's NDArray and from a raw array alike
    b = nd.array(np.arange(3, dtype=np.int64), device=device)
    assert device.owns(b._array) and b.dtype == np.float32
    c = nd.array(nd.array([0.5, 1.5], device=ndl.cpu()), device=device)
    np.testing.assert_array_equal(c.numpy(), [0.5, 1.5])
    d = nd.array(device.asarray([2.5]))
    assert d.device == device and d.numpy().tolist() == [2.5]


@pytest.mark.parametrize("dtype, data, expected", [
    ("float64", [1.0, 2.0], np.float64),
    ("int32", [1, 2], np.int32),
    (np.float64, np.ones(2, np.float32), np.float64),
    (None, np.ones(2, np.float64), np.float64),  # None keeps the input's dtype
    (None, [1, 2], np.int64),
])
def test_array_dtypes(device, dtype, data, expected):
    a = nd.array(data, dtype=dtype, device=device)
    assert device.owns(a._array) and a.dtype == expected


def test_array_defaults_to_the_default_device():
    a = nd.array([1.0, 2.0])
    assert a.device == ndl.default_device() and type(a._array) is np.ndarray
    assert a.dtype == np.float32
    source = np.ones(2, np.float32)
    assert nd.array(source)._array is not source  # a copy, as the course's array() makes


def test_ndarray_isinstance_holds_for_every_devices_arrays(device):
    assert isinstance(device.zeros(2), nd.NDArray)
    assert isinstance(nd.array([1.0], device=device), nd.NDArray)
    assert isinstance(nd.array([1.0], device=device)._array, nd.NDArray)
    x = ndl.Tensor([1.0, 2.0], device=device)
    assert isinstance(x.cached_data, nd.NDArray) and isinstance(x._array, nd.NDArray)
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
    assert type(a) is nd.NDArray and device.owns(a._array) and a.dtype == np.float32
    assert isinstance(a, nd.NDArray) and a.device == device
    assert nd.NDArray([1, 2]).device == ndl.default_device()  # lists: the default device
    # an NDArray or a device's array keeps its device; the result is a float32 copy
    b = nd.NDArray(a)
    assert b.device == device and b._array is not a._array
    c = nd.NDArray(device.asarray(np.ones(2, np.float64)))
    assert c.device == device and c.dtype == np.float32
    np.testing.assert_array_equal(nd.NDArray(a, device=ndl.cpu()).numpy(), [[0, 1], [2, 3]])


def test_ndarray_pad_as_in_the_course(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    padded = nd.NDArray(x, device=device).pad(((0, 0), (1, 1)))
    assert type(padded) is nd.NDArray and padded.shape == (2, 5)
    np.testing.assert_array_equal(padded.numpy(), np.pad(x, ((0, 0), (1, 1))))
    with pytest.raises(ValueError, match="pairs"):
        nd.NDArray(x, device=device).pad(((1, 1),))


def test_compact_copies_a_permuted_sliced_or_broadcast_view(device):
    """(A course-port audit.) compact() returned the view itself and is_compact() was always
    True, so a write to a compacted permuted view reached the tensor (the course copies)."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ndl.Tensor(data, device=device)
    a = t.realize_cached_data()
    for view in (a.permute((1, 0)), a[0:1, 1:3], a[0:1].broadcast_to((2, 3)),
                 a.permute((1, 0)).reshape((6,)), a[::-1, :]):
        assert not view.is_compact()
        c = view.compact()
        assert c is not view and c.is_compact()
        np.testing.assert_array_equal(c.numpy(), view.numpy())
        c[(0,) * c.ndim] = 100.0
    np.testing.assert_array_equal(t.numpy(), data)  # the copies' writes stayed there
    for same in (a, a.reshape((3, 2)), a[:, :], a.permute((0, 1)), a.broadcast_to((2, 3))):
        assert same.is_compact() and same.compact() is same
    whole = a.reshape((3, 2))
    whole[0:1, 0:1] = 7.0  # a compact view writes through, as before
    assert t.numpy()[0, 0] == 7.0


def test_a_one_element_cached_data_is_a_number_as_the_courses_numpy_one(device):
    """(A course-port audit.) hw2's epoch() sums `loss.cached_data * n` and the course's test
    makes np.array of the results: float(), item(), formats and np.array of a list failed."""
    loss = ndl.Tensor(np.array([1.5, 2.5], np.float32), device=device).sum().cached_data
    total = loss * 3
    np.testing.assert_array_equal(np.array([total / 3, 0.5]), [4.0, 0.5])
    assert float(loss) == 4.0 and loss.item() == 4.0 and int(loss) == 4
    assert f"{loss:.3f}" == "4.000" and f"{loss}" == str(loss)
    many = ndl.Tensor(np.ones((2, 2)), device=device).cached_data
    with pytest.raises(ValueError, match="size 1"):
        float(many)


def test_cached_data_has_the_courses_ndarray_surface(device):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = ndl.Tensor(data, device=device, requires_grad=True)
    for a in (t.cached_data, t.realize_cached_data()):
        assert type(a) is nd.NDArray and a._array is t._array  # a view: no copy
        np.testing.assert_array_equal(a.numpy(), data)
        assert a.shape == (2, 3, 4) and a.dtype == "float32" and a.device == device
        assert a.ndim == 3 and a.size == 24 and len(a) == 2
    a = t.cached_data
    assert a.compact() is a and a.is_compact()
    checks = [
        (a.reshape((6, 4)), data.reshape(6, 4)),
        (a.permute((2, 0, 1)), data.transpose(2, 0, 1)),
        (a[:1].broadcast_to((3, 3, 4)), np.broadcast_to(data[:1], (3, 3, 4))),
        (a.flip((0, 2)), data[::-1, :, ::-1]),
        (a.pad(((0, 0), (1, 0), (0, 2))), np.pad(data, ((0, 0), (1, 0), (0, 2)))),
        (a[1, 0:3:2, -1], data[1:2, 0:3:2, 3:4]),  # an int keeps its axis, as in the course
        (a[1], data[1:2]),
        (a[:, ::-1], data[:, ::-1]),
        (a + 1, data + 1), (2 - a, 2 - data), (a * a, data * data), (a / 2, data / 2),
        (-a, -data), (a ** 2, data ** 2), (a.reshape((6, 4)) @ a.reshape((4, 6)),
                                           data.reshape(6, 4) @ data.reshape(4, 6)),
        (a > 5, (data > 5).astype(np.float32)), (a == 3, (data == 3).astype(np.float32)),
        (a.sum(axis=1), data.sum(axis=1)), (a.max(axis=2, keepdims=True),
                                             data.max(axis=2, keepdims=True)),
        (a.maximum(7.0), np.maximum(data, 7)), (a.exp().log(), np.log(np.exp(data))),
        (a.tanh(), np.tanh(data)),
    ]
    for got, expected in checks:
        assert type(got) is nd.NDArray and got.device == device
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
        assert got.numpy().dtype == np.float32
    np.testing.assert_array_equal(np.asarray(a), data)  # __array__, for numpy's functions
    np.testing.assert_array_equal(np.abs(-a), data)
    with pytest.raises(TypeError, match="read-only"):  # writes: tests/test_ndarray_writes.py
        a.broadcast_to((2, 2, 3, 4))[0, 0, 0, 0] = 1.0
    with pytest.raises(IndexError):
        a[2]


def test_grad_and_tuple_cached_data_are_ndarrays(device):
    x = ndl.Tensor([[1.0, 2.0], [3.0, 4.0]], device=device, dtype="float32")
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.cached_data.numpy(), [[2, 4], [6, 8]])
    parts = ndl.ops.split(x, 0).realize_cached_data()
    assert isinstance(parts, tuple) and all(type(p) is nd.NDArray for p in parts)
    np.testing.assert_array_equal(parts[1].numpy(), [3, 4])


def test_course_code_can_build_tensors_from_ndarrays(device):
    w = ndl.Tensor([[1.0, -2.0]], device=device, dtype="float32", requires_grad=True)
    view = w.cached_data
    for t in (ndl.Tensor(view), ndl.Tensor.make_const(view), ndl.Tensor(nd.array([[1.0, -2.0]],
                                                                                 device=device))):
        assert t.device == device and device.owns(t._array)
        np.testing.assert_array_equal(t.numpy(), [[1, -2]])
    assert ndl.Tensor.make_const(view)._array is w._array  # make_const keeps the array
    # a ReLU gradient in the course's style: a mask built from realize_cached_data()
    mask = ndl.Tensor(w.realize_cached_data() > 0, device=device, dtype="float32")
    np.testing.assert_array_equal(mask.numpy(), [[1, 0]])
    # assigning cached_data, an NDArray or a raw array, replaces the tensor's array
    w.cached_data = nd.array([[5.0, 6.0]], device=device)
    assert device.owns(w._array) and w.numpy().tolist() == [[5, 6]]
    raw = device.asarray(np.array([[7.0, 8.0]], np.float32))
    w.cached_data = raw
    assert w._array is raw


def test_realize_cached_data_is_the_computed_value_as_a_view(device):
    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float32")
    y = x * 2
    assert type(y.cached_data) is nd.NDArray
    assert y.realize_cached_data().numpy().tolist() == [2, 4]
    assert y.realize_cached_data()._array is y._array  # a view: no copy


def test_ndarray_pickles_to_the_same_device(device):
    import pickle

    a = nd.array([[1.5, 2.5]], device=device)
    b = pickle.loads(pickle.dumps(a))
    assert type(b) is nd.NDArray and b.device == device and b.dtype == np.float32
    np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_the_framework_reads_raw_arrays_only():
    """Inside needle, `cached_data` and `realize_cached_data()` are course-facing views:
    framework code reads `_array` / `_realize()` (a view would cost a wrapper per read and
    breaks array-API calls). Only autograd/graph.py's definitions name them (as functions)."""
    import ast
    import pathlib

    roots = (pathlib.Path(ndl.__file__).parent, pathlib.Path(ndl.backends.__file__).parent)
    offenders = [f"{path.name}:{node.lineno}"
                 for root in roots for path in sorted(root.rglob("*.py"))
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute)
                 and node.attr in ("cached_data", "realize_cached_data")]
    assert offenders == []


def test_course_names_resolve_to_the_one_ndarray_class():
    for module in (ndl, ndl.autograd, ndl.ops, nd):
        assert module.NDArray is nd.NDArray
        assert module.array_api is nd.course_namespace(ndl.default_device().xp)
        assert module.array_api.exp is ndl.default_device().xp.exp
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


def test_array_api_takes_the_courses_positional_axes(device):
    """The seed notes' LogSumExp.compute, `array_api.max(Z, self.axes, keepdims=True)` and
    `array_api.sum(..., self.axes)`, runs on every device's namespace as the course's."""
    xp = nd.course_namespace(device.xp)
    z = np.random.default_rng(0).standard_normal((3, 4))
    Z = device.asarray(z, dtype="float64")
    m = xp.max(Z, (1,), keepdims=True)
    out = xp.log(xp.sum(xp.exp(Z - m), (1,))) + xp.max(Z, (1,), keepdims=False)
    expected = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    np.testing.assert_allclose(device.to_numpy(out), expected, rtol=1e-12)
    for name, ref in (("min", np.min), ("mean", np.mean), ("prod", np.prod)):
        np.testing.assert_allclose(device.to_numpy(getattr(xp, name)(Z, [0])), ref(z, 0),
                                   rtol=1e-12)
    assert device.to_numpy(xp.sum(Z)) == pytest.approx(z.sum())


def test_astype_of_a_view_as_the_course_harness_uses_it(device):
    """hw2's optimizer tests do `get_int_tensor(...).cached_data.astype(np.uint8)` and make
    a Tensor of it: a copy of the new dtype on the same device."""
    t = ndl.Tensor(np.array([3, 0, 7]), device=device)
    y = t.cached_data.astype(np.uint8)
    assert isinstance(y, nd.NDArray) and y.dtype == "uint8" and y.device == device
    np.testing.assert_array_equal(ndl.Tensor(y, device=device).numpy(), [3, 0, 7])
    assert t.cached_data.astype("float32").dtype == "float32" and t.dtype == "int64"
