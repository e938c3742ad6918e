"""Devices: identity, creation, random numbers, conversion, and the unavailable-GPU path."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

import needle as ndl
from needle import backends
from needle.backends.cuda import CUDADevice


def test_names_and_identity():
    assert str(ndl.cpu()) == repr(ndl.cpu()) == "cpu()"
    assert str(ndl.cuda()) == repr(ndl.cuda()) == "cuda()"
    assert repr(ndl.strict()) == "strict()"
    assert ndl.cpu() == ndl.cpu() and ndl.cpu() != ndl.cuda() and ndl.cuda() != ndl.cuda(1)
    assert ndl.cuda(0) == CUDADevice(0) and hash(ndl.cuda(0)) == hash(CUDADevice(0))
    assert len({ndl.cpu(), ndl.cpu(), ndl.cuda(), ndl.strict()}) == 3
    assert ndl.default_device() == ndl.cpu()
    assert ndl.all_devices() == [ndl.cpu(), ndl.cuda(), ndl.strict()]


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
            moved = other.asarray(arr, dtype="float64")
            assert other.owns(moved)
            np.testing.assert_array_equal(other.to_numpy(moved), host)
    np.testing.assert_array_equal(device.to_numpy(device.asarray([[1, 2]])), [[1, 2]])


def test_tensor_to_device(device):
    t = ndl.Tensor([1.0, 2.0])
    moved = t.to(device)
    assert moved.device == device
    np.testing.assert_array_equal(moved.numpy(), [1.0, 2.0])
    assert t.to(ndl.cpu()) is t


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
    with pytest.raises(RuntimeError, match=r"pip install needle\[cuda\]"):
        ndl.Tensor([1.0], device=dev)
    with pytest.raises(RuntimeError, match="cuda"):
        dev.zeros(2)


def test_import_does_not_probe_a_gpu(tmp_path):
    code = ("import sys, needle; needle.cuda(); "
            "assert 'cupy' not in sys.modules, 'cupy imported at import time'")
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
    assert "pip install needle[cuda]" in dev.unavailable_reason()


def test_strict_devices_reject_mixing():
    a = ndl.Tensor([1.0], device=ndl.strict(0))
    b = ndl.Tensor([1.0], device=ndl.strict(1))
    with pytest.raises(ValueError, match=r"strict\(\).*strict\(1\)"):
        a * b
