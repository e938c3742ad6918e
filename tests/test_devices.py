"""Devices: identity, creation, random numbers, conversion, and the unavailable-GPU path."""

from __future__ import annotations

import ast
import copy
import pathlib
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest

import needle as ndl
from needle import backends, init, nn
from needle.backends.cuda import INSTALL_HINT, CUDADevice


def test_names_and_identity():
    assert str(ndl.cpu()) == repr(ndl.cpu()) == "cpu()"
    assert str(ndl.cuda()) == repr(ndl.cuda()) == "cuda()"
    assert repr(ndl.strict()) == "strict()"
    assert ndl.cpu() == ndl.cpu() and ndl.cpu() != ndl.cuda() and ndl.cuda() != ndl.cuda(1)
    assert ndl.cuda(0) == CUDADevice(0) and hash(ndl.cuda(0)) == hash(CUDADevice(0))
    assert len({ndl.cpu(), ndl.cpu(), ndl.cuda(), ndl.strict()}) == 3
    assert ndl.default_device() == ndl.cpu()
    assert ndl.all_devices() == [ndl.cpu(), ndl.cuda(), ndl.strict(), ndl.torch(), ndl.jax()]


def test_namespace_is_resolved_once_per_device(device):
    assert device.xp is device.xp
    a = device.zeros(2)
    assert backends.namespace(a) is device.xp
    assert backends.device_of(a) == device


def test_creation(device):
    for arr, value in ((device.zeros(2, 3), 0), (device.ones((2, 3)), 1),
                       (device.full((2, 3), 7.0), 7)):
        host = device.to_numpy(arr)
        assert host.shape == (2, 3) and host.dtype == np.float32
        assert np.all(host == value)
    assert device.to_numpy(device.empty((4,), dtype="float64")).shape == (4,)
    assert device.to_numpy(device.zeros(3, dtype="int32")).dtype == np.int32


def test_one_hot(device):
    got = device.to_numpy(device.one_hot(4, np.array([2, 0, 3], dtype=np.uint8)))
    np.testing.assert_array_equal(got, np.eye(4, dtype=np.float32)[[2, 0, 3]])
    assert got.dtype == np.float32


def test_random_numbers_follow_numpys_global_state(device):
    np.random.seed(3)
    expected_u, expected_n = np.random.rand(2, 3), np.random.randn(4)
    np.random.seed(3)
    u, n = device.rand(2, 3), device.randn(4)
    np.testing.assert_array_equal(device.to_numpy(u), expected_u)
    np.testing.assert_array_equal(device.to_numpy(n), expected_n)
    assert device.to_numpy(device.rand()).shape == ()


def test_conversion_between_devices(device):
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    arr = device.asarray(host)
    np.testing.assert_array_equal(device.to_numpy(arr), host)
    for other in ndl.all_devices():
        if other.enabled():
            try:  # jax has no float64 until its x64 mode is on (the fixture turns it on for
                other.dtype("float64")  # the jax device under test, not for this one)
                wide = "float64"
            except TypeError:
                wide = "float32"
            moved = other.asarray(arr, dtype=wide)
            assert other.owns(moved) and str(other.to_numpy(moved).dtype) == wide
            np.testing.assert_array_equal(other.to_numpy(moved), host)
    np.testing.assert_array_equal(device.to_numpy(device.asarray([[1, 2]])), [[1, 2]])


def test_tensor_to_device(device):
    t = ndl.Tensor([1.0, 2.0])
    moved = t.to(device)
    assert moved.device == device
    np.testing.assert_array_equal(moved.numpy(), [1.0, 2.0])
    assert t.to(ndl.cpu()) is t


