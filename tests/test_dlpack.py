"""DLPack: `Tensor.__dlpack__` / `__dlpack_device__` and `ndl.from_dlpack`, on every device.

Sharing is checked by data pointers, read with each library's own accessor, and by writes
that show up on the other side. jax arrays are immutable, so for jax only the pointers are
compared (and XLA wraps host memory without a copy only when it is 64-byte aligned: jax
copies otherwise, which the tests allow for by using aligned buffers).
"""

from __future__ import annotations

import importlib
import importlib.util
import re

import numpy as np
import pytest

import needle as ndl

CPU = (1, 0)  # DLPack's (kDLCPU, 0)


# ----- helpers independent of the code under test -----------------------------------------
def address(x) -> int:
    """The data pointer of a native array, by its library's own accessor."""
    module = type(x).__module__
    if module.startswith("numpy"):
        return x.__array_interface__["data"][0]
    if module.startswith("torch"):
        return x.data_ptr()
    if module.startswith(("jax", "jaxlib")):
        return x.unsafe_buffer_pointer()
    if module.startswith("cupy"):
        return x.data.ptr
    if module.startswith("array_api_strict"):
        return address(np.from_dlpack(x))  # array-api-strict's own export
    raise TypeError(type(x))


def to_host(x) -> np.ndarray:
    """A numpy copy of a native array of any library, by its own means."""
    module = type(x).__module__
    if module.startswith("torch"):
        return x.cpu().numpy()
    if module.startswith("cupy"):
        return x.get()
    return np.array(x)


