"""Matrix products through libcublas called directly (ctypes), for cupy's CUDA graphs.

cupy 14 refuses every cuBLAS call while a stream is being captured (its cuBLAS wrappers set
the handle's stream first and raise "calling cuBLAS API during stream capture is currently
unsupported"; seen on an H100), though cuBLAS itself can be captured. So while a `cuda` step
is captured (backends/cupy_cuda_graph.py), MATMUL calls `Cublas.matmul`: the same
cublasGemmEx / cublasGemmStridedBatchedEx products cupy makes (float32 and float64, no TF32),
on a handle of needle's own bound to the capture's stream and to a workspace of the graph's.

`operand` and `plan` (which operand layouts cuBLAS reads as they are, which are copied) are
plain Python over shapes and strides: tests/test_cublas_direct.py checks them on numpy
against a column-major BLAS written in numpy. The ctypes calls run only where cupy sees a
GPU.

Eager products (no capture under way) make the same cuBLAS calls through cupy's own Cython
wrappers of them (`cupy_backends.cuda.libs.cublas.gemmEx`, `gemmStridedBatchedEx`): ctypes
converts all 19 or 23 arguments at every call, a Cython call does not (the kept calls
through ctypes were 8% of the host's profiled time of cupy's eager ResNet9 step on an
H100). A wrapper binds the handle to cupy's current stream before each call, which resets
its workspace to cuBLAS's default pool (32 MiB on Hopper, as cuBLAS's guide gives, the size
of a graph's); a capture keeps the ctypes calls, since the wrappers refuse to run during
one, and binds the handle to its stream and the graph's workspace. `EAGER_WRAPPERS = False`
makes every call a ctypes one again, eager ones on a workspace of the handle's own.
"""

from __future__ import annotations

import ctypes
import math
import warnings
from typing import Any, Callable, NamedTuple

import numpy as np

from .dtype_names import dtype_name

#: cuBLAS and CUDA enums (cublas_api.h, library_types.h)
OP_N, OP_T = 0, 1
R_32F, R_64F = 0, 1
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
#: the workspace cuBLAS is given during a capture (its guide asks 32 MiB on Hopper)
WORKSPACE_BYTES = 32 << 20
#: eager products through cupy's Cython wrappers of the same cuBLAS calls (see above)
EAGER_WRAPPERS = True


class Operand(NamedTuple):
    """One factor as cuBLAS reads it: `array` (2-d, or 3-d with the batch first), `op`
    (OP_N: the row-major matrix read as its column-major transpose, OP_T: a transposed
    view read as it is), leading dimension `ld` and batch `stride` in elements (0: one
    matrix for every batch entry)."""

    array: Any
    op: int
    ld: int
    stride: int


def _layout(rows: int, cols: int, s0: int, s1: int) -> tuple[int, int] | None:
    """(op, ld) for a rows x cols matrix with element strides (s0, s1), or None (copy it):
    rows of contiguous elements read as the columns of its transpose (OP_N), columns of
    contiguous elements as they are (OP_T); ld may exceed the matrix (a slice's rows)."""
    if s1 == 1 or cols == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return OP_N, ld
    if s0 == 1 or rows == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return OP_T, ld
    return None


