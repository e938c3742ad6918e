"""The jax device: JAX arrays (CPU, GPU or TPU) through `jax.numpy`, an array-API namespace.

jax is imported when the device is first asked about, never before, and with numpy's global
random state saved and restored around that import (importing jax draws from it), so seeding
before or after the first jax use gives the same numbers.

64-bit types follow jax's own setting, which needle never changes: with `jax_enable_x64` on
(`JAX_ENABLE_X64=1`, or `jax.config.update("jax_enable_x64", True)` before the device's first
use) float64 works as on every device. With it off (jax's default) the device holds at most
32-bit types, as `jnp.asarray` makes them: 64-bit data becomes 32-bit, and asking for dtype
float64 (or int64, ...) raises a TypeError that says how to enable x64. 64-bit host integers
outside 32 bits raise a ValueError rather than wrap.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from typing import Any, Iterator

import numpy as np

from .device import Device

INSTALL_HINT = "install JAX with `pip install needle[jax]`"
X64_HINT = ("set JAX_ENABLE_X64=1 or call jax.config.update('jax_enable_x64', True) before "
            "the jax device's first use")
# each 64-bit dtype and the 32-bit one jax uses instead while x64 is off
NARROWER = {"float64": "float32", "int64": "int32", "uint64": "uint32",
            "complex128": "complex64"}


_IMPORT_LOCK = threading.Lock()


def import_jax() -> types.ModuleType:
    """`import jax`, without a draw from numpy's global random state (jax's k8s cluster module
    draws 5 numbers at import): this thread's draws during the import go to a private
    RandomState, other threads' to the global one as ever. Another thread's import under way
    is waited for, not taken half-built."""
    jax = sys.modules.get("jax")
    spec = getattr(jax, "__spec__", None)
    if jax is not None and not getattr(spec, "_initializing", False):
        return jax
    with _IMPORT_LOCK, _private_draws():
        import jax  # (waits for another thread's import of it to finish)
    return jax


@contextlib.contextmanager
def _private_draws() -> Iterator[None]:
    """numpy.random's global functions draw from a private RandomState in this thread."""
    me, private, shared = threading.get_ident(), np.random.RandomState(0), np.random.mtrand._rand
    names = [n for n in dir(shared) if not n.startswith("_") and n not in ("get_state",
             "set_state", "seed") and getattr(np.random, n, None) == getattr(shared, n)]
    saved = {n: getattr(np.random, n) for n in names}

    def dispatch(name: str) -> Any:
        def draw(*args: Any, **kwargs: Any) -> Any:
            owner = private if threading.get_ident() == me else shared
            return getattr(owner, name)(*args, **kwargs)
        return draw
    for n in names:
        setattr(np.random, n, dispatch(n))
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(np.random, n, f)


def x64_enabled() -> bool:
    """jax's `jax_enable_x64` setting (the caller has imported jax)."""
    return bool(import_jax().config.jax_enable_x64)


def normalize(device: str | None) -> str | None:
    """None (jax's default device), or "platform:N" from "cpu", "gpu", "tpu" or "gpu:1"."""
    if device is None:
        return None
    platform, _, index = str(device).strip().lower().partition(":")
    if platform in ("cpu", "gpu", "cuda", "tpu") and (index == "" or index.isdigit()):
        return f"{'gpu' if platform == 'cuda' else platform}:{int(index or 0)}"
    raise ValueError(f"jax device {device!r}: expected None, 'cpu', 'gpu' or 'tpu' (with an "
                     "optional ':N')")


