"""The direct cuBLAS products of cupy's CUDA graphs (backends/cublas_direct.py).

Which layouts cuBLAS reads in place and which are copied is plain Python over shapes and
strides: checked on numpy against a column-major strided-batched GEMM written in numpy,
reading memory the way cuBLAS does (from each operand's first element, by ld and batch
stride). The ctypes calls themselves run only where cupy sees a GPU.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

import needle as ndl
from needle.backends import cublas_direct as cb


def _scopes() -> dict:
    """A stand-in cuda device's `native` and `current` contexts (nothing to switch)."""
    import contextlib

    return {"native": contextlib.nullcontext(), "current": contextlib.nullcontext()}


def _read(o: cb.Operand, count: int, rows: int, cols: int) -> np.ndarray:
    """op(stored) of every batch entry, (count, rows, cols), read as cuBLAS reads memory;
    fails where cuBLAS would refuse the leading dimension, or read past the operand's own
    elements."""
    stored = (rows, cols) if o.op == cb.OP_N else (cols, rows)
    assert o.ld >= max(1, stored[0])  # cuBLAS refuses a smaller leading dimension
    x = o.array
    assert all(s >= 0 for s in x.strides)
    last = (count - 1) * o.stride + (stored[0] - 1) + (stored[1] - 1) * o.ld
    assert last <= sum((d - 1) * s // x.itemsize for d, s in zip(x.shape, x.strides))
    isz = x.itemsize
    m = np.lib.stride_tricks.as_strided(x, (count,) + stored,
                                        (o.stride * isz, isz, o.ld * isz), writeable=False)
    return m if o.op == cb.OP_N else np.swapaxes(m, 1, 2)


def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b the way Cublas.matmul computes it: C^T (n x m) = op(first) op(second), exact
    for the small integers the cases hold (any summation order)."""
    p = cb.plan(np, a, b)
    count = int(np.prod(p.batch))
    first = _read(p.first, count, p.n, p.k)
    second = _read(p.second, count, p.k, p.m)
    return np.swapaxes(first @ second, 1, 2).reshape(p.batch + (p.m, p.n))


def _broadcast_rows(x, n):
    """x (1, k) seen as n equal rows: a row stride of 0 (numpy's or cupy's broadcast_to)."""
    xp = np if isinstance(x, np.ndarray) else sys.modules["cupy"]
    return xp.broadcast_to(x, (n, x.shape[1]))


#: each case builds its two operands with `m(shape)` (views made after, so kept)
CASES = {
    "2-d": lambda m: (m((3, 4)), m((4, 5))),
    "a transposed view": lambda m: (m((4, 3)).T, m((4, 5))),
    "b transposed view": lambda m: (m((3, 4)), m((5, 4)).T),
    "both transposed": lambda m: (m((4, 3)).T, m((5, 4)).T),
    "batched": lambda m: (m((2, 3, 3, 4)), m((2, 3, 4, 5))),
    "batched, transposed": lambda m: (m((6, 4, 3)).swapaxes(1, 2),
                                      m((6, 5, 4)).swapaxes(1, 2)),
    "stack times a matrix": lambda m: (m((6, 3, 4)), m((4, 5))),
    "a matrix times a stack": lambda m: (m((3, 4)), m((6, 4, 5))),
    "batch of one broadcast": lambda m: (m((1, 3, 4)), m((7, 4, 5))),
    "mixed broadcast": lambda m: (m((2, 1, 3, 4)), m((1, 3, 4, 5))),
    "strided slices": lambda m: (m((3, 8))[:, ::2], m((8, 5))[::2]),
    "column slices": lambda m: (m((3, 9))[:, 2:6], m((4, 7))[:, 1:6]),
    "batched row slices": lambda m: (m((6, 5, 4))[:, 1:4], m((6, 4, 7))[:, :, :5]),
    "broadcast rows": lambda m: (_broadcast_rows(m((1, 4)), 3), m((4, 5))),
    "reversed": lambda m: (m((3, 4))[::-1], m((4, 5))[:, ::-1]),
    "vectors": lambda m: (m((1, 4)), m((4, 1))),
    "outer": lambda m: (m((3, 1)), m((1, 5))),
    "a column view": lambda m: (m((3, 4))[:, 1:2], m((1, 5))),
    "attention heads (B, T, H, D) seen as (B, H, T, D)": lambda m: (
        m((2, 4, 3, 5)).swapaxes(1, 2), m((2, 6, 3, 5)).transpose(0, 2, 3, 1)),
    "conv gradient's (1, M, C) @ (T, C, D)^T": lambda m: (
        m((1, 10, 3)), m((9, 4, 3)).swapaxes(1, 2)),
}


@pytest.mark.parametrize("case", CASES)
def test_the_plan_read_as_cublas_reads_memory_is_a_times_b(case):
    rng = np.random.default_rng(0)
    a, b = CASES[case](lambda shape: rng.integers(-4, 5, shape).astype(np.float64))
    np.testing.assert_array_equal(_gemm(a, b), np.matmul(a, b))


def test_transposed_views_and_shared_matrices_are_read_in_place():
    """A transposed operand is read with OP_T and a matrix shared by a batch with stride 0,
    neither copied; only layouts BLAS cannot read are."""
    x, w = np.ones((4, 3)), np.ones((6, 5, 4))
    p = cb.plan(np, x.T, np.swapaxes(w, 1, 2))
    assert (p.second.op, p.second.stride) == (cb.OP_T, 0)
    assert np.shares_memory(p.second.array, x)
    assert (p.first.op, p.first.stride) == (cb.OP_T, 20)
    assert np.shares_memory(p.first.array, w)
    sliced = np.ones((3, 8))[:, ::2]
    assert not np.shares_memory(cb.plan(np, sliced, np.ones((4, 2))).second.array, sliced)


def test_misaligned_shapes_are_refused_with_the_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 2\)"):
        cb.plan(np, np.ones((3, 4)), np.ones((5, 2)))
    with pytest.raises(ValueError, match="do not broadcast"):
        cb.plan(np, np.ones((2, 3, 4)), np.ones((3, 4, 2)))


@pytest.mark.parametrize("calls", ["cupy's wrappers", "ctypes"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_direct_cublas_matches_cupy_matmul(dtype, calls):
    """(where cupy sees a GPU) Cublas.matmul against cupy.matmul, every case above, bound to
    the current stream, its eager calls through cupy's wrappers or through ctypes (as a
    capture's): to the bit where cuBLAS picks the same kernel (said when not)."""
    device = ndl.cuda()
    if not device.enabled():
        pytest.skip(device.unavailable_reason())
    blas = cb.for_device(device)
    wrappers = blas.wrappers
    if calls == "cupy's wrappers" and wrappers is None:
        pytest.skip("this cupy has no Cython gemmEx and gemmStridedBatchedEx")
    blas._calls.clear()  # (the kept calls of the other way)
    blas.wrappers = wrappers if calls == "cupy's wrappers" else None
    try:
        _against_cupy(device, blas, dtype, calls)
    finally:
        blas.wrappers = wrappers
        blas._calls.clear()


def _against_cupy(device, blas, dtype, calls):
    cp = device.cupy
    with device.native:
        workspace = cp.empty(cb.WORKSPACE_BYTES, dtype=cp.uint8)
        blas.bind(cp.cuda.get_current_stream().ptr, workspace.data.ptr, workspace.nbytes)
        rng = np.random.default_rng(1)
        differ = []
        for name, make in CASES.items():
            for _ in range(2):  # (the second product of a layout read in place: its kept call)
                a, b = make(lambda shape: cp.asarray(rng.random(shape)).astype(dtype))
                got, want = blas.matmul(a, b), cp.matmul(a, b)
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got.get(), want.get(), err_msg=name,
                                           rtol=1e-5 if dtype == "float32" else 1e-12)
                if not bool((got == want).all()):
                    differ.append(name)
        cp.cuda.get_current_stream().synchronize()
    print(f"cases not bit-equal to cupy.matmul ({dtype}, {calls}): {differ or 'none'}")



