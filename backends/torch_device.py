"""The torch device: PyTorch tensors (CPU, CUDA or Apple MPS) through array-api-compat.

PyTorch only computes here: needle does the differentiation, so every tensor is created with
`requires_grad=False`. torch is imported when the device is first asked about, never before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device

INSTALL_HINT = "install PyTorch with `pip install needle[torch]`"
# 64-bit dtypes and the 32-bit ones data of them becomes where a device has no 64-bit floats
NARROWER = {"float64": "float32", "complex128": "complex64"}


def normalize(device: str | None) -> str:
    """"cpu", "cuda" (= "cuda:0"), "cuda:N" or "mps", as the key of the cached device."""
    name = "cpu" if device is None else str(device).strip().lower()
    if name == "cuda":
        return "cuda:0"
    kind, _, index = name.partition(":")
    if kind in ("cpu", "mps") and index in ("", "0"):
        return kind
    if kind == "cuda" and index.isdigit():
        return f"cuda:{int(index)}"
    raise ValueError(f"torch device {device!r}: expected 'cpu', 'cuda', 'cuda:N' or 'mps'")


#: unsigned dtypes torch only stores (no arithmetic): refused on the torch device
SHELL_DTYPES = ("uint16", "uint32", "uint64")

class TorchDevice(Device):
    """Arrays that are torch.Tensors on one torch device ("cpu", "cuda:N" or "mps").

    `index` is the torch device's name. MPS has no float64: there float64 data becomes
    float32 (as PyTorch's `.to("mps")` demands) and asking for dtype float64 raises TypeError.
    """

    kind = "torch"

    def __init__(self, index: str = "cpu"):
        super().__init__(normalize(index))
        self._torch: Any = None

    def __repr__(self) -> str:
        return "torch()" if self.index == "cpu" else f"torch({self.index!r})"

    __str__ = __repr__

    def _probe(self) -> str:
        """Why torch or the requested accelerator is missing, or "" when both are there."""
        return _probe(self.index)

    def _load(self) -> tuple[Any, Any]:
        import torch

        self._torch = torch
        return torch_namespace(), torch.device(self.index)

    @property
    def has_float64(self) -> bool:
        """False on MPS, which has no 64-bit floats."""
        return self.index != "mps"

    def _build_dtype_table(self, xp: Any) -> None:
        super()._build_dtype_table(xp)
        # torch's uint16/32/64 are storage types: no addition, max or negation on them
        # (NotImplementedError at the first op), so they are refused where made, by name
        for name in SHELL_DTYPES + (() if self.has_float64 else tuple(NARROWER)):
            native = self._dtypes.pop((str, name), None)
            self._dtypes.pop((type(native), native), None)
        self._public = {native: np.dtype(key[1]) for key, native in self._dtypes.items()
                        if key[0] is str}

    def dtype(self, spec: Any) -> Any:
        """The torch dtype for `spec`; TypeError naming the device where it has none."""
        try:
            return super().dtype(spec)
        except TypeError:
            name = str(getattr(spec, "name", spec))
            if not self.has_float64 and name in NARROWER:
                raise TypeError(f"dtype {spec!r}: {self} has no 64-bit floats; use "
                                "float32") from None
            if name in SHELL_DTYPES:
                raise TypeError(f"dtype {name}: torch has no arithmetic on it (its uint16, "
                                "uint32 and uint64 only store data); use uint8 or a signed "
                                "integer dtype") from None
            raise

    def public_dtype(self, native: Any) -> np.dtype:
        """torch dtypes do not compare equal to strings: report the numpy dtype of that name."""
        return self._public[native]

    # ----- random numbers during training --------------------------------------------
    own_generator = True

    def _new_generator(self, seed: int) -> Any:
        """A torch.Generator of this torch device (torch.manual_seed leaves it alone), seeded
        with a hash of `seed`: torch's cpu generator is numpy's MT19937, and seeded with the
        same number its draws would be numpy's (the Dropout masks a function of the weights)."""
        return self._torch.Generator(device=self._native).manual_seed(_mix64(seed))

    def rng_state(self) -> np.ndarray | None:
        """The torch.Generator's state (bytes); None while it would come from numpy's state."""
        generator = self._generator_for_state(restoring=False)
        return None if generator is None else generator.get_state().numpy().copy()

    def set_rng_state(self, state: np.ndarray) -> None:
        """Restore a state `rng_state` gave."""
        generator = self._generator_for_state(restoring=True)  # (loads the device)
        state = self._torch.from_numpy(np.asarray(state, dtype=np.uint8))
        try:
            generator.set_state(state)
        except RuntimeError as e:
            raise ValueError(f"{self}: not a state of this device's generator ({e})") from None

    def random(self, shape: tuple[int, ...]) -> Any:
        """float32 uniform draws made on this torch device by its own generator."""
        generator = self.generator()  # (loads the device on its first use)
        torch = self._torch
        return torch.rand(tuple(shape), generator=generator, device=self._native,
                          dtype=torch.float32)

    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        """As Device.asarray, never with torch's autograd on (a tensor requiring grad)."""
        if getattr(obj, "requires_grad", False) and type(obj).__module__.startswith("torch"):
            obj = obj.detach()  # (shares the memory; asarray copies it)
        return super().asarray(obj, dtype)

    # ----- conversion ------------------------------------------------------------------
    def owns(self, array: Any) -> bool:
        """torch.Tensors on this torch device live here."""
        if not type(array).__module__.startswith("torch"):
            return False
        self._require()
        return isinstance(array, self._torch.Tensor) and array.device == self._native

    def from_numpy(self, array: np.ndarray) -> Any:
        """A tensor holding a copy of the host data (float64 as float32 on MPS)."""
        self._require()
        if array.dtype.name in SHELL_DTYPES:
            self.dtype(array.dtype.name)  # (raises: torch has no arithmetic on it)
        narrower = None if self.has_float64 else NARROWER.get(array.dtype.name)
        host = np.array(array, dtype=narrower, copy=True, order="C")
        return self._torch.from_numpy(host).to(self._native)

    def adopt_numpy(self, array: np.ndarray) -> Any:
        """A fresh host array: shared with torch without a copy on the cpu."""
        if self.index == "cpu" and array.flags.c_contiguous and array.flags.writeable:
            self._require()
            return self._torch.from_numpy(array)
        return self.from_numpy(array)

    @property
    def multi_tensor_updates(self) -> bool:
        """On a GPU: the optimizers' foreach updates take every parameter in one launch per
        pass (backends/optimizer_updates_torch.py: CUDA GPUs), so no flat array is made."""
        return self.index.startswith("cuda")

    def conv_weights(self, array: Any) -> Any:
        """The weights in (C_out, C_in, K, K) memory order, seen as (K, K, C_in, C_out):
        PyTorch's convolution (cuDNN, oneDNN) reads exactly that layout as it is from an
        NCHW input, and copied any other into it at every call, forward and backward."""
        return array.permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)

    def laid_out_like(self, array: Any, like: Any) -> Any:
        """`array` copied into `like`'s strides where `like` is laid out otherwise than in C
        order (empty_like keeps a dense tensor's strides); else `array` itself."""
        if like.is_contiguous() or array.shape != like.shape or array.dtype != like.dtype:
            return array
        return self._torch.empty_like(like).copy_(array)

    def c_contiguous(self, array: Any) -> bool:
        """torch's own test of C order (a tensor has no numpy flags)."""
        return array.is_contiguous()

    @property
    def defers_checks(self) -> bool:
        """On a GPU (cuda, mps) a read to the host is a sync: checks wait for the next one."""
        return self.index != "cpu"

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy (deferred checks first)."""
        if self._pending:
            self.check_pending()
        return np.array(array.detach().cpu().numpy(), copy=True)


_NAMESPACE: list[Any] = []


def torch_namespace() -> Any:
    """array_api_compat.torch, with `maximum` and `minimum` of a floating tensor and a Python
    number as torch's clamp: compat's own make a tensor of the number on the device at every
    call, a host-to-device copy (a sync on a GPU: ReLU's max(a, 0) did one per call).

    `reshape`, `sum` over given axes, `matmul` of one dtype, `permute_dims` and
    `matrix_transpose` (of 2 or more dimensions) call torch directly: compat's Python around
    them (a dtype promotion per matmul) costs more host time than the op on small arrays,
    and on a GPU the host's time is the step's."""
    if not _NAMESPACE:
        import types

        import array_api_compat.torch as compat
        import torch

        ns = types.ModuleType("needle.backends.torch_device.xp", compat.__doc__)
        ns.__dict__.update({k: v for k, v in vars(compat).items() if not k.startswith("__")})
        numbers = (int, float)

        def maximum(x1, x2, /):
            if x2.__class__ in numbers and x1.dtype.is_floating_point:
                return torch.clamp_min(x1, x2)
            return compat.maximum(x1, x2)

        def minimum(x1, x2, /):
            if x2.__class__ in numbers and x1.dtype.is_floating_point:
                return torch.clamp_max(x1, x2)
            return compat.minimum(x1, x2)

        def reshape(x, /, shape, *, copy=None):
            return torch.reshape(x, shape) if copy is None else compat.reshape(x, shape,
                                                                                 copy=copy)

        def sum(x, /, *, axis=None, dtype=None, keepdims=False):
            if dtype is None and axis is not None and axis != ():
                return torch.sum(x, axis, keepdim=keepdims)
            return compat.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)

        def matmul(x1, x2, /):
            if x1.dtype is not x2.dtype:
                return compat.matmul(x1, x2)  # the standard's promotion
            lead = x1.shape[:-2]
            if x1.ndim > 3 and x2.ndim == x1.ndim and x2.shape[:-2] == lead:
                # stacks of one batch shape (attention's heads): one bmm of the stacks
                # flattened, what torch.matmul runs after expanding both (two ops fewer)
                n = 1
                for size in lead:
                    n *= size
                out = torch.bmm(x1.reshape(n, *x1.shape[-2:]), x2.reshape(n, *x2.shape[-2:]))
                return out.view(*lead, *out.shape[-2:])
            return torch.matmul(x1, x2)

        def matrix_transpose(x, /):
            return x.transpose(-1, -2) if x.ndim >= 2 else compat.matrix_transpose(x)

        ns.maximum, ns.minimum, ns.reshape, ns.sum, ns.matmul = (maximum, minimum, reshape,
                                                                 sum, matmul)
        ns.matrix_transpose = matrix_transpose
        ns.permute_dims = torch.permute
        _NAMESPACE.append(ns)
    return _NAMESPACE[0]


def _probe(name: str) -> str:
    """An explanation of what is missing for torch device `name`, or "" when it is usable."""
    label = "torch()" if name == "cpu" else f"torch({name!r})"
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        return f"{label} is unavailable: torch cannot be imported ({e}); {INSTALL_HINT}"
    try:
        if name.startswith("cuda"):
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if int(name.split(":")[1]) >= count:
                return (f"{label} is unavailable: this PyTorch sees {count} CUDA GPU(s) "
                        f"(torch {torch.__version__})")
        elif name == "mps" and not torch.backends.mps.is_available():
            return f"{label} is unavailable: this PyTorch has no Apple MPS device"
    except Exception as e:
        return f"{label} is unavailable: {e}"
    return ""


def _mix64(seed: int) -> int:
    """splitmix64's hash of `seed`, a 64-bit seed unrelated to `seed` as a number."""
    z = (seed + 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)