class JaxDevice(Device):
    """Immutable jax.Arrays on one jax device (jax's default one when `index` is None)."""

    kind = "jax"

    def __init__(self, index: str | None = None):
        super().__init__(normalize(index))
        self._jax: Any = None
        self.x64 = True  # read from jax's config when the device loads

    def __repr__(self) -> str:
        return "jax()" if self.index is None else f"jax({self.index!r})"

    __str__ = __repr__

    def _probe(self) -> str:
        """Why jax or the requested device is missing, or "" when both are there."""
        return _probe(self.index)

    def _load(self) -> tuple[Any, Any]:
        jax = self._jax = import_jax()
        self.x64 = x64_enabled()
        return jax_namespace(self.x64, full_precision_default(jax)), _find(jax, self.index)

    def _build_dtype_table(self, xp: Any) -> None:
        # jax's dtypes are numpy's: use np.dtype objects, which compare equal to names
        for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float16", "float32", "float64", "complex64", "complex128"):
            if self.x64 or name not in NARROWER:
                native = np.dtype(name)
                self._dtypes[(str, name)] = self._dtypes[(type(native), native)] = native

    def dtype(self, spec: Any) -> Any:
        """The dtype for `spec`; TypeError with the way out for 64-bit types while x64 is off."""
        try:
            return super().dtype(spec)
        except TypeError:
            name = str(getattr(spec, "name", spec))
            if not self.x64 and name in NARROWER:
                raise TypeError(f"dtype {name} on {self}: jax's 64-bit types are off; "
                                f"{X64_HINT}, or use {NARROWER[name]}") from None
            raise

    # ----- random numbers during training --------------------------------------------
    own_generator = True

    def _new_generator(self, seed: int) -> Any:
        """[key]: a jax PRNG key on this device, replaced by its successor at every draw."""
        jax = self._jax
        return [jax.device_put(jax.random.key(seed), self._native)]

    def rng_state(self) -> np.ndarray | None:
        """The current key's data (uint32); None while it would come from numpy's state."""
        holder = self._generator_for_state(restoring=False)
        return None if holder is None else np.array(self._jax.random.key_data(holder[0]))

    def set_rng_state(self, state: np.ndarray) -> None:
        """Restore a state `rng_state` gave."""
        holder = self._generator_for_state(restoring=True)
        jax = self._jax
        data = np.asarray(state, dtype=np.uint32)
        if data.shape != np.shape(jax.random.key_data(holder[0])):
            raise ValueError(f"{self}: not a state of this device's generator (a key of "
                             f"shape {data.shape})")
        key = jax.random.wrap_key_data(jax.numpy.asarray(data))
        holder[0] = jax.device_put(key, self._native)

    def random(self, shape: tuple[int, ...]) -> Any:
        """float32 uniform draws made on this jax device from its key (split at each draw;
        one thread at a time, so no two draws share a key)."""
        holder = self.generator()
        with _DRAW_LOCK:
            holder[0], draws = _draw(self._jax)(holder[0], tuple(shape))
        return draws

    # ----- conversion ------------------------------------------------------------------
    def _check_dlpack(self, obj: Any) -> None:
        """While x64 is off, host integers outside 32 bits are a ValueError, as in
        `adopt_numpy` (64-bit data becomes 32-bit)."""
        if not self.x64 and self.dlpack_device[0] == 1:  # host memory, seen by numpy as is
            try:
                host = np.from_dlpack(obj)
            except (BufferError, TypeError, ValueError, RuntimeError):
                host = None  # a dtype numpy lacks: no integers to check
            if host is not None:
                self._check_narrowing(host)

    def _from_dlpack(self, obj: Any) -> Any:
        """jax's from_dlpack onto this device: zero-copy where XLA can use the buffer (host
        memory aligned to 64 bytes), else a copy; 64-bit data becomes 32-bit while x64 is off
        (`_check_dlpack` refused host integers outside 32 bits first)."""
        return self.xp.from_dlpack(obj, device=self._native)

    def owns(self, array: Any) -> bool:
        """jax.Arrays on this jax device live here."""
        if not type(array).__module__.startswith(("jax", "jaxlib")):
            return False
        self._require()
        return isinstance(array, self._jax.Array) and array.devices() == {self._native}

    def adopt_numpy(self, array: np.ndarray) -> Any:
        """A fresh host array on this device (32-bit while x64 is off)."""
        self._require()
        narrower = None if self.x64 else NARROWER.get(array.dtype.name)
        if narrower is not None:
            self._check_narrowing(array)
            array = array.astype(narrower)
        return self._jax.device_put(array, self._native)

    def _check_narrowing(self, array: np.ndarray) -> None:
        """A ValueError where 64-bit host integers do not fit the 32 bits they become while
        x64 is off (the cast would wrap them: an id 2**40 read as 0)."""
        narrower = NARROWER.get(array.dtype.name)
        if self.x64 or narrower is None or array.dtype.kind not in "iu" or array.size == 0:
            return
        low, high = int(array.min()), int(array.max())
        info = np.iinfo(narrower)
        if low < info.min or high > info.max:
            raise ValueError(f"{self}: {array.dtype} data with values in [{low}, {high}] does "
                             f"not fit {narrower} ([{info.min}, {info.max}]), which holds it "
                             f"while jax's 64-bit types are off; {X64_HINT}")

    def from_numpy(self, array: np.ndarray) -> Any:
        """A copy of the host data (jax may share a numpy buffer on the cpu: copy it first)."""
        return self.adopt_numpy(np.array(array, copy=True, order="C"))

    @property
    def defers_checks(self) -> bool:
        """On a GPU or TPU a read to the host is a sync: checks wait for the next one."""
        return self.native.platform != "cpu"

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy (deferred checks first)."""
        if self._pending:
            self.check_pending()
        return np.array(array, copy=True)


_DRAW: list[Any] = []
_DRAW_LOCK = threading.Lock()  # a draw reads the key and stores its successor


def _draw(jax: Any) -> Any:
    """jit of (key, shape) -> (next key, float32 uniform draws of shape), made once."""
    if not _DRAW:
        import functools

        @functools.partial(jax.jit, static_argnums=1)
        def draw(key: Any, shape: tuple[int, ...]) -> tuple[Any, Any]:
            key, sub = jax.random.split(key)
            return key, jax.random.uniform(sub, shape, dtype=jax.numpy.float32)

        _DRAW.append(draw)
    return _DRAW[0]


_NAMESPACES: dict[tuple[bool, bool], Any] = {}


def full_precision_default(jax: Any) -> bool:
    """True unless the user chose a matmul precision for jax (`jax_default_matmul_precision`,
    or JAX_DEFAULT_MATMUL_PRECISION): then needle leaves jax's choice alone."""
    return jax.config.jax_default_matmul_precision is None