def test_eager_products_bind_the_handle_to_the_current_stream_once():
    """(no GPU: a fake cupy and libcublas) outside a capture the handle is bound to cupy's
    current stream and a workspace of its own, once; again after a capture bound it to its
    stream, or when the current stream changes."""
    from types import SimpleNamespace as NS

    calls = []
    stream = NS(ptr=11)
    cupy = NS(uint8="uint8", cuda=NS(get_current_stream=lambda: stream),
              empty=lambda n, dtype: NS(data=NS(ptr=500), nbytes=n))
    lib = NS(cublasSetStream_v2=lambda h, s: calls.append(("stream", s)) or 0,
             cublasSetWorkspace_v2=lambda h, w, n: calls.append(("workspace", w, n)) or 0)
    blas = cb.Cublas.__new__(cb.Cublas)  # (no cublasCreate)
    blas.device, blas.lib, blas.handle = NS(cupy=cupy, **_scopes()), lib, 0
    blas.bound = blas.workspace = blas.wrappers = None
    bound = [("stream", 11), ("workspace", 500, cb.WORKSPACE_BYTES)]
    assert blas.on_current_stream() is blas and calls == bound
    blas.on_current_stream()
    assert calls == bound  # bound already: no cuBLAS call
    blas.bind(99, 700, 10)  # a capture's stream and workspace
    blas.on_current_stream()
    assert calls[-2:] == bound and blas.bound == (11, 500)
    stream.ptr = 12
    blas.on_current_stream()
    assert calls[-2:] == [("stream", 12), ("workspace", 500, cb.WORKSPACE_BYTES)]
    blas.wrappers, before = NS(), len(calls)  # cupy's wrappers bind it at every call
    stream.ptr = 13
    assert blas.on_current_stream() is blas and len(calls) == before


