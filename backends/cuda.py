"""The cuda device: cupy through array-api-compat, imported only when first used."""

from __future__ import annotations

import contextlib
import types
import warnings
from typing import Any, Callable

import numpy as np

from .cpu import direct_views
from .device import Device
from .launch import DirectLaunch
from .splitmix import SET_STATE_CUDA, SPLITMIX_UNIFORM_AT_CUDA, SPLITMIX_UNIFORM_CUDA

INSTALL_HINT = ("install the GPU extra for your CUDA version (nvidia-smi's \"CUDA Version\"): "
                "`pip install needle[cuda12]` or `pip install needle[cuda13]`")


def direct_namespace(compat: Any, lib: Any,
                     capturing: Callable[[], bool] = lambda: False) -> types.ModuleType:
    """`compat` (array_api_compat.cupy) with `reshape` (no copy asked), `permute_dims`,
    `matrix_transpose` (cpu.direct_views) and `matmul` calling the library (`lib`: cupy)
    directly, and `stack` and `concat` made by one copy per array while `capturing()` (a
    CUDA graph is captured: cupy's own joins of many arrays copy a table of pointers from
    the host, which a capture refuses).

    compat's wrappers cost a few us a call (a ResNet9 step on an H100 made about 270 such
    calls, 145 of them reshapes); the results are the same arrays. Written for any library
    with numpy's API, so the cpu tests check it with numpy in cupy's place.
    """
    ns = types.ModuleType(f"needle.backends.cuda.xp({lib.__name__})", compat.__doc__)
    ns.__dict__.update({k: v for k, v in vars(compat).items() if not k.startswith("__")})
    ns.__dict__.update(direct_views(compat))

    compat_stack, compat_concat = compat.stack, compat.concat

    def stack(arrays, /, *, axis=0):
        if not capturing():
            return compat_stack(arrays, axis=axis)
        arrays = list(arrays)
        _same_shapes("stack", arrays, None)
        axis = _axis(axis, arrays[0].ndim + 1)
        return _joined(lib, [lib.expand_dims(a, axis) for a in arrays], axis)

    def concat(arrays, /, *, axis=0):
        if not capturing():
            return compat_concat(arrays, axis=axis)
        arrays = list(arrays)
        if axis is None:
            arrays, axis = [a.reshape(-1) for a in arrays], 0
        axis = _axis(axis, arrays[0].ndim)
        _same_shapes("concat", arrays, axis)
        return _joined(lib, arrays, axis)

    ns.matmul, ns.stack, ns.concat = lib.matmul, stack, concat
    return ns


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of bounds for a result of {ndim} dimensions")
    return axis % ndim


def _same_shapes(what: str, arrays: list, axis: int | None) -> None:
    """ValueError unless the arrays' shapes agree (but along `axis`), as cupy's own check."""
    if not arrays:
        raise ValueError(f"{what}: needs at least one array")
    def key(a):
        return (a.ndim, tuple(n for i, n in enumerate(a.shape) if i != axis))
    if len({key(a) for a in arrays}) > 1:
        raise ValueError(f"{what}: the arrays' shapes differ: "
                         f"{', '.join(str(tuple(a.shape)) for a in arrays)}")


