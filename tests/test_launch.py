"""Raw kernels launched by one driver call (backends/launch.py): what the driver is handed,
read back from memory through a stand-in for cuLaunchKernel (no GPU), and on a GPU the same
bits as cupy's own launches."""

from __future__ import annotations

import contextlib
import ctypes
import threading
from types import SimpleNamespace as NS

import numpy as np
import pytest

import needle as ndl
from needle.backends import launch

#: how the stand-in driver reads each argument's slot, by the C type the kernel declares
_READ = {"*": ctypes.c_uint64, "long long": ctypes.c_int64,
         "unsigned long long": ctypes.c_uint64, "double": ctypes.c_double,
         "float": ctypes.c_float, "int": ctypes.c_int32, "unsigned int": ctypes.c_uint32,
         "bool": ctypes.c_bool}


class FakeArray:
    """A stand-in cupy ndarray: only its data pointer matters to a launch."""

    def __init__(self, ptr: int):
        self.data = NS(ptr=ptr)


class FakeKernel:
    """A stand-in cupy RawKernel: its CUfunction, and calls that took cupy's way."""

    def __init__(self):
        self.kernel = NS(ptr=0xF00D)
        self.calls: list = []

    def __call__(self, grid, block, args, *, shared_mem=0):
        self.calls.append((grid, block, args, shared_mem))


def stand_ins(signature: str, dtype: str = "float32", fail: Exception | None = None):
    """(launcher, launches, kernel): a DirectLaunch of a kernel `k(signature)` over stand-ins
    whose driver reads every argument as that kernel would (its table's pointers, then each
    slot as the declared C type)."""
    source = f'typedef float T;\nextern "C" __global__ void k({signature}) {{ }}'
    types = launch.parameters(source, "k", dtype)
    launches: list[dict] = []

    def launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if fail is not None:
            raise fail
        slots = [ctypes.c_uint64.from_address(params + 8 * i).value for i in range(len(types))]
        values = [_READ[t].from_address(a).value for t, a in zip(types, slots)]
        launches.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared,
                             stream=stream, extra=extra, values=values))

    cupy = NS(ndarray=FakeArray, cuda=NS(get_current_stream=lambda: NS(ptr=0xBEEF)))
    kernel = FakeKernel()
    if types is not None:
        launch._buffer(len(types))  # (as after this thread's first launch: cupy's)
    return launch.DirectLaunch(kernel, source, "k", dtype, contextlib.nullcontext(), cupy,
                               NS(launchKernel=launch_kernel)), launches, kernel


@pytest.fixture(autouse=True)
def direct_on(monkeypatch):
    monkeypatch.setattr(launch, "DIRECT", True)
    monkeypatch.setattr(launch, "_FAILURES", [])
    monkeypatch.setattr(launch, "_LOCAL", threading.local())  # (no thread has launched)


def test_the_driver_gets_each_argument_as_the_kernel_reads_it():
    """Arrays as their data pointers, each scalar as the C type the kernel declares (T: the
    dtype's); grid and block padded to three dimensions."""
    run, launches, kernel = stand_ins(
        "const T* x, T* y, long long n, T eps, double d, int k, unsigned long long s, "
        "const long long* ids, long long m, bool* bad, bool flag")
    args = (FakeArray(0x7000_0000_1000), FakeArray(0x7000_0000_2040), np.int64(-5),
            np.float32(0.1), 1e-300, np.int32(-7), np.uint64(2**64 - 1), FakeArray(8), 12345,
            FakeArray(16), True)
    run((3,), (256, 2), args, shared_mem=64)
    assert kernel.calls == [] and len(launches) == 1
    got = launches[0]
    assert got["values"] == [0x7000_0000_1000, 0x7000_0000_2040, -5, float(np.float32(0.1)),
                             1e-300, -7, 2**64 - 1, 8, 12345, 16, True]
    assert (got["f"], got["grid"], got["block"], got["shared"], got["stream"], got["extra"]) == (
        0xF00D, (3, 1, 1), (256, 2, 1), 64, 0xBEEF, 0)


def test_t_is_the_kernels_element_type():
    for dtype, value in (("float64", 0.1), ("int64", -3)):
        run, launches, _ = stand_ins("T* x, T v", dtype)
        run((1,), (32,), (FakeArray(8), value))
        assert launches[-1]["values"][1] == value


def test_the_signature_is_read_from_the_kernels_source():
    source = ('extern "C" __global__ void other(int a) {}\n'
              'extern "C" __global__ void k(const T* __restrict__ x, T* out, long long n,\n'
              '                            int causal, T neg) { }')
    assert launch.parameters(source, "k", "float64") == ["*", "*", "long long", "int",
                                                           "double"]
    assert launch.parameters(source, "k", "float32")[-1] == "float"
    assert launch.parameters(source, "missing", "float32") is None
    assert launch.parameters('extern "C" __global__ void k(half h)', "k", "float32") is None