def test_eager_products_fall_back_to_cupy_without_the_library(monkeypatch):
    """Where cuBLAS's library cannot be found (cupy older than 14: no cuda.pathfinder), the
    direct calls are off for good and products are cupy's."""
    from needle.backends import matmul

    def missing(device):
        raise ImportError("cannot import name 'pathfinder' from 'cuda'")

    monkeypatch.setattr(matmul, "_UNAVAILABLE", [])
    monkeypatch.setattr(cb, "for_device", missing)
    assert matmul._direct(object()) is None
    assert matmul._UNAVAILABLE == ["ImportError: cannot import name 'pathfinder' from 'cuda'"]
    monkeypatch.setattr(cb, "for_device", lambda device: pytest.fail("tried again"))
    assert matmul._direct(object()) is None
    monkeypatch.setattr(matmul, "EAGER_DIRECT", False)
    monkeypatch.setattr(matmul, "_UNAVAILABLE", [])
    assert matmul._direct(object()) is None


class _Device(np.ndarray):
    """A numpy array standing in for a cupy one: its `data.ptr` is its first element's
    address, as cupy's is."""

    @property
    def data(self):  # noqa: D401
        from types import SimpleNamespace

        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _fake_cupy():
    from types import SimpleNamespace as NS

    def dev(x):
        return np.asarray(x).view(_Device)

    return NS(reshape=lambda x, shape: np.reshape(x, shape),
              ascontiguousarray=lambda x: dev(np.ascontiguousarray(x)),
              broadcast_to=lambda x, shape: np.broadcast_to(x, shape, subok=True),
              empty=lambda shape, dtype: dev(np.empty(shape, dtype)))


