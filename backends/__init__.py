"""Devices: the only part of needle that knows numpy, cupy, array-api-strict, torch or jax.

Installed as `needle.backends`. Factories return one cached Device per (kind, index).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cpu import CPUDevice
from .cuda import CUDADevice
from .device import Device, describe_dlpack_device, dlpack_device_of, host_array
from .jax_device import JaxDevice
from .strict import STRICT_DEVICES, StrictDevice
from .torch_device import TorchDevice

__all__ = [
    "Device", "CPUDevice", "CUDADevice", "StrictDevice", "TorchDevice", "JaxDevice", "cpu",
    "cpu_numpy", "cuda", "strict", "torch", "jax",
    "get_device", "default_device", "all_devices", "namespace", "device_of", "host_array",
    "manual_seed",
    "dlpack_home",
]

_DEVICES: dict[tuple[type, int | str | None], Device] = {}


def _get(cls: type, index: int | str | None) -> Device:
    key = (cls, index)
    dev = _DEVICES.get(key)
    if dev is None:
        dev = _DEVICES[key] = cls(index)
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


_KINDS: dict[str, type] = {"cpu": CPUDevice, "cuda": CUDADevice, "strict": StrictDevice,
                           "torch": TorchDevice, "jax": JaxDevice}
_FACTORIES = {"torch": torch, "jax": jax}


def get_device(kind: str, index: int | str | None = 0) -> Device:
    """The device of `kind` ("cpu", "cuda", "strict", "torch" or "jax") and `index`; how
    devices unpickle."""
    cls = _KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown device kind {kind!r}; needle has {', '.join(_KINDS)}")
    factory = _FACTORIES.get(kind)
    return factory(index) if factory is not None else _get(cls, index)


def default_device() -> Device:
    """The device tensors go to when none is given: cpu()."""
    return cpu()


def all_devices() -> list[Device]:
    """Every device kind needle knows, enabled on this machine or not."""
    return [cpu(), cuda(), strict()]


def manual_seed(seed: int) -> None:
    """Seed numpy's global state and the training generator of every device with `seed`.

    Initial weights come from numpy's global state; Dropout masks from the device's own
    generator (numpy's global state on cpu and strict), so a seeded run repeats on any device.
    """
    seed = int(seed)
    np.random.seed(seed)
    Device.global_seed = seed
    for dev in _DEVICES.values():
        dev.manual_seed(seed)


# array type -> namespace, filled on first sight of each type (array_namespace costs µs)
_NAMESPACES: dict[type, Any] = {}


def namespace(array: Any) -> Any:
    """The array-API namespace of `array`, resolved once per array type."""
    xp = _NAMESPACES.get(type(array))
    if xp is None:
        xp = _NAMESPACES[type(array)] = device_of(array).xp
    return xp


def device_of(array: Any) -> Device:
    """The needle Device that holds a native array."""
    module = type(array).__module__
    if module.startswith("numpy"):
        return cpu()
    if module.startswith("cupy"):
        return cuda(array.device.id)
    if module.startswith("torch"):
        return torch(str(array.device))
    if module.startswith(("jax", "jaxlib")):
        return _jax_device_of(array)
    if module.startswith("array_api_strict"):
        import array_api_strict as xs

        for index, name in enumerate(STRICT_DEVICES):
            if array.device == xs.Device(name):
                return strict(index)
    raise TypeError(f"needle has no device for arrays of type {type(array).__name__}")


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


def _jax_device_of(array: Any) -> Device:
    """jax() for arrays on jax's default device, else jax("platform:id")."""
    (native,) = array.devices()
    default = jax()
    if default.enabled() and default.native == native:
        return default
    return jax(f"{native.platform}:{native.id}")