def test_each_launch_reads_its_own_arguments():
    run, launches, _ = stand_ins("const T* x, long long n")
    run((1,), (32,), (FakeArray(16), np.int64(3)))
    run((1,), (32,), (FakeArray(32), 9))
    assert [x["values"] for x in launches] == [[16, 3], [32, 9]]


@pytest.mark.parametrize("args, grid", [
    ((None, np.int64(1)), (1,)),  # None: cupy's null pointer
    ((FakeArray(8), np.float64(1.5)), (1,)),  # a float where the kernel takes an integer
    ((FakeArray(8), -1 << 70), (1,)),  # out of long long's range: cupy says so
    ((FakeArray(8),), (1,)),  # too few arguments: cupy's error
    ((FakeArray(8), np.int64(1), np.int64(2)), (1,)),  # too many
    ((FakeArray(8), np.int64(1)), (0,)),  # an empty grid: cupy's error or no-op
    ((FakeArray(8), np.int64(1)), [1]),  # a list for a grid: cupy's to take or refuse
])
def test_what_does_not_fit_the_signature_takes_cupys_launch(args, grid):
    run, launches, kernel = stand_ins("const T* x, long long n")
    run(grid, (32,), args)
    assert launches == [] and kernel.calls == [(grid, (32,), args, 0)]


def test_an_array_for_a_scalar_parameter_is_a_type_error():
    """(A GPU audit.) cupy's launch passes any array as its address: a 0-d array given for
    `long long n` would be read as a huge count."""
    run, launches, kernel = stand_ins("const T* x, long long n")
    with pytest.raises(TypeError, match="argument 1 is an array where the kernel takes a "
                                        "long long"):
        run((1,), (32,), (FakeArray(8), FakeArray(16)))
    launch.DIRECT = False  # (cupy's launches: checked too)
    with pytest.raises(TypeError, match="argument 1 is an array"):
        run((1,), (32,), (FakeArray(8), FakeArray(16)))
    assert launches == [] and kernel.calls == []


def test_a_grid_beyond_cudas_limits_is_cupys_to_refuse_not_a_direct_failure():
    run, launches, kernel = stand_ins("const T* x, long long n")
    for grid in ((2**31,), (1, 65536)):
        run(grid, (32,), (FakeArray(8), np.int64(1)))
    assert launches == [] and len(kernel.calls) == 2 and launch._FAILURES == []


def test_a_kernel_with_a_type_not_packed_here_takes_cupys_launch():
    run, launches, kernel = stand_ins("const T* x, long long n")
    run._types, run.n = None, -1  # (as parameters() gives for, say, a `half`)
    run((1,), (32,), (FakeArray(8), np.int64(1)))
    assert launches == [] and len(kernel.calls) == 1


def test_with_direct_launches_off_every_launch_is_cupys(monkeypatch):
    monkeypatch.setattr(launch, "DIRECT", False)
    run, launches, kernel = stand_ins("const T* x")
    run((1,), (32,), (FakeArray(8),))
    assert launches == [] and len(kernel.calls) == 1


def test_the_environment_turns_direct_launches_off(monkeypatch):
    monkeypatch.setattr(launch, "DIRECT", None)
    monkeypatch.setenv("NEEDLE_DIRECT_LAUNCH", "0")
    run, launches, kernel = stand_ins("const T* x")
    run((1,), (32,), (FakeArray(8),))
    assert launches == [] and len(kernel.calls) == 1 and launch.DIRECT is False


def test_a_failing_direct_launch_falls_back_and_a_second_turns_them_off():
    run, launches, kernel = stand_ins("const T* x", fail=RuntimeError("CUDA_ERROR_INVALID_CONTEXT"))
    run((1,), (32,), (FakeArray(8),))
    assert len(kernel.calls) == 1 and launch.DIRECT is True
    with pytest.warns(RuntimeWarning, match="CUDA_ERROR_INVALID_CONTEXT"):
        run((1,), (32,), (FakeArray(8),))
    assert len(kernel.calls) == 2 and launch.DIRECT is False


def test_a_threads_first_launch_of_each_argument_count_is_cupys():
    """(cupy's launch makes the GPU's CUDA context current on a new thread; a direct launch
    there would find none.)"""
    run, launches, kernel = stand_ins("const T* x, long long n")
    other, other_launches, other_kernel = stand_ins("const T* x")
    launch._LOCAL.buffers.clear()
    for _ in range(2):
        run((1,), (32,), (FakeArray(8), 1))
        other((1,), (32,), (FakeArray(8),))
    assert (len(kernel.calls), len(launches), len(other_kernel.calls), len(other_launches)) == (
        1, 1, 1, 1)