@pytest.mark.parametrize("calls", ["ctypes", "cupy's wrappers"])
def test_a_layout_met_before_reuses_its_call_with_the_new_pointers(calls):
    """(no GPU: numpy standing in for cupy, a libcublas or cupy's wrappers recording their
    calls) a product keeps its call: the next product of the same shapes, strides and
    dtypes makes the same cuBLAS call with the new arrays' pointers and no plan. An operand
    read in place is read at the new array's own pointer; one the plan copied is copied
    again, into memory that holds what the plan's copy held, in the same order."""
    from types import SimpleNamespace as NS

    calls, copies = [], {}

    def record(name):
        return lambda *args: calls.append((name, args)) or 0

    cupy = _fake_cupy()
    contiguous, reshape = cupy.ascontiguousarray, cupy.reshape

    def recorded(y, x):  # every copy made, by its pointer
        if not np.shares_memory(y, x):
            copies[y.data.ptr] = y
        return y

    cupy.ascontiguousarray = lambda x: recorded(contiguous(x), x)
    cupy.reshape = lambda x, shape: recorded(reshape(x, shape), x)
    blas = cb.Cublas.__new__(cb.Cublas)  # (no cublasCreate)
    blas.device = NS(cupy=cupy, **_scopes(), capture_matmul=None)
    recording = NS(cublasGemmEx=record("gemm"), cublasGemmStridedBatchedEx=record("batched"),
                   gemmEx=record("gemm"), gemmStridedBatchedEx=record("batched"))
    failing = NS(cublasGemmEx=None, cublasGemmStridedBatchedEx=None)  # (never called)
    blas.lib, blas.wrappers = (recording, None) if calls == "ctypes" else (failing, recording)
    blas.handle, blas._calls = ctypes.c_void_p(7), {}
    rng = np.random.default_rng(0)

    def anonymous(call, a, b, result):
        """The call with its pointers named, and the memory of each copy it reads."""
        names = {a.data.ptr: "a", b.data.ptr: "b", result.data.ptr: "out"}
        args = tuple(names.get(v, "copy") if v in names or v in copies else v for v in call[1])
        read = [copies[v].ravel() for v in call[1] if v in copies and v not in names]
        return (call[0], args), read

    in_place = set()
    for name, make in CASES.items():
        blas._calls.clear()
        a1, b1 = (x.view(_Device) for x in make(rng.random))
        p = cb.plan(np, a1, b1)
        copied = (not np.shares_memory(p.first.array, b1)) + (
            not np.shares_memory(p.second.array, a1))
        if not copied:
            in_place.add(name)
        copies.clear()
        blas.matmul(a1, b1)  # planned, and kept
        calls.pop()
        assert len(blas._calls) == 1, name
        a, b = (x.view(_Device) for x in make(rng.random))  # new arrays, the same layout
        copies.clear()
        out = blas.matmul(a, b)  # the kept call
        kept, kept_reads = anonymous(calls.pop(), a, b, out)
        blas._calls.clear()
        again = blas.matmul(a, b)  # planned afresh
        planned, planned_reads = anonymous(calls.pop(), a, b, again)
        assert out.shape == again.shape == np.matmul(a, b).shape, name
        assert kept == planned, name
        assert len(kept_reads) == len(planned_reads) == copied, name
        for got, want in zip(kept_reads, planned_reads):
            np.testing.assert_array_equal(got, want, err_msg=name)
    assert in_place >= {"2-d", "a transposed view", "batched", "batch of one broadcast",
                        "conv gradient's (1, M, C) @ (T, C, D)^T"}
    assert "broadcast rows" not in in_place and "mixed broadcast" not in in_place


