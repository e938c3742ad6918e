"""Devices: the only part of needle that knows numpy, cupy, array-api-strict, torch or jax.

Installed as `needle.backends`. Factories return one cached Device per (kind, index).
"""

from __future__ import annotations

import operator

from typing import Any, Callable, NamedTuple

import numpy as np

from .cpu import CPUDevice
from .cuda import CUDADevice
from .device import Device
from .host_data import host_array
from .dlpack import describe_dlpack_device, dlpack_device_of
from .jax_device import JaxDevice
from .strict import STRICT_DEVICES, StrictDevice
from .torch_device import TorchDevice

__all__ = [
    "Device", "CPUDevice", "CUDADevice", "StrictDevice", "TorchDevice", "JaxDevice", "cpu",
    "cpu_numpy", "cuda", "strict", "torch", "jax", "DEVICES", "DeviceKind", "placements",
    "get_device", "default_device", "all_devices", "namespace", "device_of", "host_array",
    "is_device_array", "manual_seed",
    "dlpack_home",
]

_DEVICES: dict[tuple[type, int | str | None], Device] = {}


def _get(cls: type, index: int | str | None) -> Device:
    key = (cls, index)
    dev = _DEVICES.get(key)
    if dev is None:  # (two threads may both make one: the first kept is everyone's)
        dev = _DEVICES.setdefault(key, cls(index))
    return dev


def cpu() -> Device:
    """The host device (numpy)."""
    return _get(CPUDevice, 0)


cpu_numpy = cpu  # the course's name for the numpy-backed cpu device


def cuda(index: int = 0) -> Device:
    """GPU `index` (cupy). Constructing it is safe on any machine; see `enabled()`."""
    return _get(CUDADevice, index)


def strict(index: int = 0) -> Device:
    """The array-api-strict reference device (index 1 and 2 are its extra test devices)."""
    return _get(StrictDevice, index)


def torch(device: str = "cpu") -> Device:
    """PyTorch tensors on "cpu", "cuda", "cuda:N" or "mps" (torch is imported lazily)."""
    from .torch_device import normalize

    return _get(TorchDevice, normalize(device))


def jax(device: str | None = None) -> Device:
    """JAX arrays on jax's default device, or on "cpu", "gpu", "tpu" (":N" picks one)."""
    from .jax_device import normalize

    return _get(JaxDevice, normalize(device))


def _numeric_numpy(obj: Any) -> bool:
    return cpu().owns(obj)  # numeric numpy arrays and scalars, not str or object arrays


def _class_named(name: str) -> Callable[[Any], bool]:
    return lambda obj: obj.__class__.__name__ == name


_GPUS: dict[int, Device] = {}  # GPU index -> cuda(index), for _cuda_of


def _cuda_of(array: Any) -> Device:
    # (a.data.device_id: the memory's GPU as a plain int; a.device makes a cupy Device each
    # time, and every cuda kernel asks for its arrays' device: one dict lookup)
    gpu = _GPUS.get(array.data.device_id)
    if gpu is None:
        gpu = _GPUS[array.data.device_id] = cuda(array.data.device_id)
    return gpu


def _strict_device_of(array: Any) -> Device:
    import array_api_strict as xs

    for index, name in enumerate(STRICT_DEVICES):
        if array.device == xs.Device(name):
            return strict(index)
    raise TypeError(f"needle has no device for array-api-strict's {array.device}")


def _jax_device_of(array: Any) -> Device:
    """jax() for arrays on jax's default device, else jax("platform:id")."""
    (native,) = array.devices()
    default = jax()
    if default.enabled() and default.native == native:
        return default
    return jax(f"{native.platform}:{native.id}")


class DeviceKind(NamedTuple):
    """A row of the device table."""

    factory: Callable[..., Device]  # ndl.<name>(...); with no argument, the default device
    packages: tuple[str, ...]  # the top-level packages its arrays' types come from
    is_array: Callable[[Any], bool]  # whether an object of those packages is its array
    device_of: Callable[[Any], Device]  # the device holding one of its arrays
    places: tuple[str, ...] = ()  # --device's "name:place" choices; the first, the default


