"""needle's raw kernels launched by one driver call: cuLaunchKernel through cupy's own Cython
binding of it, the arguments packed by one struct call into a buffer of this thread's.

cupy's RawKernel call makes Python objects for every argument (a CPointer each, a numpy
array for each scalar) and looks the kernel and the stream up again; on the H100 a launch of
four arguments cost 7.08 us of host time (benchmarks/launch_costs.py, ninth session), about
as much as PyTorch's whole ReLU (7.38 us). Here the arguments are packed as the kernel
declares them (its C signature, read once from the source: an array as its data pointer, a
`long long` as 8 bytes, a `T` as the element type, ...), each in an 8-byte slot, with a table
of the slots' addresses after them. cuLaunchKernel copies them at the call (a CUDA graph's
capture too), so the buffer is free again when it returns. A thread's first launch of
each number of arguments is cupy's, which makes the GPU's CUDA context current there (the
driver needs one; the direct launches after it find it).

`DIRECT = False` (or NEEDLE_DIRECT_LAUNCH=0 in the environment) launches every raw kernel by
cupy's call, as before; so does a kernel whose signature has a type not packed here, and a
call whose arguments do not fit it (cupy's errors then). A direct launch that raises falls
back to cupy's call; a second failure turns direct launches off, with a RuntimeWarning.
"""

from __future__ import annotations

import ctypes
import os
import re
import struct
import threading
import warnings
from typing import Any, Callable

#: None: read from NEEDLE_DIRECT_LAUNCH at the first launch ("0": off); else on or off
DIRECT: bool | None = None

#: struct code and padding of each C parameter type packed here (a pointer: "*")
_C_CODES = {"*": "Q", "long long": "q", "unsigned long long": "Q", "int": "i4x",
            "unsigned int": "I4x", "float": "f4x", "double": "d", "bool": "?7x"}
#: the C type of `T`, per dtype (cuda.C_TYPES)
_T = {"float32": "float", "float64": "double", "int64": "long long"}

_LOCAL = threading.local()  # .buffers: argument count -> (buffer, its table's address)
_FAILURES: list[str] = []  # the direct launches' errors so far (two turn them off)


def enabled() -> bool:
    """Whether raw kernels launch directly (DIRECT, or the environment when it is None)."""
    global DIRECT
    if DIRECT is None:
        DIRECT = os.environ.get("NEEDLE_DIRECT_LAUNCH", "1") != "0"
    return DIRECT


def parameters(source: str, entry: str, dtype: str) -> list[str] | None:
    """The C types of kernel `entry`'s parameters in `source` ("*" for a pointer, `T` as
    `dtype`'s C type), or None where a type is not packed here or no signature is found."""
    found = re.search(r'extern\s+"C"\s+__global__\s+void\s+' + re.escape(entry) +
                      r"\s*\(([^)]*)\)", source)
    if found is None:
        return None
    types = []
    for param in found.group(1).split(","):
        words = param.replace("*", " * ").split()[:-1]  # (without the name)
        words = [w for w in words if w not in ("const", "__restrict__")]
        c = "*" if "*" in words else " ".join(_T.get(dtype, "?") if w == "T" else w
                                               for w in words)
        if c not in _C_CODES:
            return None
        types.append(c)
    return types


def packer(types: list[str]) -> Callable[[bytearray, tuple], None]:
    """pack(buf, args): the arguments of a kernel of these C types (as many as it has: the
    caller checks the count) into buf's 8-byte slots, an array as args[i].data.ptr; it
    raises AttributeError or struct.error for arguments that do not fit. One generated
    lambda: a loop over the types would run at every launch."""
    layout = struct.Struct("<" + "".join(_C_CODES[t] for t in types))
    values = ", ".join(f"a[{i}].data.ptr" if t == "*" else f"a[{i}]"
                       for i, t in enumerate(types))
    return eval(f"lambda buf, a: pack(buf, 0, {values})", {"pack": layout.pack_into})


