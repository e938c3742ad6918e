"""The device table (backends.DEVICES): one row per kind feeds `ndl`, all_devices(), device_of,
is_device_array, needle-train's --device and the tests' device fixture."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import backends
from needle.backend_ndarray import is_device_array
from needle.backends import DEVICES, Device, DeviceKind


def test_ndl_has_the_factory_of_every_kind():
    assert list(DEVICES) == ["cpu", "cuda", "strict", "torch", "jax"]
    for name, kind in DEVICES.items():
        assert getattr(ndl, name) is kind.factory and name in ndl.__all__
        assert kind.factory().kind == name


def test_all_devices_is_one_device_of_every_kind():
    assert [d.kind for d in ndl.all_devices()] == list(DEVICES)
    assert ndl.all_devices() == [ndl.cpu(), ndl.cuda(), ndl.strict(), ndl.torch(), ndl.jax()]


def test_command_line_and_test_names_come_from_the_table():
    import conftest
    from needle.apps import train

    assert set(train.DEVICES) == {"cpu", "cuda", "strict", "jax", "torch:cpu", "torch:cuda",
                                  "torch:mps"}
    assert train.DEVICES["torch:cuda"]() is ndl.torch("cuda")
    assert train.DEVICES["strict"]() is ndl.strict()
    assert conftest.DEVICE_NAMES == ("cpu", "cuda", "strict", "torch", "jax")
    assert conftest.EXTRA_DEVICE_NAMES == ("torch:cuda", "torch:mps")


def test_device_of_and_is_device_array_read_the_table(device):
    a = device.zeros(3)
    assert backends.device_of(a) == device and is_device_array(a)
    assert not is_device_array(np.array(["text"])) and not is_device_array([1.0])
    with pytest.raises(TypeError, match="needle has no device for arrays of type list"):
        backends.device_of([1.0])


# ----- a new kind of device: one row --------------------------------------------------------
class FakeArray:
    """An array of an array library needle never heard of."""

    def __init__(self, where: int = 0):
        self.where = where


FakeArray.__module__ = "fakelib.core"


class FakeDevice(Device):
    kind = "fake"

    def _probe(self) -> str:
        return "fake() is unavailable: it is a test"


def fake(index: int = 0) -> Device:
    """The fake device `index` (one cached object per index)."""
    return FAKES.setdefault(index, FakeDevice(index))


FAKES: dict[int, Device] = {}


def test_a_new_kind_is_one_row_of_the_table(monkeypatch):
    row = DeviceKind(fake, ("fakelib",), lambda a: isinstance(a, FakeArray),
                     lambda a: fake(a.where), places=("0", "1"))
    monkeypatch.setitem(DEVICES, "fake", row)
    monkeypatch.setattr(backends, "_KIND_OF_TYPE", {})
    assert backends.device_of(FakeArray(1)) is fake(1)
    assert is_device_array(FakeArray()) and not is_device_array(object())
    assert ndl.all_devices()[-1] is fake()
    assert backends.get_device("fake", 1) is fake(1) and backends.get_device("fake") is fake()
    named = backends.placements()
    assert named["fake:1"]() is fake("1") and "fake" not in named
    assert not fake().enabled() and "a test" in fake().unavailable_reason()


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match="'tpu'; needle has cpu, cuda, strict, torch, jax"):
        backends.get_device("tpu")


def test_a_cupy_arrays_device_is_read_from_its_memory_pointer():
    """cuda's row reads the GPU from the array's memory (`a.data.device_id`, an int) rather
    than `a.device`, which makes a cupy Device per call; checked here with a stand-in."""
    from types import SimpleNamespace

    class ndarray:  # noqa: N801 (cupy's class name, which the row matches)
        __module__ = "cupy"

        def __init__(self, gpu: int):
            self.data = SimpleNamespace(device_id=gpu)

        @property
        def device(self):
            raise AssertionError("a.device was read")

    assert backends.device_of(ndarray(1)) is ndl.cuda(1)
    assert backends.device_of(ndarray(0)) is ndl.cuda(0)