def operand(xp: Any, x: Any, batch: tuple[int, ...]) -> Operand:
    """`x` (..., rows, cols), whose batch dimensions broadcast to `batch`, as cuBLAS reads
    it; copied (by `xp`, numpy or cupy) only where its strides are not a matrix layout."""
    rows, cols = x.shape[-2:]
    count = math.prod(batch)
    if math.prod(x.shape[:-2]) == 1:
        x, stride = xp.reshape(x, (rows, cols)), 0
    elif tuple(x.shape[:-2]) == tuple(batch):
        x = xp.reshape(x, (count, rows, cols))
        stride = x.strides[0] // x.itemsize
    else:  # a batch broadcast from some but not all entries: made whole
        x = xp.reshape(xp.ascontiguousarray(xp.broadcast_to(x, batch + (rows, cols))),
                       (count, rows, cols))
        stride = rows * cols
    s0, s1 = (s // x.itemsize for s in x.strides[-2:])
    layout = _layout(rows, cols, s0, s1) if stride >= 0 else None
    if layout is None:
        x = xp.ascontiguousarray(x)
        if stride:
            stride = rows * cols
        layout = OP_N, max(cols, 1)
    return Operand(x, layout[0], layout[1], stride)


class Plan(NamedTuple):
    """C (batch, m, n) = A @ B as one cuBLAS call: column-major C^T = B^T A^T."""

    batch: tuple[int, ...]
    m: int
    k: int
    n: int
    first: Operand  # B, cuBLAS's "A"
    second: Operand  # A, cuBLAS's "B"


def plan(xp: Any, a: Any, b: Any) -> Plan:
    """How `a @ b` (2 or more dimensions each, batch dimensions broadcasting) is computed."""
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} are not "
                         f"aligned")
    batch = _broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    m, k = a.shape[-2:]
    n = b.shape[-1]
    return Plan(batch, m, k, n, operand(xp, b, batch), operand(xp, a, batch))


def _copy_of(o: Operand, x: Any, batch: tuple[int, ...]) -> Any:
    """How a kept call gets operand `o` (planned from `x`) from a new array of x's layout:
    None (read in place), () (x copied into C order) or the shape x is broadcast to
    first; False where `o` is a copy not in C order (not kept; `operand` makes none)."""
    if o.array.data.ptr == x.data.ptr:
        return None
    if not o.array.flags.c_contiguous:
        return False
    return () if math.prod(x.shape[:-2]) == 1 or tuple(x.shape[:-2]) == tuple(batch) else (
        tuple(batch) + tuple(x.shape[-2:]))


def _copied(xp: Any, x: Any, shape: tuple[int, ...]) -> Any:
    """x's elements (broadcast to `shape`, if given) in a C-ordered copy: the memory of the
    operand `operand` copied (the same elements in the same order; only its shape, which
    cuBLAS never reads, may differ)."""
    return xp.ascontiguousarray(xp.broadcast_to(x, shape) if shape else x)


def _broadcast(s: tuple, t: tuple) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(s, t)
    except ValueError:
        raise ValueError(f"matmul: batch dimensions {s} and {t} do not broadcast") from None


_LIBRARY: list[Any] = []


def _library() -> Any:
    """libcublas, the copy cupy loads (cuda.pathfinder finds it), with its argument types."""
    if _LIBRARY:
        return _LIBRARY[0]
    from cuda import pathfinder  # cupy 14's library finder

    lib = ctypes.CDLL(pathfinder.load_nvidia_dynamic_lib("cublas").abs_path)
    p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(p)]
    lib.cublasSetStream_v2.argtypes = [p, p]
    lib.cublasSetWorkspace_v2.argtypes = [p, p, ctypes.c_size_t]
    lib.cublasGemmEx.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
    lib.cublasGemmStridedBatchedEx.argtypes = [p, i, i, i, i, i, p, p, i, i, i64, p, i, i,
                                               i64, p, p, i, i, i64, i, i, i]
    for f in (lib.cublasCreate_v2, lib.cublasSetStream_v2, lib.cublasSetWorkspace_v2,
              lib.cublasGemmEx, lib.cublasGemmStridedBatchedEx):
        f.restype = ctypes.c_int
    _LIBRARY.append(lib)
    return lib


def _check(status: int | None, call: str) -> None:
    """Raise for a failed ctypes call (cupy's wrappers raise themselves and return None)."""
    if status:
        raise RuntimeError(f"{call} failed with cuBLAS status {status}")


def _wrappers() -> Any:
    """cupy's Cython module of cuBLAS wrappers, where it has the two products and
    EAGER_WRAPPERS is on, else None."""
    if not EAGER_WRAPPERS:
        return None
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:
        return None
    has_both = hasattr(cublas, "gemmEx") and hasattr(cublas, "gemmStridedBatchedEx")
    return cublas if has_both else None