def test_eager_calls_go_through_cupys_wrappers_and_captured_ones_through_ctypes():
    """(no GPU: numpy standing in for cupy) outside a capture a product calls cupy's wrapper
    with the arguments its ctypes call passes (the handle, alpha and beta as addresses); its
    kept call too. During a capture (cupy's wrappers refuse to run) the same product calls
    libcublas through ctypes, first and kept."""
    from types import SimpleNamespace as NS

    calls = []

    def record(way, name):
        return lambda *args: calls.append((way, name, args)) or (0 if way == "ctypes" else None)

    def plain(value):  # a ctypes argument as the integer the wrapper takes
        if isinstance(value, ctypes.c_void_p):
            return value.value
        if type(value).__name__ == "CArgObject":  # ctypes.byref(x)
            return ctypes.addressof(value._obj)
        return value

    blas = cb.Cublas.__new__(cb.Cublas)  # (no cublasCreate)
    blas.device = NS(cupy=_fake_cupy(), **_scopes(), capture_matmul=None)
    blas.lib = NS(cublasGemmEx=record("ctypes", "gemm"),
                  cublasGemmStridedBatchedEx=record("ctypes", "batched"))
    blas.wrappers = NS(gemmEx=record("cupy", "gemm"),
                       gemmStridedBatchedEx=record("cupy", "batched"))
    blas.handle, blas._calls = ctypes.c_void_p(7), {}
    rng = np.random.default_rng(2)
    for name, make in CASES.items():
        for dtype in ("float32", "float64"):
            a, b = (x.astype(dtype).view(_Device) for x in make(rng.random))
            blas._calls.clear()
            for _ in range(2):  # planned, then kept
                blas.device.capture_matmul = None
                blas.matmul(a, b)
                blas.device.capture_matmul = blas.matmul
                blas.matmul(a, b)
            eager, captured = calls[-4::2], calls[-3::2]
            assert [c[0] for c in eager] == ["cupy", "cupy"], name
            assert [c[0] for c in captured] == ["ctypes", "ctypes"], name
            for (_, gemm, args), (_, gemm_c, args_c) in zip(eager, captured):
                assert gemm == gemm_c, name
                arrays = (7, 10, 14) if gemm == "gemm" else (7, 11, 16)  # (fresh copies, out)
                args_c = tuple(plain(v) for v in args_c)
                assert args[0] == 7 and len(args) == len(args_c), name
                assert [v for i, v in enumerate(args) if i not in arrays] == [
                    v for i, v in enumerate(args_c) if i not in arrays], name
            one = args[6]
            assert ctypes.cast(one, ctypes.POINTER(
                ctypes.c_float if dtype == "float32" else ctypes.c_double))[0] == 1.0


def test_a_failing_wrapper_falls_back_to_ctypes_for_good_and_says_so():
    """(no GPU: numpy standing in for cupy) should cupy's wrapper raise (the eager calls were
    written without a GPU), the product is made through ctypes on a handle bound to the
    current stream and a workspace of its own, a RuntimeWarning names the error, and every
    later product goes through ctypes."""
    from types import SimpleNamespace as NS

    calls = []

    def refuse(*args):
        calls.append("wrapper")
        raise TypeError("an integer is required")

    def gemm(*args):
        calls.append("ctypes")
        return 0

    cupy = _fake_cupy()
    cupy.uint8 = "uint8"
    cupy.cuda = NS(get_current_stream=lambda: NS(ptr=11))
    blas = cb.Cublas.__new__(cb.Cublas)  # (no cublasCreate)
    blas.device = NS(cupy=cupy, **_scopes(), capture_matmul=None)
    blas.lib = NS(cublasGemmEx=gemm, cublasGemmStridedBatchedEx=gemm,
                  cublasSetStream_v2=lambda h, s: calls.append(("stream", s)) or 0,
                  cublasSetWorkspace_v2=lambda h, w, n: calls.append(("workspace", n)) or 0)
    blas.wrappers = NS(gemmEx=refuse, gemmStridedBatchedEx=refuse)
    blas.handle, blas._calls, blas.bound, blas.workspace = ctypes.c_void_p(7), {}, (11, 1), None
    a, b = (np.ones(shape, dtype="float32").view(_Device) for shape in ((3, 4), (4, 2)))
    with pytest.warns(RuntimeWarning, match="cuBLAS wrapper failed .TypeError: an integer"):
        blas.matmul(a, b)
    assert calls == ["wrapper", ("stream", 11), ("workspace", cb.WORKSPACE_BYTES), "ctypes"]
    assert blas.wrappers is None
    blas.matmul(a, b)
    blas.matmul(b.T.copy().view(_Device), a.T.copy().view(_Device))
    assert calls[4:] == ["ctypes", "ctypes"]
