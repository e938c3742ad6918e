"""DLPack's device descriptions, for the messages of cross-library array exchange."""

from __future__ import annotations

from typing import Any

# DLPack's device types (DLDeviceType), for messages
DLPACK_DEVICE_TYPES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan",
                       8: "Metal", 9: "VPI", 10: "ROCm", 11: "ROCm host", 13: "CUDA managed",
                       14: "oneAPI"}


def dlpack_device_of(obj: Any) -> tuple[int, int]:
    """`obj.__dlpack_device__()` as two ints; TypeError for objects without DLPack."""
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"from_dlpack: a {type(obj).__name__} has no __dlpack__ and "
                        "__dlpack_device__; expected an array of numpy, PyTorch, JAX, CuPy or "
                        "another DLPack library, or a needle Tensor")
    kind, index = obj.__dlpack_device__()
    return int(kind), int(index)


def describe_dlpack_device(where: tuple[int, int]) -> str:
    """"CPU", "CUDA:0", ... for a (DLPack device type, index) pair."""
    kind, index = where
    name = DLPACK_DEVICE_TYPES.get(kind, f"DLPack device type {kind}")
    return name if kind == 1 else f"{name}:{index}"


def dlpack_dtype_name(obj: Any) -> str | None:
    """The name of `obj.dtype` without its library's prefix ("bfloat16" for torch.bfloat16,
    jax's and ml_dtypes' bfloat16, "float32" for array_api_strict.float32), for messages;
    None when `obj` has no dtype. Reads only the attribute, imports no library."""
    dtype = getattr(obj, "dtype", None)
    if dtype is None:
        return None
    try:
        name = str(dtype)
    except Exception:  # noqa: BLE001 - a producer's odd dtype object: no name to give
        return None
    return name.rsplit(".", 1)[-1] or None