class Cublas:
    """A cuBLAS handle of needle's own on `device` (a cuda Device), made outside any capture."""

    def __init__(self, device: Any):
        self.device = device
        self.lib = _library()
        self.handle = ctypes.c_void_p()
        with device.native:
            _check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        #: cupy's wrappers of the products, for eager calls (None: ctypes for every call)
        self.wrappers = _wrappers()
        #: (stream, workspace) the handle launches on and uses now; the eager workspace
        self.bound: tuple[int, int] | None = None
        self.workspace: Any = None
        #: (a's shape and strides, b's, their dtypes) -> (result's shape, its cuBLAS calls
        #: (`call_of`), how b and a are read: `_copy_of`)
        self._calls: dict[tuple, tuple[tuple, Calls, Any, Any]] = {}

    def bind(self, stream_ptr: int, workspace_ptr: int, nbytes: int) -> None:
        """Launch on stream `stream_ptr`, using `nbytes` of workspace at `workspace_ptr`
        (cublasSetStream resets the workspace, so it comes second)."""
        _check(self.lib.cublasSetStream_v2(self.handle, stream_ptr), "cublasSetStream")
        _check(self.lib.cublasSetWorkspace_v2(self.handle, workspace_ptr, nbytes),
               "cublasSetWorkspace")
        self.bound = (stream_ptr, workspace_ptr)

    def on_current_stream(self) -> Cublas:
        """The handle bound to cupy's current stream and a workspace of its own (outside a
        capture: a capture binds it to its stream and the graph's workspace); with cupy's
        wrappers, as it is: they bind it to the current stream at every call."""
        if self.wrappers is not None:
            return self
        cp = self.device.cupy
        if self.workspace is None:
            with self.device.native:
                self.workspace = cp.empty(WORKSPACE_BYTES, dtype=cp.uint8)
        here = (cp.cuda.get_current_stream().ptr, self.workspace.data.ptr)
        if self.bound != here:
            self.bind(*here, self.workspace.nbytes)
        return self

    def matmul(self, a: Any, b: Any) -> Any:
        """a @ b (cupy float32 or float64, one dtype; batch dimensions broadcast) by one
        cuBLAS call on the bound stream; NotImplemented for other dtypes.

        A layout met before skips the plan: its call is kept, keyed by both operands'
        shapes, strides and dtypes, and only the three pointers change (most of the host
        time of a product was the plan's Python). An operand the plan copied (attention's
        heads, say) is copied again into C order, the layout the kept call reads."""
        key = (a.shape, a.strides, b.shape, b.strides, a.dtype, b.dtype)
        known = self._calls.get(key)
        if known is not None:
            out_shape, calls, copy_b, copy_a = known
            cp = self.device.cupy
            with self.device.current:
                out = cp.empty(out_shape, dtype=a.dtype)
                first = b if copy_b is None else _copied(cp, b, copy_b)
                second = a if copy_a is None else _copied(cp, a, copy_a)
                self._call(calls, first.data.ptr, second.data.ptr, out.data.ptr)
            return out
        if a.dtype != b.dtype or dtype_name(a.dtype) not in ("float32", "float64"):
            return NotImplemented
        cp = self.device.cupy
        with self.device.native:
            p = plan(cp, a, b)
            out = cp.empty(p.batch + (p.m, p.n), dtype=a.dtype)
            if out.size == 0:
                return out
            if p.k == 0:
                out.fill(0)
                return out
            calls = self.call_of(p, dtype_name(a.dtype) == "float32")
            self._call(calls, p.first.array.data.ptr, p.second.array.data.ptr, out.data.ptr)
            copy_b, copy_a = _copy_of(p.first, b, p.batch), _copy_of(p.second, a, p.batch)
            if copy_b is not False and copy_a is not False:
                if len(self._calls) >= 256:  # (bounded: a long run of new shapes)
                    self._calls.clear()
                self._calls[key] = (out.shape, calls, copy_b, copy_a)
            return out

    def _call(self, calls: Calls, first: int, second: int, out: int) -> None:
        """Make a product's cuBLAS call: through ctypes during a capture or without cupy's
        wrappers, else through them; should a wrapper fail, ctypes from then on (warned)."""
        if calls.eager is None or self.wrappers is None or self.device.capture_matmul is not None:
            _check(calls.captured(first, second, out), "cublasGemmEx")
            return
        try:
            calls.eager(first, second, out)
        except Exception as e:  # (written without a GPU: a refusal falls back, said once)
            self.wrappers, self.bound = None, None
            self._calls.clear()
            warnings.warn(f"needle: cupy's cuBLAS wrapper failed ({type(e).__name__}: {e}); "
                          "products call libcublas through ctypes from now on",
                          RuntimeWarning, stacklevel=2)
            self.on_current_stream()
            _check(calls.captured(first, second, out), "cublasGemmEx")

    def call_of(self, p: Plan, single: bool) -> Calls:
        """Plan `p`'s cuBLAS call (float32 if `single`, else float64) on this handle, through
        ctypes and, where cupy has them, through cupy's wrappers."""
        lib, wrappers = self.lib, self.wrappers
        captured = _gemm(lib.cublasGemmEx, lib.cublasGemmStridedBatchedEx, self.handle,
                         _ONE_ZERO[single], p, single)
        eager = None if wrappers is None else _gemm(
            wrappers.gemmEx, wrappers.gemmStridedBatchedEx, self.handle.value or 0,
            _ADDRESSES[single], p, single)
        return Calls(captured, eager)


