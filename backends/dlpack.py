"""DLPack: the exchange of arrays with other libraries that a Device does (`DLPackExchange`),
and DLPack's device descriptions for its messages."""

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


class DLPackExchange:
    """A Device's DLPack side: zero-copy exchange with other array libraries (mixed into
    `Device`, which gives `empty`, `dtype`, `xp` and `_dlpack_device`)."""

    @property
    def dlpack_device(self) -> tuple[int, int]:
        """(DLPack device type, index) of this device's memory: (1, 0) for host memory."""
        if self._dlpack_device is None:
            self._dlpack_device = dlpack_device_of(self.empty((1,)))
        return self._dlpack_device

    def to_dlpack(self, array: Any, **kwargs: Any) -> Any:
        """`array.__dlpack__(**kwargs)`: a capsule sharing the array's memory."""
        return array.__dlpack__(**kwargs)

    def from_dlpack(self, obj: Any) -> Any:
        """An array of this device sharing the memory of `obj` (anything with `__dlpack__`)
        where its library can; ValueError when that memory is on another device."""
        def has_dtype(spec: Any) -> bool:
            try:
                self.dtype(spec)
            except TypeError:
                return False
            return True

        where = dlpack_device_of(obj)
        if where != self.dlpack_device:
            raise ValueError(
                f"from_dlpack: the {type(obj).__name__} is in {describe_dlpack_device(where)} "
                f"memory, {self} holds {describe_dlpack_device(self.dlpack_device)} memory; "
                "name the device it is on, or move it there first")
        self._check_dlpack(obj)  # (needle's own errors: before the library's are translated)
        try:
            array = self._from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            # a dtype the library cannot read (numpy: RuntimeError "Unsupported dtype in
            # DLTensor" for bfloat16 and 8-bit floats; a BufferError from an exporter) is
            # the TypeError that the other devices give after the fact, named from the
            # object's own `dtype`
            name = dlpack_dtype_name(obj)
            if name is not None and not has_dtype(name):
                raise TypeError(f"from_dlpack: dtype {name} is not supported on "
                                f"{self}") from None
            if isinstance(e, (BufferError, RuntimeError)):
                raise ValueError(f"from_dlpack: {self} cannot take this "
                                 f"{type(obj).__name__} ({e})") from e
            raise
        if not has_dtype(array.dtype):
            raise TypeError(f"from_dlpack: dtype {dlpack_dtype_name(array)} is not "
                            f"supported on {self}")
        return array

    def _check_dlpack(self, obj: Any) -> None:
        """Raise where this device refuses `obj`'s data itself (jax without x64: integers
        outside 32 bits); nothing here."""

    def _from_dlpack(self, obj: Any) -> Any:
        """The namespace's `from_dlpack` (called with the memory on this device)."""
        return self.xp.from_dlpack(obj)
