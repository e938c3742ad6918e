"""The Device base class: one array namespace, its native device, creation and random numbers."""

from __future__ import annotations

import operator
import threading
from typing import Any, Callable

import numpy as np

from .call_hook import record_calls
from .dlpack import DLPackExchange
from .host_data import check_fits, host_array, out_of_range
from .layout import Layout

# dtype names the array API standard defines (plus float16 where a library has it)
DTYPE_NAMES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)
# numpy dtype kinds that tensors hold: bool, signed and unsigned int, float, complex
NUMERIC_KINDS = "biufc"

class Device(Layout, DLPackExchange):
    """A place where arrays live: an array-API namespace plus a native device object.

    Subclasses set `kind` and implement `_load()` (returning the namespace and the native
    device), `owns()`, `from_numpy()` and `to_numpy()`, and may override `enabled()`.
    The namespace is resolved once per device, on first use, never at import time; every
    entry point raises the device's RuntimeError (with its install hint) where it cannot be
    used. A device pickles and copies as its kind and index, back to the cached device.
    """

    kind = "device"
    #: the seed of the last `needle.manual_seed` (devices made after it start from it too)
    global_seed: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        record_calls(cls)  # a device's own draws (random) are recorded too

    def __init__(self, index: int = 0):
        self.index = index
        self._xp = None
        self._native = None
        self._dtypes: dict[Any, Any] = {}
        self._reason: str | None = None  # unavailable_reason(), once probed
        self._generator: Any = None  # the training generator, made on first draw
        # deferred checks: (thread, 0-d bool array, message function); each thread's read
        # raises its own and those of threads that ended (whose results another thread reads)
        self._pending: list = []
        self._pending_lock = threading.Lock()
        self._seed: int | None = Device.global_seed  # None: seed from numpy's state
        self._dlpack_device: tuple[int, int] | None = None

    # ----- identity -------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{self.kind}()" if self.index == 0 else f"{self.kind}({self.index})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Device) and other.kind == self.kind and other.index == self.index
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __reduce__(self) -> tuple:
        # by kind and index: a device holds its namespace module, which cannot be pickled,
        # and unpickling (or copying) must give back the cached device itself
        from . import get_device

        return get_device, (self.kind, self.index)

    # ----- namespace ------------------------------------------------------------------
    def enabled(self) -> bool:
        """True when this device can hold arrays on this machine (never raises)."""
        return self.unavailable_reason() == ""

    def _load(self) -> tuple[Any, Any]:
        raise NotImplementedError

    def _require(self) -> None:
        if self._xp is None:
            if not self.enabled():
                raise RuntimeError(self.unavailable_reason())
            xp, self._native = self._load()
            self._build_dtype_table(xp)
            self._xp = xp  # last: another thread seeing it finds the dtype table built

    def unavailable_reason(self) -> str:
        """Why this device cannot be used here (empty when it can): `_probe`, run once."""
        if self._reason is None:
            self._reason = self._probe()
        return self._reason

    def _probe(self) -> str:
        """Import the device's library and find its accelerator, without raising: why the
        device cannot be used, or "" (cpu: always usable)."""
        return ""

    @property
    def xp(self) -> Any:
        """The array-API namespace of this device."""
        if self._xp is None:
            self._require()
        return self._xp

    @property
    def native(self) -> Any:
        """The namespace's own device object (what `device=` in xp calls expects)."""
        if self._xp is None:
            self._require()
        return self._native

    # ----- dtypes ---------------------------------------------------------------------
    def _build_dtype_table(self, xp: Any) -> None:
        for name in DTYPE_NAMES:
            native = getattr(xp, name, None)
            if native is not None:
                self._dtypes[(str, name)] = native
                self._dtypes[(type(native), native)] = native

    def dtype(self, spec: Any) -> Any:
        """The native dtype for `spec`: a name ("float32"), a numpy type or dtype, or native."""
        if spec is None:
            return None
        key = (type(spec), spec)  # typed key: strict dtypes must not be compared with numpy's
        try:
            return self._dtypes[key]
        except (KeyError, TypeError):
            pass
        self._require()
        try:
            name = np.dtype(spec).name
        except TypeError:
            name = getattr(spec, "name", str(spec))
        native = self._dtypes.get((str, name))
        if native is None:
            raise TypeError(f"dtype {spec!r} is not supported on {self}")
        try:
            self._dtypes[key] = native
        except TypeError:  # unhashable spec
            pass
        return native

    def public_dtype(self, native: Any) -> np.dtype:
        """The numpy dtype equal to a native dtype, so `t.dtype == "float32"` on every device."""
        return native

    @property
    def array_type(self) -> type:
        """The class of this device's arrays (numpy.ndarray on cpu)."""
        return type(self.empty((0,)))

    # ----- creation -------------------------------------------------------------------
    def zeros(self, *shape, dtype: Any = "float32") -> Any:
        """An array of zeros (`zeros(2, 3)` or `zeros((2, 3))`)."""
        return self.xp.zeros(_shape(shape), dtype=self.dtype(dtype), device=self.native)

    def ones(self, *shape, dtype: Any = "float32") -> Any:
        """An array of ones."""
        return self.xp.ones(_shape(shape), dtype=self.dtype(dtype), device=self.native)

    def full(self, shape, fill_value, dtype: Any = "float32") -> Any:
        """An array filled with `fill_value`."""
        return self.xp.full(_shape((shape,)), fill_value, dtype=self.dtype(dtype),
                            device=self.native)

    def empty(self, shape, dtype: Any = "float32") -> Any:
        """An uninitialised array."""
        return self.xp.empty(_shape((shape,)), dtype=self.dtype(dtype), device=self.native)

    def one_hot(self, n: int, i, dtype: Any = "float32") -> Any:
        """Rows of the n x n identity picked by the integer labels `i` (shape `i.shape + (n,)`)."""
        xp = self.xp
        idx = i if self.owns(i) else self.asarray(i)
        idx = xp.astype(idx, xp.int64)
        classes = xp.arange(n, dtype=xp.int64, device=self.native)
        return xp.astype(xp.expand_dims(idx, axis=-1) == classes, self.dtype(dtype))

    # ----- random numbers: numpy's global state, so np.random.seed reproduces the course -----
    def rand(self, *shape) -> Any:
        """Uniform [0, 1) float64 draws, `np.random.rand(*shape)`, placed on this device."""
        self._require()  # an unavailable device raises before the draw changes numpy's state
        return self.adopt_numpy(np.asarray(np.random.rand(*shape)))

    def randn(self, *shape) -> Any:
        """Standard normal float64 draws, `np.random.randn(*shape)`, placed on this device."""
        self._require()
        return self.adopt_numpy(np.asarray(np.random.randn(*shape)))

    # ----- random numbers during training: the device's own generator ------------------
    #: whether the device draws from a generator of its own (else numpy's global state)
    own_generator = False

    def manual_seed(self, seed: int) -> None:
        """Seed this device's training generator with `seed` (made afresh at the next draw;
        numpy's global state where that is the device's generator)."""
        seed = operator.index(seed)  # (TypeError for 1.7 or "3")
        if not self.own_generator:
            np.random.seed(seed)
        self._seed, self._generator = seed, None

    def generator(self) -> Any:
        """The training generator, made at its first use from `manual_seed`'s seed or else
        from a draw of numpy's global state at that moment (so `np.random.seed(k)` fixes
        it when set before that first use)."""
        if self._generator is None:
            self._require()
            seed = self._seed
            if seed is None:
                seed = int(np.random.randint(0, 2**31 - 1, dtype=np.int64))
            self._generator = self._new_generator(seed)
        return self._generator

    def _new_generator(self, seed: int) -> Any:
        """A generator of the device's library seeded with `seed` (None here: numpy's
        global state is the generator)."""
        return None

    def rng_state(self) -> np.ndarray | None:
        """The training generator's state as a host array, for checkpoints (None where the
        generator is numpy's global state, saved on its own, or cannot be read)."""
        return None

    def _generator_for_state(self, restoring: bool) -> Any:
        """The generator whose state is read or restored, made without a draw of numpy's
        global state (a checkpoint must not change the data order): None to read where it
        would still come from numpy's state (which the checkpoint holds)."""
        if self._generator is None and self._seed is None:
            if not restoring:
                return None
            self._require()
            self._generator = self._new_generator(0)  # its state is replaced at once
        return self.generator()

    def set_rng_state(self, state: np.ndarray) -> None:
        """Restore a state `rng_state` gave."""
        raise ValueError(f"{self} has no generator state of its own to restore")

    def random(self, shape: tuple[int, ...]) -> Any:
        """Uniform [0, 1) draws of `shape` made where the arrays live, for randomness during
        training (Dropout): float64 from numpy's global state here (the course's numbers);
        devices with a generator of their own draw float32 on the device from it."""
        return self.rand(*shape)

    # ----- checks left on the device until the next read ------------------------------
    #: whether a read to the host stalls an accelerator's queue: checks of values (index
    #: ranges) are then deferred to the next read instead of syncing in every step
    defers_checks: bool = False
    #: deferred checks kept at most before they are read (one sync per this many)
    MAX_PENDING = 64

    def defer_check(self, bad: Any, message: Callable[[], str]) -> None:
        """Remember `bad`, a 0-d bool array of this device that must be False; if it is
        not, this thread's next read to the host (`to_numpy`) raises ValueError(message())."""
        me = threading.current_thread()
        with self._pending_lock:
            self._pending.append((me, bad, message))
            full = sum(p[0] is me for p in self._pending) >= self.MAX_PENDING  # (this
            # thread's: another's unread checks must not make every lookup here a read)
        if full:
            self.check_pending()

    def discard_pending(self) -> None:
        """Forget this thread's deferred checks (of arrays a failed CUDA-graph capture never
        computed)."""
        me = threading.current_thread()
        with self._pending_lock:
            self._pending = [p for p in self._pending if p[0] is not me]

    def check_pending(self) -> None:
        """Read this thread's deferred checks (and those of threads that ended) at once;
        raise the first that failed. Another live thread's stay for its own next read."""
        me = threading.current_thread()
        with self._pending_lock:
            pending, rest = [], []
            for p in self._pending:
                (pending if p[0] is me or not p[0].is_alive() else rest).append(p)
            self._pending = rest
        if not pending:
            return
        xp = self.xp
        flags = self.to_numpy(xp.stack([xp.reshape(bad, ()) for _, bad, _ in pending]))
        for flag, (_, _, message) in zip(flags, pending):
            if flag:
                raise ValueError(message())

    # ----- initialisers: float64 arithmetic on the host, then one cast, as the course ----------
    # (on the device, in float32 where it has no float64, the numbers would differ by a
    # rounding step from device to device; done here they are the same bits everywhere)
    def uniform(self, shape: tuple[int, ...], low: float = 0.0, high: float = 1.0,
                dtype: Any = "float32") -> Any:
        """`np.random.rand(*shape) * (high - low) + low` in float64 on the host, cast to
        `dtype` (None: float64) there, then placed on this device."""
        self._require()  # an unavailable device raises before the draw changes numpy's state
        native = self.dtype(dtype)
        return self._host_result(np.random.rand(*shape) * (high - low) + low, native)

    def normal(self, shape: tuple[int, ...], mean: float = 0.0, std: float = 1.0,
               dtype: Any = "float32") -> Any:
        """`np.random.randn(*shape) * std + mean` in float64 on the host, cast to `dtype`
        (None: float64) there, then placed on this device."""
        self._require()
        native = self.dtype(dtype)
        return self._host_result(np.random.randn(*shape) * std + mean, native)

    def bernoulli(self, shape: tuple[int, ...], p: float = 0.5, dtype: Any = "bool") -> Any:
        """`np.random.rand(*shape) <= p` (float64 draws compared on the host), as `dtype`
        (None: bool), placed on this device."""
        self._require()
        native = self.dtype(dtype)
        return self._host_result(np.random.rand(*shape) <= p, native)

    def _host_result(self, host: Any, native: Any) -> Any:
        """A fresh host result cast to `native` (None: as it is) on the host, on this device."""
        host = np.asarray(host)
        if native is not None:
            with np.errstate(over="ignore"):  # (said below, with the bound)
                wide, host = host, host.astype(self.public_dtype(native), copy=False)
            if host.dtype.kind == "f" and host is not wide and np.isinf(host).any() and (
                    np.isfinite(wide).all()):
                raise ValueError(f"random values up to {np.abs(wide).max():.4g} overflow "
                                 f"dtype {host.dtype} (its largest is "
                                 f"{np.finfo(host.dtype).max:.4g}): a gain or bound too large")
        return self.adopt_numpy(host)

    # ----- conversion -----------------------------------------------------------------
    def owns(self, array: Any) -> bool:
        """True when `array` is a native array of this device's namespace on this device."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray) -> Any:
        """Copy a host numpy array onto this device, keeping its dtype."""
        raise NotImplementedError

    def adopt_numpy(self, array: np.ndarray) -> Any:
        """A fresh host array nobody else holds, on this device (cpu takes it without a copy)."""
        return self.from_numpy(array)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy of one of this device's arrays."""
        raise NotImplementedError

    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        """A new array on this device from a list, scalar, numpy array or any device's array.

        With `dtype=None` the input's dtype is kept (lists follow numpy's inference).
        """
        xp = self.xp  # raises RuntimeError with the reason when the device is unavailable
        dt = self.dtype(dtype)
        if self.owns(obj):
            if dt is None:
                self.dtype(obj.dtype)  # TypeError for a dtype needle does not hold (bfloat16)
            if dt is None or obj.dtype == dt:
                return xp.asarray(obj, copy=True)
            target = np.dtype(self.public_dtype(dt))
            if target.kind in "iu" and not self.defers_checks:  # (a read: host memory only)
                check_fits(self.to_numpy(obj), target)
            elif target.kind in "iu":
                self._defer_fits(obj, target)
            return xp.astype(obj, dt)  # a copy
        host = host_array(obj)
        if host.dtype.kind not in NUMERIC_KINDS:
            raise TypeError(
                f"tensor data must be numbers or booleans, not {type(obj).__name__} "
                f"(numpy dtype {host.dtype})"
            )
        if dt is not None:  # cast on the host, so the data is copied once
            target = np.dtype(self.public_dtype(dt))
            if target.kind in "iu":
                check_fits(host, target)
            host = host.astype(target, copy=False)
        return self.from_numpy(host)


    def _defer_fits(self, obj: Any, target: np.dtype) -> None:
        """check_fits of this device's array `obj` for integer dtype `target` as a deferred
        check (no read now): a ValueError at this thread's next read where a value would
        wrap, as check_fits raises at once for host data."""
        found = out_of_range(self.xp, obj, np.dtype(self.public_dtype(obj.dtype)), target)
        if found is not None:
            bad, message = found
            self.defer_check(bad, lambda: message)


record_calls(Device)


def _shape(shape: tuple) -> tuple:
    """Accept both `f(2, 3)` and `f((2, 3))`."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(int(s) for s in shape)