def jax_namespace(x64: bool, highest: bool = False) -> Any:
    """jax.numpy, with two changes where asked.

    With x64 off, its 64-bit dtypes are the 32-bit ones jax uses then, so needle's own int64
    index arrays stay silent instead of warning on every truncation. With `highest`, `matmul`
    and `tensordot` pass `precision="highest"`: on a GPU jax's default computes float32
    products with reduced-precision (TF32-like) passes, 7.3e-5 relative error seen on an H100
    against 2.5e-7 at "highest"; PyTorch and cupy compute float32 in float32. The user's own
    jax settings are never changed.
    """
    ns = _NAMESPACES.get((x64, highest))
    if ns is None:
        import functools

        import jax.numpy as jnp

        if x64 and not highest:
            ns = jnp
        else:
            ns = types.ModuleType("needle.backends.jax_device.xp", jnp.__doc__)
            ns.__dict__.update({k: v for k, v in vars(jnp).items() if not k.startswith("__")})
            if not x64:
                for wide, narrow in NARROWER.items():
                    setattr(ns, wide, getattr(jnp, narrow))
            if highest:
                ns.matmul = functools.partial(jnp.matmul, precision="highest")
                ns.tensordot = functools.partial(jnp.tensordot, precision="highest")
        _NAMESPACES[(x64, highest)] = ns
    return ns


def _find(jax: Any, index: str | None) -> Any:
    """The jax Device object for a normalized index."""
    if index is None:
        return jax.devices()[0]
    platform, number = index.split(":")
    return jax.devices(platform)[int(number)]


def _probe(index: str | None) -> str:
    """An explanation of what is missing for jax device `index`, or "" when it is usable."""
    label = "jax()" if index is None else f"jax({index!r})"
    try:
        jax = import_jax()
    except Exception as e:  # ImportError, or a broken install
        return f"{label} is unavailable: jax cannot be imported ({e}); {INSTALL_HINT}"
    try:
        _find(jax, index)
    except Exception as e:  # RuntimeError (no such platform) or IndexError
        return f"{label} is unavailable: {type(e).__name__}: {e}"
    return ""