def test_threads_pack_into_buffers_of_their_own():
    """Two threads launching at once never read each other's arguments."""
    run, launches, kernel = stand_ins("const T* x, long long n")
    errors = []

    def work(k):
        try:
            for i in range(2000):
                run((1,), (32,), (FakeArray(8 * k), np.int64(i)))
        except Exception as e:  # pragma: no cover (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(launches) == 3998 and len(kernel.calls) == 2  # (firsts: cupy's)
    for k in (1, 2):
        mine = [x["values"][1] for x in launches if x["values"][0] == 8 * k]
        assert mine == list(range(1, 2000))


def test_cupys_driver_binding_takes_the_launchers_arguments():
    """(where cupy is installed and no GPU is: the binding's argument conversions run before
    it loads the driver, which then fails) numpy integers in the grid, the packed table's
    address and the stream reach the driver call without a TypeError; the failure is the
    missing driver's, and the launch falls back to cupy's call."""
    driver = pytest.importorskip("cupy_backends.cuda.api.driver",
                                 reason="cupy's driver binding is not installed")
    if ndl.cuda().enabled():
        pytest.skip("a GPU is here: a launch of the stand-in kernel would reach it")
    run, _, kernel = stand_ins("const T* x, T* y, long long n, T eps")
    run.launch = None  # (set at the first launch: the real binding's)
    run.driver = driver
    run._pack = None
    run((np.int64(3),), (256,), (FakeArray(8), FakeArray(16), np.int64(5), np.float32(0.5)))
    assert len(kernel.calls) == 1 and len(launch._FAILURES) == 1
    assert "TypeError" not in launch._FAILURES[0] and "Overflow" not in launch._FAILURES[0]


# ----- on a GPU (conftest.py's `gpu` fixture) -------------------------------------------------
def _wrapper_outputs(dev) -> list:
    """Host copies of what the raw-kernel wrappers of ResNet9's and the transformer's steps
    return for fixed inputs (ReLU and its adjoint, BatchNorm in one block and in parts and
    its adjoint, LayerNorm and its adjoint, softmax, sums, im2col)."""
    from needle.backends import affine_norm, im2col, layer_norm, relu, softmax, sums

    rng = np.random.default_rng(0)
    cp = dev.cupy
    outs: list = []

    def a(*shape):
        with dev.native:
            return cp.asarray(rng.standard_normal(shape).astype(np.float32))

    def keep(result):
        assert result is not NotImplemented
        outs.extend(result if isinstance(result, tuple) else (result,))
        return result

    x = a(8, 6, 5, 7)
    keep(relu.relu_cuda(x))
    keep(relu.relu_grad_cuda(a(8, 6, 5, 7), x))
    w, b = a(5), a(5)
    for z in (a(64, 5), a(9000, 5)):  # one block, and in parts
        _, y, s, mean, _ = keep(affine_norm.batch_norm_cuda(z, w, b, 1e-5))
        keep(affine_norm.batch_norm_grad_cuda(a(*z.shape), z, w, y, s, mean))
    t, lw = a(32, 48), a(48)
    _, y, s, mean = keep(layer_norm.layer_norm_cuda(t, lw, a(48), 1e-5))
    keep(layer_norm.layer_norm_grad_cuda(a(32, 48), t, lw, y, s, mean))
    keep(softmax.softmax_cuda(a(4, 16, 16), 1.0, True))
    keep(sums.sum_cuda(a(300, 7), (0,)))
    keep(im2col.im2col_cuda(a(2, 9, 9, 3), (3, 3), 1, 1))
    return [dev.to_numpy(o) for o in outs]


def test_direct_launches_give_cupys_bits(gpu, monkeypatch):
    """Every wrapper's outputs, launched directly and by cupy's RawKernel call: the same
    bits (the same kernels and arguments); the direct run launched every kernel directly,
    as many launches as cupy's run made, and cupy's run none directly."""
    monkeypatch.setattr(launch, "DIRECT", False)
    _wrapper_outputs(gpu)  # (makes every launcher)
    monkeypatch.setattr(launch, "DIRECT", True)
    _wrapper_outputs(gpu)  # (this thread's first launch of each argument count is cupy's)
    count = {"direct": 0, "cupy": 0}
    for k in gpu._launchers.values():
        def direct(*a, _launch=k.launch):
            count["direct"] += 1
            return _launch(*a)

        def by_cupy(*a, _kernel=k.kernel, **kw):
            count["cupy"] += 1
            return _kernel(*a, **kw)
        monkeypatch.setattr(k, "launch", direct)
        monkeypatch.setattr(k, "kernel", by_cupy)
    direct_outputs = _wrapper_outputs(gpu)
    launched = dict(count)
    count.update(direct=0, cupy=0)
    monkeypatch.setattr(launch, "DIRECT", False)
    cupy_outputs = _wrapper_outputs(gpu)
    assert launch._FAILURES == [] and len(direct_outputs) == len(cupy_outputs) > 15
    assert launched["cupy"] == 0 and launched["direct"] > 10, launched
    assert count == {"direct": 0, "cupy": launched["direct"]}, (count, launched)
    for d, c in zip(direct_outputs, cupy_outputs):
        np.testing.assert_array_equal(d, c)