def aligned(values, dtype="float32", alignment: int = 64) -> np.ndarray:
    """A numpy array holding `values` at an address that is a multiple of `alignment`."""
    values = np.asarray(values, dtype=dtype)
    raw = np.zeros(values.nbytes + alignment, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % alignment
    out = raw[start:start + values.nbytes].view(dtype).reshape(values.shape)
    out[...] = values
    return out


def needs_jax() -> None:
    """Skip where jax is not installed (CI), without importing it here: import_jax keeps
    numpy's random state around jax's first import."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")


def library(name):
    """The consumer module `name` (numpy, torch, jax.numpy, cupy, array_api_strict)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")


def tensor_in_aligned_memory(device, values) -> ndl.Tensor:
    """A leaf over a 64-byte aligned array of `device` (torch and jax allocate so anyway)."""
    if device.kind == "cpu":
        return ndl.Tensor.make_const(aligned(values), requires_grad=True, device=device)
    if device.kind == "strict":
        xs = library("array_api_strict")
        array = xs.asarray(aligned(values), device=device.native)
        return ndl.Tensor.make_const(array, requires_grad=True, device=device)
    return ndl.Tensor(np.asarray(values, dtype="float32"), device=device, requires_grad=True)


def host_memory(device) -> bool:
    return device.dlpack_device == CPU


# ----- needle -> other libraries -----------------------------------------------------------
CONSUMERS = ["numpy", "torch", "jax.numpy", "jax.dlpack", "array_api_strict", "cupy"]


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_other_libraries_share_a_tensors_memory(device, consumer):
    if consumer.startswith("jax"):
        needs_jax()
        from needle.backends.jax_device import import_jax

        import_jax()  # numpy's random state is kept around jax's first import
    lib = library(consumer)
    if consumer == "cupy" and host_memory(device):
        pytest.skip("cupy reads GPU memory")
    if consumer in ("numpy", "array_api_strict", "jax.numpy", "jax.dlpack") and not host_memory(
            device):
        pytest.skip(f"{consumer} reads host memory here")
    t = tensor_in_aligned_memory(device, [[1, 2, 3], [4, 5, 6]])
    assert tuple(map(int, t.__dlpack_device__())) == device.dlpack_device
    native = t._realize()
    if consumer == "torch" and not host_memory(device) and not lib.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    y = lib.from_dlpack(t)
    np.testing.assert_array_equal(to_host(y), [[1, 2, 3], [4, 5, 6]])
    if consumer.startswith("jax") and address(native) % 64:
        pytest.skip("jax copies host buffers that are not 64-byte aligned")
    assert address(y) == address(native), "the consumer's array is not the tensor's memory"
    if device.kind == "jax" or consumer.startswith("jax"):
        return  # jax arrays are immutable: the shared pointer is the check, not writes
    # writes through the consumer show in the tensor, where the consumer allows them
    if getattr(getattr(y, "flags", None), "writeable", True):
        y[0, 0] = 42
        assert t.numpy()[0, 0] == 42
    # writes through the tensor's own array show in the consumer's
    native[1, 2] = -7
    assert float(y[1, 2]) == -7


def test_np_from_dlpack_of_a_jax_tensor_is_read_only(device):
    if device.kind != "jax" or not host_memory(device):
        pytest.skip("a jax device in host memory")
    t = ndl.Tensor([1.0, 2.0], device=device)
    y = np.from_dlpack(t)
    assert address(y) == address(t._realize())
    assert not y.flags.writeable  # jax arrays are immutable: numpy gets a read-only view


def test_export_carries_no_graph_and_keeps_dtype(device):
    torch = library("torch")
    if not host_memory(device):
        pytest.skip("host memory")
    x = ndl.Tensor([1.0, 2.0, 3.0], device=device, dtype="float64")
    y = (x * 2).sum()
    exported = torch.from_dlpack(x * 2)
    assert exported.dtype == torch.float64 and not exported.requires_grad
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
    b = ndl.Tensor([True, False], device=device)
    assert np.from_dlpack(b).tolist() == [True, False]


# ----- other libraries -> needle -----------------------------------------------------------
def producers():
    """(name, function making a (2, 3) float32 array of that library in host memory)."""
    out = [("numpy", lambda v: aligned(v))]

    def torch_array(v):
        return library("torch").tensor(np.asarray(v, dtype=np.float32))

    def jax_array(v):
        needs_jax()
        from needle.backends.jax_device import import_jax

        jax = import_jax()
        return jax.device_put(np.asarray(v, dtype=np.float32), jax.devices("cpu")[0])

    def strict_array(v):
        return library("array_api_strict").asarray(aligned(v))

    return out + [("torch", torch_array), ("jax", jax_array), ("strict", strict_array)]


@pytest.mark.parametrize("name, make", producers(), ids=[n for n, _ in producers()])
def test_from_dlpack_wraps_host_arrays_without_a_copy(device, name, make):
    src = make([[1, 2, 3], [4, 5, 6]])
    if not host_memory(device):
        with pytest.raises(ValueError, match=re.escape(f"is in CPU memory, {device} holds")):
            ndl.from_dlpack(src, device=device)
        return
    t = ndl.from_dlpack(src, device=device)
    assert isinstance(t, ndl.Tensor) and t.device == device and not t.requires_grad
    assert t.shape == (2, 3) and t.dtype == "float32"
    np.testing.assert_array_equal(t.numpy(), [[1, 2, 3], [4, 5, 6]])
    assert address(t._realize()) == address(src)
    if name in ("numpy", "torch", "strict"):  # mutable sources: their writes show in needle
        src[0, 1] = 99
        assert t.numpy()[0, 1] == 99
    if device.kind != "jax" and name != "jax":  # and needle's array writes show in theirs
        t._realize()[1, 0] = -5
        assert float(src[1, 0]) == -5
    # the wrapped tensor computes like any other
    np.testing.assert_allclose((t * 2).sum().numpy(), 2 * t.numpy().sum())


def test_from_dlpack_of_a_tensor_shares_it(device):
    t = ndl.Tensor([[1.0, 2.0]], device=device)
    u = ndl.from_dlpack(t, requires_grad=True)
    assert u.device == device and u.requires_grad and u is not t
    assert address(u._realize()) == address(t._realize())


def test_from_dlpack_device_defaults():
    torch = library("torch")
    assert ndl.from_dlpack(np.ones(2)).device == ndl.cpu()
    assert ndl.from_dlpack(torch.ones(2)).device == ndl.torch()

    class Foreign:  # a DLPack producer needle does not know: host memory goes to cpu()
        def __init__(self):
            self.a = np.arange(4.0)

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    foreign = Foreign()
    t = ndl.from_dlpack(foreign)
    assert t.device == ndl.cpu() and address(t._realize()) == address(foreign.a)


class OnGPU:
    """A producer claiming CUDA memory: from_dlpack must refuse it before reading it."""

    def __dlpack__(self, **kwargs):
        raise AssertionError("the data must not be read")

    def __dlpack_device__(self):
        return (2, 0)


def test_a_device_mismatch_is_a_clear_error(device):
    if not host_memory(device):
        pytest.skip("this producer claims the GPU")
    with pytest.raises(ValueError, match=re.escape(f"the OnGPU is in CUDA:0 memory, {device} "
                                                   "holds CPU memory")):
        ndl.from_dlpack(OnGPU(), device=device)


def test_gpu_memory_is_refused_by_host_devices():
    cuda = ndl.cuda()
    if not cuda.enabled():
        pytest.skip(cuda.unavailable_reason())
    cp = library("cupy")
    src = cp.arange(4.0)
    with pytest.raises(ValueError, match="the ndarray is in CUDA:0 memory, cpu"):
        ndl.from_dlpack(src, device=ndl.cpu())
    t = ndl.from_dlpack(src)
    assert t.device == cuda and address(t._realize()) == address(src)


def test_unknown_memory_needs_a_device():
    class OnMetal(OnGPU):
        def __dlpack_device__(self):
            return (8, 0)

    with pytest.raises(ValueError, match="no default device for Metal:0 memory; pass device="):
        ndl.from_dlpack(OnMetal())


def test_objects_without_dlpack_are_a_type_error(device):
    with pytest.raises(TypeError, match="a list has no __dlpack__"):
        ndl.from_dlpack([1, 2, 3], device=device)


def test_unsupported_dtypes_are_a_type_error():
    torch = library("torch")
    message = "dtype bfloat16 is not supported on torch()"
    with pytest.raises(TypeError, match=re.escape(message)):
        ndl.from_dlpack(torch.ones(2, dtype=torch.bfloat16))


def torch_array(dtype_name):
    torch = library("torch")
    return torch.ones(2, dtype=getattr(torch, dtype_name))


def jax_host_array(dtype_name):
    needs_jax()
    from needle.backends.jax_device import import_jax

    jax = import_jax()
    return jax.device_put(jax.numpy.ones(2, dtype=dtype_name), jax.devices("cpu")[0])


def ml_dtypes_array(dtype_name):
    ml_dtypes = library("ml_dtypes")
    return np.ones(2, dtype=getattr(ml_dtypes, dtype_name))


@pytest.mark.parametrize("make, dtype_name", [
    (torch_array, "bfloat16"), (torch_array, "float8_e4m3fn"), (jax_host_array, "bfloat16"),
    (ml_dtypes_array, "bfloat16")], ids=["torch-bf16", "torch-fp8", "jax-bf16", "numpy-bf16"])
def test_dtypes_a_device_lacks_are_a_type_error_naming_them(device, make, dtype_name):
    # numpy (cpu, strict) refused these with its own RuntimeError "Unsupported dtype in
    # DLTensor.", naming neither the dtype nor the device; every device says the same now
    if not host_memory(device):
        pytest.skip("host arrays are another device's memory")
    src = make(dtype_name)
    try:
        device.dtype(dtype_name)
    except TypeError:
        pass
    else:
        pytest.skip(f"{device} has {dtype_name}")
    message = f"from_dlpack: dtype {dtype_name} is not supported on {device}"
    with pytest.raises(TypeError, match=re.escape(message)):
        ndl.from_dlpack(src, device=device)