def _buffer(n: int) -> tuple[bytearray, int]:
    """This thread's buffer for n arguments, made on its first use: n 8-byte slots, then
    the table of their addresses, and the table's address."""
    buffers = getattr(_LOCAL, "buffers", None)
    if buffers is None:
        buffers = _LOCAL.buffers = {}
        _LOCAL.pins = []
    found = buffers.get(n)
    if found is None:
        buf = bytearray(16 * n)
        pin = (ctypes.c_char * len(buf)).from_buffer(buf)  # (holds buf in place)
        _LOCAL.pins.append(pin)
        base = ctypes.addressof(pin)
        struct.pack_into(f"<{n}Q", buf, 8 * n, *(base + 8 * i for i in range(n)))
        found = buffers[n] = (buf, base + 8 * n)
    return found


class DirectLaunch:
    """A cupy RawKernel (`kernel`, entry `entry` of `source` with T of `dtype`) of GPU
    `native` (a cupy Device), called as it is, kernel(grid, block, args), and launched by
    one driver call (see the module's note)."""

    __slots__ = ("kernel", "native", "cupy", "driver", "stream", "launch", "n", "_pack",
                 "_function", "_loaded", "_types")

    def __init__(self, kernel: Any, source: str, entry: str, dtype: str, native: Any,
                 cupy: Any, driver: Any):
        self.kernel, self.native, self.cupy, self.driver = kernel, native, cupy, driver
        self.stream: Any = None  # cupy's get_current_stream and the driver's launchKernel,
        self.launch: Any = None  # read at the first launch
        self._types = parameters(source, entry, dtype)
        self.n = -1 if self._types is None else len(self._types)
        self._pack: Any = None  # the packer, made at the first launch (False: none)
        self._function = 0  # the CUfunction on this GPU, loaded at the first launch
        self._loaded: Any = None  # cupy's Function of it (held: its module stays loaded)

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        pack = self._pack
        if pack is None:
            pack = self._prepare()
        if not (pack and (DIRECT or DIRECT is None and enabled())) or len(args) != self.n or (
                0 in grid):
            self._check_scalars(args)  # (cupy's launches: the slow way, checked too)
            return self.kernel(grid, block, args, shared_mem=shared_mem)
        try:
            buf, table = _LOCAL.buffers[self.n]
        except (AttributeError, KeyError):  # this thread's first launch of n arguments:
            _buffer(self.n)  # cupy's, which makes the GPU's context current on a new thread
            self._check_scalars(args)
            return self.kernel(grid, block, args, shared_mem=shared_mem)
        try:
            pack(buf, args)
            g, b = grid + (1, 1), block + (1, 1)  # (tuples: a list is cupy's to take)
            if g[0] > 0x7FFFFFFF or g[1] > 0xFFFF or g[2] > 0xFFFF:
                raise TypeError  # (beyond CUDA's grid: cupy's error, no direct failure)
        except (AttributeError, TypeError, struct.error):  # cupy's call (and its errors)
            self._check_scalars(args)
            return self.kernel(grid, block, args, shared_mem=shared_mem)
        try:
            self.launch(self._function, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem,
                        self.stream().ptr, table, 0)
        except Exception as e:  # (a thread with no CUDA context yet, say): cupy's call
            _failed(e)
            self.kernel(grid, block, args, shared_mem=shared_mem)

    def _check_scalars(self, args: tuple) -> None:
        """TypeError for an array given for a scalar parameter: cupy's launch would pass
        its address as the number."""
        for i, (t, a) in enumerate(zip(self._types or (), args)):
            if t != "*" and isinstance(a, self.cupy.ndarray):
                raise TypeError(f"kernel {self.kernel!r}: argument {i} is an array where the "
                                f"kernel takes a {t}; pass a number (or a numpy scalar)")

    def _prepare(self) -> Any:
        """The packer (False where the signature has a type not packed here) and the
        kernel's CUfunction on this GPU (compiled, or read from cupy's cache)."""
        if self._types is None:
            self._pack = False
            return False
        self.stream, self.launch = self.cupy.cuda.get_current_stream, self.driver.launchKernel
        with self.native:
            self._loaded = self.kernel.kernel
        self._function = self._loaded.ptr
        self._pack = packer(self._types)
        return self._pack


def _failed(e: Exception) -> None:
    """Note a direct launch's failure; the second turns direct launches off, said once."""
    global DIRECT
    _FAILURES.append(f"{type(e).__name__}: {e}")
    if len(_FAILURES) == 2:
        DIRECT = False
        warnings.warn(f"needle: launching kernels directly failed twice ({'; '.join(_FAILURES)});"
                      " cupy launches them from now on", RuntimeWarning, stacklevel=3)