def _joined(lib: Any, arrays: list, axis: int) -> Any:
    """The arrays joined along `axis` by one copy each into a fresh array (no host table)."""
    shape = list(arrays[0].shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = lib.empty(tuple(shape), dtype=lib.result_type(*arrays))
    start, before = 0, (slice(None),) * axis
    for a in arrays:
        out[before + (slice(start, start + a.shape[axis]),)] = a
        start += a.shape[axis]
    return out


#: the context of a launch where there is nothing to switch
_NO_SWITCH = contextlib.nullcontext()


#: the indices of the GPUs whose cuda device this process has used
_IN_USE: set[int] = set()


def take_gpu(native: Any, index: int, gpus: int, in_use: set[int]) -> str:
    """At the first use of cuda(`index`) (`native`, its cupy Device) among `gpus` visible
    GPUs: make it cupy's current GPU if it is the first this process uses, as cupy computes
    plain array operations and makes arrays on its current GPU (needle's own kernels switch
    GPUs themselves); else the text of a warning that a second GPU is not switched to."""
    first = not in_use
    in_use.add(index)
    if len(in_use) == 1:
        if first and gpus > 1:
            native.use()
        return ""
    return (f"cuda({index}): this process already uses GPU(s) "
            f"{sorted(in_use - {index})}; cupy computes array operations on its current GPU "
            "and needle switches GPUs for its own kernels only, so run each GPU's work "
            f"inside `with ndl.cuda(i).native:` (one process per GPU needs nothing)")


def launch_scope(native: Any, gpus: int) -> Any:
    """The context needle's kernels launch in on GPU `native` (a cupy Device) of `gpus`
    visible ones: the Device itself, which makes its GPU current (and the previous one again
    after), or, with one GPU, always current, a no-op (entering and leaving a cupy Device
    cost about 1 us of host time, about 100 times a ResNet9 step)."""
    return native if gpus > 1 else _NO_SWITCH


class CUDADevice(Device):
    """Arrays in GPU memory, computed with cupy. Constructing one never touches the GPU."""

    kind = "cuda"
    defers_checks = True

    def __init__(self, index: int = 0):
        super().__init__(index)
        self._cupy: Any = None  # the cupy and cupyx modules, set by _load
        self._cupyx: Any = None
        #: while a CUDA graph is captured: the matmul that calls cuBLAS directly
        self.capture_matmul: Any = None
        #: while a CUDA graph is captured: [state, count]: draws read the generator from
        #: `state` (2 uint64 on this GPU, written before each replay), `count` made so far
        self.capture_draws: list | None = None
        self._current: Any = None  # what kernels launch in (`current`), set by _load
        #: (name, dtype) -> the raw kernel's launcher on this GPU (raw_kernel)
        self._launchers: dict[tuple[str, str], Any] = {}

    def _probe(self) -> str:
        """Why cupy or GPU `index` is missing, or "" when both are there."""
        return _probe(self.index)

    def _load(self) -> tuple[Any, Any]:
        import array_api_compat.cupy as compat  # only after _probe found cupy and the GPU
        import cupy
        import cupyx

        self._cupy, self._cupyx = cupy, cupyx
        capturing = lambda: self.capture_matmul is not None  # noqa: E731 (set while captured)
        native = cupy.cuda.Device(self.index)
        gpus = cupy.cuda.runtime.getDeviceCount()
        self._current = launch_scope(native, gpus)
        message = take_gpu(native, self.index, gpus, _IN_USE)
        if message:
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        return direct_namespace(compat, cupy, capturing), native

    @property
    def current(self) -> Any:
        """What needle's kernels launch in (`with gpu.current:`): this GPU made cupy's
        current one (its cupy Device), or nothing to do where it is the only GPU."""
        if self._xp is None:
            self._require()
        return self._current

    @property
    def cupy(self) -> Any:
        """The cupy module (for this device's own kernels), imported after the check."""
        self._require()
        return self._cupy

    def elementwise_kernel(self, name: str, params: str, outs: str, body: str,
                           exact: bool = False) -> Any:
        """needle's own cupy ElementwiseKernel `name`, compiled on first use (each has a
        numpy reference that the tests compare it with); `exact` ones are compiled with
        --fmad=false, so no multiply-add is contracted (the portable rule's roundings)."""
        kernel = _KERNELS.get(name)
        if kernel is None:
            kernel = _KERNELS[name] = self.cupy.ElementwiseKernel(
                params, outs, body, f"needle_{name}", options=("--fmad=false",) if exact else ())
        return kernel

    def raw_kernel(self, name: str, source: str, entry: str, dtype: str) -> Any:
        """needle's own cupy RawKernel `entry` of CUDA C `source` with its element type `T`
        the C type of `dtype` ("float32", "float64" or "int64"), compiled on first use;
        launched on this GPU as kernel(grid, block, args) by one driver call (launch.py)."""
        launcher = self._launchers.get((name, dtype))
        if launcher is None:
            cp, typed = self.cupy, typed_source(source, dtype)  # (cupy and this GPU, loaded)
            kernel = _KERNELS.get((name, dtype))
            if kernel is None:
                kernel = _KERNELS[name, dtype] = cp.RawKernel(typed, entry)
            try:
                from cupy_backends.cuda.api import driver
            except ImportError:  # (a cupy without its driver binding: cupy's own launches)
                launcher = kernel
            else:
                launcher = DirectLaunch(kernel, typed, entry, dtype, self._native, cp, driver)
            self._launchers[name, dtype] = launcher
        return launcher

    own_generator = True

    def _new_generator(self, seed: int) -> list[int]:
        """[seed, offset]: a counter-based generator (splitmix.splitmix_uniform), whose state
        a checkpoint holds exactly."""
        return [seed % 2**64, 0]

    def rng_state(self) -> np.ndarray | None:
        """(seed, offset) as uint64; None while it would come from numpy's state."""
        generator = self._generator_for_state(restoring=False)
        return None if generator is None else np.array(generator, dtype=np.uint64)

    def set_rng_state(self, state: np.ndarray) -> None:
        """Restore a state `rng_state` gave."""
        seed, offset = (int(v) for v in np.asarray(state, dtype=np.uint64))
        self._generator_for_state(restoring=True)[:] = [seed, offset]

    def random(self, shape: tuple[int, ...]) -> Any:
        """float32 uniform draws made on this GPU by one kernel (splitmix.splitmix_uniform);
        inside a CUDA graph's capture, from the graph's generator state instead."""
        generator, cp, capture = self.generator(), self._cupy, self.capture_draws
        with self._current:
            out = cp.empty(tuple(shape), dtype=cp.float32)
            if out.size and capture is None:
                uniform = self.elementwise_kernel("uniform", "uint64 seed, uint64 offset",
                                                  "float32 u", SPLITMIX_UNIFORM_CUDA)
                uniform(np.uint64(generator[0]), np.uint64(generator[1]), out)
            elif out.size:
                uniform = self.elementwise_kernel("uniform_at", "raw uint64 state, uint64 rel",
                                                  "float32 u", SPLITMIX_UNIFORM_AT_CUDA)
                uniform(capture[0], np.uint64(capture[1] % 2**64), out)
        if capture is None:
            self.advance_generator(out.size)
        else:  # (the host offset moves when the graph replays: advance_generator)
            capture[1] += out.size
        return out

    def write_generator(self, state: Any) -> None:
        """Write the generator's (seed, offset) into `state` (2 uint64 on this GPU) by one
        kernel, no host copy: what a graph's draws read at its next replay."""
        seed, offset = self.generator()
        with self._native:
            write = self.elementwise_kernel("set_state", "uint64 seed, uint64 offset",
                                            "uint64 s", SET_STATE_CUDA)
            write(np.uint64(seed), np.uint64(offset), state)

    def advance_generator(self, count: int) -> None:
        """Move the offset past `count` draws (made eagerly, or by a graph's replay)."""
        generator = self.generator()
        generator[1] = (generator[1] + count) % 2**64

    def _from_dlpack(self, obj: Any) -> Any:
        """cupy's from_dlpack, with this GPU current."""
        with self._native:
            return self._cupy.from_dlpack(obj)

    def owns(self, array: Any) -> bool:
        """cupy arrays on this GPU live here."""
        if not type(array).__module__.startswith("cupy"):
            return False
        return array.device.id == self.index

    def from_numpy(self, array: np.ndarray) -> Any:
        """Copy a host array to this GPU."""
        self._require()  # RuntimeError with the install hint when cupy or the GPU is missing
        with self._native:
            return self._cupy.array(array, copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        """Copy to the host (cupy refuses implicit conversion); deferred checks first."""
        self._require()
        if self._pending:
            self.check_pending()
        return array.get()

    def empty_pinned(self, nbytes: int) -> np.ndarray:
        """`nbytes` of page-locked host memory as a uint8 numpy array (fast GPU copies);
        needle.distributed stages arrays through it for an MPI that is not CUDA-aware."""
        self._require()
        return self._cupyx.empty_pinned((nbytes,), dtype=np.uint8)


#: needle's own cupy kernels by name, compiled on first use
_KERNELS: dict[str | tuple[str, str], Any] = {}

#: the C element type `T` of needle's raw kernels, per dtype
C_TYPES = {"float32": "float", "float64": "double", "int64": "long long"}


def typed_source(source: str, dtype: str) -> str:
    """CUDA C `source` with its element type `T` defined as `dtype`'s C type."""
    return f"typedef {C_TYPES[dtype]} T;\n{source}"


def _probe(index: int) -> str:
    """An explanation of what is missing for GPU `index`, or "" when it is usable."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"cuda() is unavailable: cupy cannot be imported ({e}); {INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"cuda() is unavailable: no usable CUDA driver or GPU ({e}); {INSTALL_HINT}"
    if index >= count:
        return f"cuda({index}) is unavailable: this machine has {count} CUDA GPU(s)"
    return ""