def test_a_copy_to_another_device_passes_gradients_back(device):
    """(A port audit.) Tensor.to made a new leaf: features on one device and a head on
    another left the features' parameters without gradients, silently."""
    np.random.seed(0)
    feat = ndl.nn.Linear(3, 4, dtype="float64")  # on cpu
    head = ndl.nn.Linear(4, 2, device=device, dtype="float64")
    x = ndl.Tensor(np.arange(6.0).reshape(2, 3), dtype="float64", requires_grad=False)
    for create_graph in (True, False):
        h = feat(x).to(device)
        assert h.device == device and h.requires_grad
        (head(h) ** 2).sum().backward(create_graph=create_graph)
        assert feat.weight.grad is not None and feat.weight.grad.device == ndl.cpu()
        w, hw = feat.weight.numpy(), head.weight.numpy()  # by hand: d sum((x w + b) hw + hb)^2
        z = (x.numpy() @ w + feat.bias.numpy()) @ hw + head.bias.numpy()
        np.testing.assert_allclose(feat.weight.grad.numpy(), x.numpy().T @ (2 * z @ hw.T),
                                   rtol=1e-12)
    with ndl.no_grad():
        assert not feat(x).to(device).requires_grad
    w = ndl.Tensor(np.ones(3), dtype="float64").to(device)  # (a review: a leaf's copy is a
    assert w.op is None and w.requires_grad and w.device == device  # leaf, as before, in
    assert w.dtype == (feat(x) * 1.0).to(device).dtype  # the device's dtype, as a
    # non-leaf's (float32 on jax without x64: a leaf's asked for float64 and raised)
    pe = ndl.Tensor(np.ones((2, 4)), dtype="float64").to(device)  # a constant moved once
    step = ndl.compile(lambda: (head(pe) ** 2).sum().backward())
    step()
    step()  # (was a CompileError: a graph built before the step)
    assert head.weight.grad is not None


def test_dtype_of_every_device_compares_to_names(device):
    t = ndl.Tensor([1, 2], device=device, dtype="float32")
    assert t.dtype == "float32" and t.dtype != "float64"
    with pytest.raises(TypeError, match="not-a-dtype"):
        ndl.Tensor([1], device=device, dtype="not-a-dtype")


# ----- the cuda device on a machine without one --------------------------------------------


def test_cuda_can_be_constructed_and_asked_without_a_gpu():
    dev = ndl.cuda()
    if dev.enabled():
        pytest.skip("a GPU is present: the disabled path is tested on machines without one")
    assert dev.enabled() is False
    with pytest.raises(RuntimeError, match=r"pip install needle\[cuda12\]"):
        ndl.Tensor([1.0], device=dev)
    with pytest.raises(RuntimeError, match="cuda"):
        dev.zeros(2)