#: every kind of device, by name: `ndl.<name>`, all_devices(), device_of, is_device_array,
#: `needle-train --device` and the tests' device fixture all read it. A new device is a
#: Device subclass and one row here.
DEVICES: dict[str, DeviceKind] = {
    "cpu": DeviceKind(cpu, ("numpy",), _numeric_numpy, lambda a: cpu()),
    "cuda": DeviceKind(cuda, ("cupy",), _class_named("ndarray"), _cuda_of),
    "strict": DeviceKind(strict, ("array_api_strict",), _class_named("Array"),
                         _strict_device_of),
    "torch": DeviceKind(torch, ("torch",), _class_named("Tensor"),
                        lambda a: torch(str(a.device)), places=("cpu", "cuda", "mps")),
    "jax": DeviceKind(jax, ("jax", "jaxlib"), _class_named("ArrayImpl"), _jax_device_of),
}


def placements() -> dict[str, Callable[[], Device]]:
    """Every device a name on the command line picks: "cpu", "cuda", ..., and "torch:cpu",
    "torch:cuda", "torch:mps" for a kind with places (with no place, its default)."""
    named: dict[str, Callable[[], Device]] = {}
    for name, kind in DEVICES.items():
        if not kind.places:
            named[name] = kind.factory
        for place in kind.places:
            named[f"{name}:{place}"] = lambda f=kind.factory, p=place: f(p)
    return named


def get_device(kind: str, index: int | str | None = 0) -> Device:
    """The device of `kind` (a name in DEVICES) and `index`; how devices unpickle."""
    row = DEVICES.get(kind)
    if row is None:
        raise ValueError(f"unknown device kind {kind!r}; needle has {', '.join(DEVICES)}")
    return row.factory() if index in (0, None) else row.factory(index)


def default_device() -> Device:
    """The device tensors go to when none is given: cpu()."""
    return cpu()


def all_devices() -> list[Device]:
    """The default device of every kind needle knows (cpu, cuda, strict, torch, jax), enabled
    on this machine or not (see `enabled()`)."""
    return [kind.factory() for kind in DEVICES.values()]


def manual_seed(seed: int) -> None:
    """Seed numpy's global state and the training generator of every device with `seed`.

    Initial weights come from numpy's global state; Dropout masks from the device's own
    generator (numpy's global state on cpu and strict), so a seeded run repeats on any device.
    """
    seed = operator.index(seed)  # (TypeError for 1.7 or "3")
    np.random.seed(seed)
    Device.global_seed = seed
    for dev in list(_DEVICES.values()):  # (another thread may add a device meanwhile)
        dev.manual_seed(seed)


# array type -> namespace, filled on first sight of each type (array_namespace costs µs)
_NAMESPACES: dict[type, Any] = {}


def namespace(array: Any) -> Any:
    """The array-API namespace of `array`, resolved once per array type."""
    xp = _NAMESPACES.get(type(array))
    if xp is None:
        xp = _NAMESPACES[type(array)] = device_of(array).xp
    return xp


# array type -> its row of DEVICES (None: no device's), filled on first sight of each type
_KIND_OF_TYPE: dict[type, DeviceKind | None] = {}


def _kind_of(cls: type) -> DeviceKind | None:
    try:
        return _KIND_OF_TYPE[cls]
    except KeyError:
        package = cls.__module__.partition(".")[0]
        found = next((k for k in DEVICES.values() if package in k.packages), None)
        _KIND_OF_TYPE[cls] = found
        return found


def device_of(array: Any) -> Device:
    """The needle Device that holds a native array."""
    kind = _KIND_OF_TYPE.get(array.__class__) or _kind_of(array.__class__)
    if kind is None:
        raise TypeError(f"needle has no device for arrays of type {type(array).__name__}")
    return kind.device_of(array)


def is_device_array(obj: Any) -> bool:
    """True for a native array that some needle device holds; never imports or probes one
    (numeric numpy arrays and scalars, cupy ndarrays, array-api-strict Arrays, torch Tensors
    and jax Arrays: decided by the type's package and name)."""
    kind = _kind_of(obj.__class__)
    return kind is not None and kind.is_array(obj)


def dlpack_home(obj: Any) -> Device:
    """The device `from_dlpack(obj)` wraps `obj` on when none is named: a native array's own
    (numpy: cpu, torch.Tensor: torch, ...), else cpu() for host memory and cuda(i) for GPU i."""
    try:
        return device_of(obj)
    except (TypeError, AttributeError, ValueError):
        pass
    where = dlpack_device_of(obj)
    if where[0] == 1:
        return cpu()
    if where[0] == 2:
        return cuda(where[1])
    raise ValueError(f"from_dlpack: needle has no default device for "
                     f"{describe_dlpack_device(where)} memory; pass device=")