class Calls(NamedTuple):
    """A product's cuBLAS call, each (first operand's pointer, second's, result's) ->
    cuBLAS status or None: `captured` through ctypes (for a capture; every call where
    `eager` is None), `eager` through cupy's wrappers."""

    captured: Callable[[int, int, int], int | None]
    eager: Callable[[int, int, int], int | None] | None


def _gemm(gemm: Callable, batched: Callable, handle: Any, one_zero: tuple[Any, Any], p: Plan,
          single: bool) -> Callable[[int, int, int], int | None]:
    """Plan `p`'s call of `gemm` (cublasGemmEx's arguments) or, for a batch, `batched`
    (cublasGemmStridedBatchedEx's), with alpha and beta `one_zero` by reference."""
    one, zero = one_zero
    kind, compute = (R_32F, COMPUTE_32F) if single else (R_64F, COMPUTE_64F)
    f, s, count, ldc = p.first, p.second, math.prod(p.batch), max(p.n, 1)
    head = (handle, f.op, s.op, p.n, p.m, p.k, one)
    if count == 1:
        return lambda x, y, out: gemm(*head, x, kind, f.ld, y, kind, s.ld, zero, out, kind,
                                      ldc, compute, GEMM_DEFAULT)
    return lambda x, y, out: batched(*head, x, kind, f.ld, f.stride, y, kind, s.ld, s.stride,
                                     zero, out, kind, ldc, p.m * p.n, count, compute,
                                     GEMM_DEFAULT)


#: alpha = 1 and beta = 0, by reference, for float32 (True) and float64 (False) products
_SCALARS = {True: (ctypes.c_float(1.0), ctypes.c_float(0.0)),
            False: (ctypes.c_double(1.0), ctypes.c_double(0.0))}
_ONE_ZERO = {single: (ctypes.byref(one), ctypes.byref(zero))
             for single, (one, zero) in _SCALARS.items()}
#: the same as addresses (cupy's wrappers take host pointers as integers)
_ADDRESSES = {single: (ctypes.addressof(one), ctypes.addressof(zero))
              for single, (one, zero) in _SCALARS.items()}


_HANDLES: dict[int, Cublas] = {}


def for_device(device: Any) -> Cublas:
    """The Cublas of `device` (one per GPU, made on first use)."""
    blas = _HANDLES.get(device.index)
    if blas is None:
        blas = _HANDLES[device.index] = Cublas(device)
    return blas