def test_import_does_not_probe_a_gpu(tmp_path):
    code = ("import sys, needle; needle.cuda(); "
            "assert 'cupy' not in sys.modules, 'cupy imported at import time'; "
            "assert all(d._xp is None for d in needle.all_devices()), 'a device was loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


def test_cuda_probe_logic_with_a_fake_cupy(monkeypatch):
    """The GPU-only probe, run on the CPU with a stand-in cupy module."""
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert CUDADevice(0).enabled()
    assert not CUDADevice(1).enabled()
    assert "has 1 CUDA GPU" in CUDADevice(1).unavailable_reason()

    def no_driver():
        raise RuntimeError("cudaErrorNoDevice")

    fake.cuda.runtime.getDeviceCount = no_driver
    dev = CUDADevice(0)
    assert not dev.enabled()
    assert "cudaErrorNoDevice" in dev.unavailable_reason()
    assert "pip install needle[cuda12]" in dev.unavailable_reason()


def test_strict_devices_reject_mixing():
    a = ndl.Tensor([1.0], device=ndl.strict(0))
    b = ndl.Tensor([1.0], device=ndl.strict(1))
    with pytest.raises(ValueError, match=r"strict\(\).*strict\(1\)"):
        a * b


def test_strings_and_objects_are_not_tensor_data(device):
    for data, named in ((None, "NoneType"), ({"a": 1}, "dict"), (["a"], "list"),
                        (np.array(["a", "b"]), "<U1"), (np.array([b"a"]), "S1"),
                        (np.array([1, None], dtype=object), "object")):
        with pytest.raises(TypeError, match=f"numbers or booleans.*{named}"):
            device.asarray(data)
    assert not ndl.cpu().owns(np.array(["a"]))


# ----- pickling: by kind and index, back to the cached device ---------------------------------


def test_devices_pickle_and_copy_to_the_cached_device():
    for dev in (ndl.cpu(), ndl.cuda(), ndl.cuda(1), ndl.strict(), ndl.strict(1)):
        assert pickle.loads(pickle.dumps(dev)) is dev
        assert copy.deepcopy(dev) is dev and copy.copy(dev) is dev
    assert copy.deepcopy({"d": ndl.strict(2)})["d"] is ndl.strict(2)


def test_get_device_by_kind_and_index():
    assert backends.get_device("cpu") is ndl.cpu()
    assert backends.get_device("strict", 1) is ndl.strict(1)
    assert backends.get_device("cuda", 0) is ndl.cuda()
    with pytest.raises(ValueError, match="'tpu'.*cpu, cuda, strict"):
        backends.get_device("tpu")


# ----- the course's names: array_api and NDArray ---------------------------------------------


def test_course_array_api_is_the_default_device_and_ndarray_any_device_array():
    from needle.backend_ndarray import NDArray as course_ndarray
    from needle.backend_ndarray import course_namespace

    xp = course_namespace(ndl.default_device().xp)  # the namespace, with positional axes
    assert xp.xp is ndl.default_device().xp and xp.ones is xp.xp.ones

    for module in (ndl, ndl.autograd, ndl.backend_ndarray):
        assert module.array_api is xp
        assert module.NDArray is course_ndarray
    from needle.autograd import NDArray, array_api

    assert array_api is xp and NDArray is course_ndarray
    assert isinstance(np.ones(2), NDArray) and not isinstance([1.0], NDArray)
    assert isinstance(ndl.Tensor([1.0]).cached_data, ndl.NDArray)
    assert isinstance(array_api.ones(2), NDArray)
    with pytest.raises(AttributeError, match="'needle.autograd' has no attribute 'NDArrays'"):
        _ = ndl.autograd.NDArrays


def test_course_names_in_ops():
    """Needs `__getattr__ = course_getattr(__name__)` in needle/ops/__init__.py."""
    from needle.backend_ndarray import course_namespace

    assert ndl.ops.array_api is course_namespace(ndl.default_device().xp)
    assert ndl.ops.NDArray is ndl.NDArray
    with pytest.raises(AttributeError, match="'needle.ops' has no attribute 'nope'"):
        _ = ndl.ops.nope


def test_array_type(device):
    assert isinstance(device.zeros(2), device.array_type)
    assert isinstance(ndl.Tensor([1.0], device=device)._array, device.array_type)


# ----- nothing imports cupy but the cuda device's availability check --------------------------


def test_cuda_entry_points_without_cupy_raise_the_install_hint(tmp_path):
    dev = ndl.cuda()
    if dev.enabled():
        pytest.skip("a GPU is present: the disabled path is tested on machines without one")
    path = tmp_path / "w.npz"
    ndl.save({"w": ndl.Tensor([1.0, 2.0])}, path)
    host = np.ones(2)
    calls = {
        "Tensor": lambda: ndl.Tensor([1.0], device=dev),
        "Linear": lambda: nn.Linear(2, 3, device=dev),
        "init.rand": lambda: init.rand(2, device=dev),
        "init.randn": lambda: init.randn(2, device=dev),
        "init.zeros": lambda: init.zeros(2, device=dev),
        "load": lambda: ndl.load(path, device=dev),
        "from_numpy": lambda: dev.from_numpy(host),
        "adopt_numpy": lambda: dev.adopt_numpy(host),
        "to_numpy": lambda: dev.to_numpy(host),
        "asarray": lambda: dev.asarray(host),
        "rand": lambda: dev.rand(2),
        "randn": lambda: dev.randn(2),
        "zeros": lambda: dev.zeros(2),
        "one_hot": lambda: dev.one_hot(3, host),
        "dtype": lambda: dev.dtype("float32"),
        "xp": lambda: dev.xp,
        "array_type": lambda: dev.array_type,
    }
    state = np.random.get_state()[1].copy()
    wrong = {}
    for name, call in calls.items():
        try:
            call()
            wrong[name] = "no error"
        except Exception as e:
            if not (isinstance(e, RuntimeError) and INSTALL_HINT in str(e)):
                wrong[name] = repr(e)
    assert not wrong
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # no draws were wasted


def _imports(path: pathlib.Path):
    """(module, level, enclosing function or None) for every import statement in `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, 0, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append((child.module or "", child.level, function))
            name = child.name if isinstance(child, (ast.FunctionDef,
                                                    ast.AsyncFunctionDef)) else function
            visit(child, name)

    visit(tree, None)
    return found


def _sources():
    roots = (pathlib.Path(ndl.__file__).parent, pathlib.Path(backends.__file__).parent)
    return sorted({p for root in roots for p in root.rglob("*.py")})


def test_cupy_is_imported_only_by_the_cuda_device_after_its_check():
    allowed = {("cuda.py", "_probe"), ("cuda.py", "_load")}  # the check; after the check
    bad = [f"{path.name}:{function or 'module level'} imports {module}"
           for path in _sources() for module, _, function in _imports(path)
           if {"cupy", "cupyx"} & set(module.split(".")) and (path.name, function) not in allowed]
    assert not bad


def test_backends_import_nothing_above_them():
    """backends/ knows arrays and files, never Tensors: no import of needle outside it."""
    root = pathlib.Path(backends.__file__).parent
    bad = [f"{path.name} imports {'.' * level}{module}"
           for path in sorted(root.glob("*.py")) for module, level, _ in _imports(path)
           if level >= 2 or (module.split(".")[0] == "needle"
                             and not module.startswith("needle.backends"))]
    assert not bad


FAULTS_OF_A_TRAINING_LOOP = """
import resource, sys
import numpy as np
if sys.argv[1] == "needle":
    import needle as ndl
    ndl.cpu().xp  # the device's first use
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # a step's arrays (1 MiB each), made, written and all freed again
    arrays = [np.ones(1 << 18, dtype=np.float32) for _ in range(8)]
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_cpu_device_keeps_freed_step_arrays_in_the_heap(tmp_path):
    # glibc mmaps (and faults in page by page) every block above its adaptive threshold until
    # a bigger one is freed; the cpu device raises the threshold on first use
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS_OF_A_TRAINING_LOOP, mode],
                             capture_output=True, text=True, check=True, cwd=tmp_path)
        return int(out.stdout)

    plain = faults("numpy")
    if plain < 10 * 8 * 256:  # not glibc's adaptive malloc: nothing to lift
        pytest.skip(f"this C library kept the arrays without help ({plain} faults)")
    assert faults("needle") < plain / 4


def test_gpu_arrays_move_through_their_device_not_numpys_conversion(monkeypatch):
    # a torch CUDA tensor refuses np.asarray and np.from_dlpack; here a cpu tensor is made to
    # refuse them the same way, and every other device must still take it (through torch)
    torch = pytest.importorskip("torch")
    source = ndl.torch()
    arr = source.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))

    def refuse(*args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")

    monkeypatch.setattr(torch.Tensor, "__array__", refuse)
    monkeypatch.setattr(torch.Tensor, "__dlpack__", refuse)
    for other in [ndl.cpu(), ndl.strict(), ndl.jax()]:
        if other.enabled():
            moved = other.asarray(arr)
            assert other.owns(moved)
            np.testing.assert_array_equal(other.to_numpy(moved), np.arange(6).reshape(2, 3))


def test_training_generator_state_round_trips(device):
    ndl.manual_seed(3)
    state = device.rng_state()
    if state is None:  # numpy's global state is the generator: checkpoints save that
        assert device.kind in ("cpu", "strict")
        return
    first = device.to_numpy(device.random((6,)))
    device.set_rng_state(state)
    np.testing.assert_array_equal(device.to_numpy(device.random((6,))), first)
