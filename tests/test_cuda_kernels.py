"""The cuda device's random numbers against their numpy reference (backends/splitmix.py).

The references run everywhere; the comparisons need cupy and a GPU and are skipped, with the
reason, elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle.backends.splitmix import splitmix_uniform


def _scopes() -> dict:
    """A stand-in cuda device's `native` and `current` contexts (nothing to switch)."""
    import contextlib

    return {"native": contextlib.nullcontext(), "current": contextlib.nullcontext()}


def _numpy_ndarray(shape, dtype, memory, strides):
    """cupy.ndarray(shape, dtype, memptr, strides) for a stand-in cupy: numpy's, over memory
    from `bytearray` standing in for cupy.cuda.alloc."""
    return np.ndarray(shape, dtype, memory, 0, strides)


def test_splitmix_uniform_reference_is_uniform_and_counter_based():
    u = splitmix_uniform(np, 7, 0, (200_000,))
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    # draw i depends only on (seed, offset + i): a later offset continues the same stream
    np.testing.assert_array_equal(splitmix_uniform(np, 7, 1000, (2, 5)), u[1000:1010].reshape(2, 5))
    assert not np.array_equal(splitmix_uniform(np, 8, 0, (10,)), u[:10])
    # uint64 wrap-around of the seed and the counter is part of the definition
    assert splitmix_uniform(np, 2**64 - 1, 2**64 - 3, (6,)).shape == (6,)


def test_cuda_random_inside_a_graph_capture_reads_the_generator_from_the_gpu(gpu):
    """(no graph needed) with capture_draws set, draws read (seed, offset) from the state
    that write_generator wrote and count themselves, leaving the host offset alone; after
    advance_generator the host continues where the draws ended: the reference's numbers."""
    gpu.manual_seed(11)
    gpu.random((5,))
    cp = gpu.cupy
    with gpu.native:
        state = cp.empty(2, dtype=cp.uint64)
    gpu.write_generator(state)
    assert gpu.to_numpy(state).tolist() == [11, 5]
    gpu.capture_draws = [state, 0]
    try:
        first, second = gpu.random((3, 4)), gpu.random((6,))
        assert gpu.capture_draws[1] == 18 and list(gpu.rng_state()) == [11, 5]
    finally:
        gpu.capture_draws = None
    reference = splitmix_uniform(np, 11, 0, (27,))
    np.testing.assert_array_equal(gpu.to_numpy(first).reshape(-1), reference[5:17])
    np.testing.assert_array_equal(gpu.to_numpy(second), reference[17:23])
    gpu.advance_generator(18)
    np.testing.assert_array_equal(gpu.to_numpy(gpu.random((4,))), reference[23:27])


def test_cuda_random_is_the_reference_bit_for_bit(gpu):
    gpu.manual_seed(11)
    first, second = gpu.random((3, 4)), gpu.random((5,))
    reference = splitmix_uniform(np, 11, 0, (17,))
    np.testing.assert_array_equal(gpu.to_numpy(first).reshape(-1), reference[:12])
    np.testing.assert_array_equal(gpu.to_numpy(second), reference[12:])
    state = gpu.rng_state()
    assert list(state) == [11, 17]
    after = gpu.to_numpy(gpu.random((4,)))
    gpu.set_rng_state(state)
    np.testing.assert_array_equal(gpu.to_numpy(gpu.random((4,))), after)


def _same_as_compat(ns, compat, lib, asarray):
    """ns's direct reshape, permute_dims, matrix_transpose and matmul against compat's: the
    same values, dtypes, shapes, and views where compat gives views; compat's errors."""
    x = asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    b = asarray(np.ones((4, 5), dtype=np.float64))

    host = getattr(lib, "asnumpy", np.asarray)

    def same(got, want):
        assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(host(got), host(want))

    for shape, copy in [((6, 4), None), ((4, -1), None), ((24,), True), ((2, 12), False)]:
        same(ns.reshape(x, shape, copy=copy), compat.reshape(x, shape, copy=copy))
    view = ns.reshape(x, (6, 4))
    view[0, 0] = 99  # a view, as compat's: written through to x
    assert float(x[0, 0, 0]) == 99
    view[0, 0] = 0
    with pytest.raises((ValueError, AttributeError)):  # no view of a transposed array
        ns.reshape(ns.permute_dims(x, (2, 0, 1)), (24,), copy=False)
    same(ns.permute_dims(x, (2, 0, 1)), compat.permute_dims(x, (2, 0, 1)))
    same(ns.matrix_transpose(x), compat.matrix_transpose(x))
    with pytest.raises(ValueError, match="at least 2-dimensional"):
        ns.matrix_transpose(asarray(np.ones(3)))
    same(ns.matmul(x, b), compat.matmul(x, b))  # promoted to float64, as compat's
    assert ns.asarray is compat.asarray  # the rest is compat's


def test_fits_into_is_numpys_broadcast_to_the_first_shape():
    """(no GPU) add_to_fresh's check that b's shape broadcasts to out's, against numpy's."""
    from needle.backends.add_to_fresh import fits_into

    shapes = [(), (1,), (3,), (4,), (1, 4), (3, 4), (2, 3, 4), (2, 1, 4), (3, 1), (5, 3, 4),
              (0,), (0, 4), (1, 0)]
    for a in shapes:
        for b in shapes:
            try:
                want = np.broadcast_shapes(b, a) == b
            except ValueError:
                want = False
            assert fits_into(a, b) == want, (a, b)


def test_flat_concat_gets_its_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, the kernel run by numpy over the CUDA signature's
    arguments by name and the grid's block rows) the optimizer's flat gradient: pointers and
    starts in the kernel's order, a launch per 32 arrays, unused slots never read, copies of
    views, empty arrays, and the reference's array; other dtypes to the reference."""
    from types import SimpleNamespace as NS

    from needle.backends import flat_concat
    from needle.optim.flat import flat_concat_portable

    launches = []

    def raw_kernel(name, source, entry, dtype):
        assert source is flat_concat.SOURCE and entry == "flat_concat"
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            kw = dict(zip(names, args, strict=True))
            assert block == (256,) and grid[1] <= flat_concat.SLOTS and grid[0] >= 1
            launches.append(grid)
            for y in range(grid[1]):  # the launched block rows, one array each
                src, start, stop = kw[f"p{y}"], int(kw[f"s{y}"]), int(kw[f"s{y + 1}"])
                assert src.flags.c_contiguous and src.size == stop - start
                kw["out"][start:stop] = src.reshape(-1)
        return launch

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty), **_scopes(),
              raw_kernel=raw_kernel)
    monkeypatch.setattr(flat_concat, "device_of", lambda a: fake)
    rng = np.random.default_rng(2)
    for count in (2, 32, 33, 70):
        arrays = [rng.standard_normal(rng.integers(1, 5, size=rng.integers(1, 4)))
                  for _ in range(count)]
        arrays[1] = rng.standard_normal((4, 3)).T
        arrays[count // 2] = np.zeros((2, 0))
        for tail in ([], [np.zeros(0)]):  # (a launch of empty arrays only is skipped)
            launches.clear()
            got = flat_concat.flat_concat_cuda(arrays + tail)
            assert len(launches) == -(-count // 32)
            np.testing.assert_array_equal(got, flat_concat_portable(arrays + tail))
    assert flat_concat.flat_concat_cuda([np.ones(2, np.float32), np.ones(2)]) is NotImplemented
    assert flat_concat.flat_concat_cuda([np.ones(2, np.int64)] * 2) is NotImplemented


def _flat(a):
    """A dense array's memory as a flat (writable) view, from its first element: what a raw
    kernel walking it as flat memory reads and writes."""
    return np.lib.stride_tricks.as_strided(a, (a.size,), (a.itemsize,))


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")  # NaN * 0
def test_elementwise_raw_kernels_walk_flat_memory(monkeypatch):
    """(no GPU: numpy in cupy's place, the raw kernels run by numpy over the arrays' memory)
    ReLU, its adjoint and the bias add: a raw kernel over flat memory where the arrays share
    one dense layout (C-ordered, a convolution's channels-last NCHW view), the output laid
    out as the input; an ElementwiseKernel, cupy's add or the reference otherwise."""
    from types import SimpleNamespace as NS

    from needle.backends import add_to_fresh, elementwise, relu
    from needle.ops.unary import relu_grad_portable

    launched = []

    def relu_kernel(x, y, n):
        _flat(y)[:] = np.where((_flat(x) > 0) | np.isnan(_flat(x)), _flat(x), 0)[:int(n)]

    def relu_grad_kernel(g, a, y, n):
        _flat(y)[:] = (_flat(g) * (_flat(a) > 0).astype(a.dtype))[:int(n)]

    def add_into(out, b, n, c):
        _flat(out)[:] = _flat(out) + _flat(b)[np.arange(int(n)) % int(c)]

    emulations = {"relu": relu_kernel, "relu_grad": relu_grad_kernel, "add_into": add_into}

    def raw_kernel(name, source, entry, dtype):
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            kw = dict(zip(names, args, strict=True))
            assert (grid, block) == elementwise.flat_grid(int(kw["n"]))
            for a in args:
                assert not isinstance(a, np.ndarray) or elementwise.dense(a)
            launched.append(entry)
            emulations[entry](**kw)
        return launch

    def elementwise_kernel(name, params, outs, body):
        def run(g, a, y):
            launched.append(f"elementwise {name}")
            y[...] = g * (a > 0).astype(a.dtype)
            return y
        return run

    def add(a, b, out):
        launched.append("cupy add")
        return np.add(a, b, out=out)

    fake = NS(cupy=NS(empty_like=np.empty_like, add=add, ndarray=_numpy_ndarray,
                      cuda=NS(alloc=bytearray)), **_scopes(), raw_kernel=raw_kernel,
              elementwise_kernel=elementwise_kernel)
    for module in (add_to_fresh, relu):
        monkeypatch.setattr(module, "device_of", lambda a: fake)
    rng = np.random.default_rng(6)
    nhwc = rng.standard_normal((4, 5, 6, 3)).astype(np.float32)
    nhwc[0, 0, 0, :3] = [-0.0, np.nan, -np.inf]
    nchw = nhwc.transpose(0, 3, 1, 2)
    pixel = rng.standard_normal((4, 1, 1, 8)).transpose(0, 3, 1, 2)  # 1 x 1: odd strides there
    for x, raw in ((nhwc, True), (nchw, True), (nchw.astype(np.float64), True), (pixel, True),
                   (nchw[:, :, ::2], False), (np.round(nhwc[1:]).astype(np.int64), False)):
        launched.clear()
        y = relu.relu_cuda(x)
        if not raw:
            assert y is NotImplemented and launched == []
            continue
        assert launched == ["relu"] and elementwise.walk(y) == elementwise.walk(x)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        assert not np.signbit(y[y == 0]).any()  # (-0 gives +0, as numpy's maximum)
    other = rng.standard_normal((4, 6, 5, 3)).astype(np.float32).transpose(0, 2, 1, 3)
    for g, a, kernel in ((nhwc, -nhwc, "relu_grad"), (nchw, nchw[::-1, ::-1].copy()[::-1, ::-1],
                                                      "elementwise relu_grad"),
                         (nchw, nhwc.copy().transpose(0, 3, 1, 2), "relu_grad"),
                         (nhwc, other, "elementwise relu_grad"), (pixel, -pixel, "relu_grad"),
                         (nhwc[:, ::2], nhwc[:, ::2], "elementwise relu_grad")):
        launched.clear()
        y = relu.relu_grad_cuda(g, a)
        assert launched == [kernel] and elementwise.walk(y) == elementwise.walk(
            np.empty_like(g))
        np.testing.assert_array_equal(y, relu_grad_portable(g, a))
    for out_shape, b, how in (((50, 3), rng.standard_normal(3), "add_into"),
                              ((50, 3), rng.standard_normal((1, 3)), "add_into"),
                              ((4, 7, 3), rng.standard_normal(3), "add_into"),
                              ((4, 7, 3), rng.standard_normal((4, 7, 3)), "add_into"),
                              ((50, 3), rng.standard_normal((50, 1)), "cupy add"),
                              ((50, 3), rng.standard_normal(6)[::2], "cupy add"),
                              ((0, 3), rng.standard_normal(3), None)):
        out = rng.standard_normal(out_shape)
        want = out + b
        launched.clear()
        got = add_to_fresh.add_to_fresh_cuda(out, b)
        assert launched == ([how] if how else []) and got is out, (out_shape, b.shape)
        np.testing.assert_array_equal(got, want)
    launched.clear()
    ints = np.arange(6).reshape(2, 3)
    want = ints + ints[0]
    np.testing.assert_array_equal(add_to_fresh.add_to_fresh_cuda(ints, ints[0].copy()), want)
    assert launched == ["cupy add"]
    out = rng.standard_normal((3, 4)).T  # (not C-ordered: a fresh out + b)
    got = add_to_fresh.add_to_fresh_cuda(out, np.ones(3))
    assert got is not out and launched == ["cupy add"]
    monkeypatch.setattr(elementwise, "RAW", False)  # every one as before the raw kernels
    launched.clear()
    assert relu.relu_cuda(nhwc) is NotImplemented
    np.testing.assert_array_equal(relu.relu_grad_cuda(nhwc, nhwc), relu_grad_portable(nhwc, nhwc))
    out = rng.standard_normal((50, 3))
    add_to_fresh.add_to_fresh_cuda(out, rng.standard_normal(3))
    assert launched == ["elementwise relu_grad", "cupy add"]


def test_moving_averages_kernel_gets_its_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, the raw kernel run by numpy in float32, one rounding
    per product and sum) BatchNorm's running statistics: the reference's bits, the batch's
    (1, C, 1, 1) statistics walked as flat memory; a strided one to the ElementwiseKernel."""
    from types import SimpleNamespace as NS

    from needle.backends import elementwise, normalize
    from needle.nn.norm import moving_averages_portable

    launched = []

    def raw_kernel(name, source, entry, dtype):
        assert source is normalize.SOURCE and entry == "moving_averages"
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            kw = dict(zip(names, args, strict=True))
            assert (grid, block) == elementwise.flat_grid(int(kw["n"]))
            assert type(kw["omm"]) is type(kw["mm"]) is np.dtype(dtype).type
            launched.append(entry)
            for new, old, batch in (("rm", "om", "bm"), ("rv", "ov", "bv")):
                _flat(kw[new])[:] = _flat(kw[old]) * kw["omm"] + _flat(kw[batch]) * kw["mm"]
        return launch

    def elementwise_kernel(name, params, outs, body, exact=False):
        def run(om, bm, ov, bv, omm, mm):
            launched.append(f"elementwise {name}")
            return om * omm + bm * mm, ov * omm + bv * mm
        return run

    fake = NS(cupy=NS(empty=np.empty), **_scopes(), raw_kernel=raw_kernel,
              elementwise_kernel=elementwise_kernel)
    monkeypatch.setattr(normalize, "device_of", lambda a: fake)
    rng = np.random.default_rng(8)
    old_mean, old_var = (rng.standard_normal(5).astype(np.float32) for _ in range(2))
    batch_mean, batch_var = (rng.standard_normal((1, 5, 1, 1)).astype(np.float32)
                             for _ in range(2))
    for batch, kernel, raw in ((batch_var, "moving_averages", True),
                               (rng.standard_normal((1, 10, 1, 1)).astype(np.float32)[:, ::2],
                                "elementwise moving_averages", True),
                               (batch_var, "elementwise moving_averages", False)):
        monkeypatch.setattr(elementwise, "RAW", raw)
        launched.clear()
        got = normalize.moving_averages_cuda(old_mean, old_var, batch_mean, batch, 0.1)
        assert launched == [kernel]
        for a, e in zip(got, moving_averages_portable(old_mean, old_var, batch_mean, batch, 0.1),
                        strict=True):
            assert a.shape == e.shape == (5,) and a.dtype == e.dtype
            np.testing.assert_array_equal(a, e)


def test_cross_entropy_kernels_get_their_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, the three raw kernels run by numpy over the CUDA
    signatures' arguments by name) the softmax cross-entropy: its rows, their mean in one
    launch, and its adjoint over flat memory, against the portable op (to float rounding)."""
    from types import SimpleNamespace as NS

    from needle.backends import cross_entropy, elementwise
    from needle.ops.reduce import softmax_xent_grad_portable, softmax_xent_portable

    launched = []

    def xent_rows(grid, z, labels, e, sums, loss, k):
        n = z.shape[0]
        assert grid == (n,) and int(k) == z.shape[1]
        m = z.max(axis=1, keepdims=True)
        e[...] = np.exp(z - m)
        sums[...] = e.sum(axis=1, keepdims=True)
        loss[...] = np.log(sums[:, 0]) - (z[np.arange(n), labels] - m[:, 0])

    def xent_mean(grid, loss, out, n, inv):
        assert grid == (1,) and int(n) == loss.size and type(inv) is loss.dtype.type
        out[...] = loss.sum() * inv

    def xent_grad(grid, e, sums, labels, g, out, n, k, inv):
        assert grid == elementwise.flat_grid(int(n))[0] and int(n) == e.size
        rows = e.shape[0]
        assert int(k) == e.shape[1] and np.isclose(inv, 1 / rows) and g.size == 1
        scale = g.reshape(()) * inv
        out[...] = e * (scale / sums)
        out[np.arange(rows), labels] -= scale

    emulations = {"xent_rows": xent_rows, "xent_mean": xent_mean, "xent_grad": xent_grad}

    def raw_kernel(name, source, entry, dtype):
        assert source is cross_entropy.XENT_SOURCE and name == entry
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            launched.append(entry)
            emulations[entry](grid, **dict(zip(names, args, strict=True)))
        return launch

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty, int64=np.int64),
              **_scopes(),
              raw_kernel=raw_kernel)
    monkeypatch.setattr(cross_entropy, "device_of", lambda a: fake)
    rng = np.random.default_rng(9)
    for dtype in (np.float32, np.float64):
        z = (rng.standard_normal((37, 11)) * 3).astype(dtype)
        labels = rng.integers(0, 11, 37)
        launched.clear()
        got = cross_entropy.softmax_xent_cuda(z, labels)
        want = softmax_xent_portable(z, labels)
        assert launched == ["xent_rows", "xent_mean"] and got[0].shape == () == want[0].shape
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype == dtype
            np.testing.assert_allclose(a, b, rtol=1e-5)
        g = np.asarray(0.7, dtype=dtype)
        launched.clear()
        grad = cross_entropy.softmax_xent_grad_cuda(got[1], got[2], labels, g)
        assert launched == ["xent_grad"] and grad.dtype == dtype
        np.testing.assert_allclose(grad, softmax_xent_grad_portable(*want[1:], labels, g),
                                   rtol=1e-5, atol=1e-7)
    monkeypatch.setattr(cross_entropy, "_MEAN_ROWS", 36)  # more rows: cupy's sum of the losses
    fake.cupy.sum = np.sum
    launched.clear()
    got = cross_entropy.softmax_xent_cuda(z, labels)
    assert launched == ["xent_rows"]
    np.testing.assert_allclose(got[0], softmax_xent_portable(z, labels)[0], rtol=1e-12)


def test_kernels_launch_in_their_gpus_scope_switching_only_among_several():
    """(no GPU) backends' kernels launch `with gpu.current:`: the GPU's cupy Device (made
    current, the previous one again after) where several are visible, a reusable no-op with
    one (nothing to switch)."""
    from needle.backends.cuda import launch_scope

    entered = []

    class Native:  # a cupy Device's context
        def __enter__(self):
            entered.append("in")

        def __exit__(self, *exc):
            entered.append("out")

    native = Native()
    assert launch_scope(native, 2) is native
    for _ in range(2):
        with launch_scope(native, 1):
            pass
    assert entered == [] and launch_scope(native, 1) is launch_scope(Native(), 1)


def test_the_first_gpu_a_process_uses_is_made_current_and_a_second_warns():
    """(no GPU; a GPU audit) cupy makes arrays and computes on its current GPU, so with
    several GPUs cuda(1) put new arrays (zeros, masks, the optimizer's copies) on GPU 0.
    The first GPU a process uses is made current; a second one gets a warning saying how
    to switch."""
    from needle.backends.cuda import take_gpu

    used = []

    class Native:
        def use(self):
            used.append("use")

    in_use: set[int] = set()
    assert take_gpu(Native(), 1, 2, in_use) == "" and used == ["use"]
    message = take_gpu(Native(), 0, 2, in_use)
    assert "cuda(0): this process already uses GPU(s) [1]" in message
    assert "with ndl.cuda(i).native:" in message and used == ["use"]
    assert take_gpu(Native(), 0, 1, set()) == "" and used == ["use"]  # one GPU: nothing to do


def test_kernels_launch_scope_on_the_gpu(gpu):
    cupy = gpu.cupy
    several = cupy.cuda.runtime.getDeviceCount() > 1
    assert (gpu.current is gpu.native) == several
    with gpu.current:
        assert cupy.cuda.runtime.getDevice() == gpu.index


def test_the_cuda_namespace_calls_the_library_directly_on_numpy():
    """backends/cuda.direct_namespace is written for any library with numpy's API: numpy and
    array_api_compat.numpy stand in for cupy here."""
    import array_api_compat.numpy as compat

    from needle.backends.cuda import direct_namespace

    ns = direct_namespace(compat, np)
    assert ns.reshape is not compat.reshape and ns.matmul is np.matmul
    assert ns.sum is compat.sum
    _same_as_compat(ns, compat, np, np.asarray)


def test_the_cpu_namespace_calls_numpy_directly():
    """The cpu device's views are the same direct calls (backends/cpu.direct_views)."""
    import array_api_compat.numpy as compat

    ns = ndl.cpu().xp
    assert ns.matrix_transpose is not compat.matrix_transpose
    assert ns.permute_dims is not compat.permute_dims
    _same_as_compat(ns, compat, np, np.asarray)


@pytest.mark.parametrize("lib", ["numpy", "cupy"])
def test_the_cuda_namespace_joins_arrays_without_a_host_table_while_capturing(lib):
    """While a CUDA graph is captured, stack and concat copy each array into the result
    (cupy's own joins of many arrays copy a table of pointers from the host, which the
    capture refuses: the LSTM step's stack of its 40 outputs was never captured): the same
    arrays as compat's, and compat's errors. numpy stands in for cupy on the cpu."""
    if lib == "numpy":
        import array_api_compat.numpy as compat

        from needle.backends.cuda import direct_namespace

        module, flag = np, [True]
        ns = direct_namespace(compat, np, lambda: flag[0])
    else:
        device = ndl.cuda()
        if not device.enabled():
            pytest.skip(device.unavailable_reason())
        import array_api_compat.cupy as compat

        module, ns, flag = device.cupy, device.xp, None
    rng = np.random.default_rng(0)
    parts = [module.asarray(rng.standard_normal((3, 4)), dtype=module.float32)
             for _ in range(9)]
    uneven = [module.asarray(rng.standard_normal((3, k))) for k in (1, 4, 2, 5, 3, 1)]

    def joins():
        return [ns.stack(parts), ns.stack(parts, axis=-1), ns.stack(parts, axis=1),
                ns.concat(parts), ns.concat(uneven, axis=1), ns.concat(uneven, axis=-1),
                ns.concat(parts, axis=None), ns.concat([parts[0], uneven[1]])]

    def expected():
        return [compat.stack(parts), compat.stack(parts, axis=-1), compat.stack(parts, axis=1),
                compat.concat(parts), compat.concat(uneven, axis=1),
                compat.concat(uneven, axis=-1), compat.concat(parts, axis=None),
                compat.concat([parts[0], uneven[1]])]
    if flag is None:  # on the GPU: the device's own flag, as a capture sets it
        device.capture_matmul = object()
        try:
            got = joins()
            for bad in ([parts[0], uneven[0]], []):
                with pytest.raises(ValueError):
                    ns.stack(bad)
        finally:
            device.capture_matmul = None
    else:
        got = joins()
        for bad in ([parts[0], uneven[0]], []):
            with pytest.raises(ValueError):
                ns.stack(bad)
        with pytest.raises(ValueError):
            ns.concat(parts, axis=2)
        flag[0] = False
        assert ns.stack(parts).shape == (9, 3, 4)  # (compat's, not captured)
    for a, b in zip(got, expected(), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(module.asnumpy(a) if lib == "cupy" else a,
                                      module.asnumpy(b) if lib == "cupy" else b)


def test_the_cuda_namespace_calls_cupy_directly(gpu):
    import array_api_compat.cupy as compat

    cupy = gpu.cupy
    assert gpu.xp.matmul is cupy.matmul
    _same_as_compat(gpu.xp, compat, cupy, cupy.asarray)


def test_cuda_layout_of_a_convolutions_output_is_kept_by_relu_and_batch_norm(gpu):
    """A convolution's NCHW output is channels-last in memory; ReLU's adjoint kernel and
    BatchNorm's kernels (forward and adjoints) keep it so, so that nothing downstream copies
    it (the layout the kernels write, with the reference's numbers to the bit)."""
    from needle.backends.relu import relu_grad_cuda
    from needle.ops.affine_norm import (
        BATCH_NORM,
        BATCH_NORM_GRAD,
        batch_norm_grad_portable,
        batch_norm_portable,
    )
    from needle.ops.unary import relu_grad_portable

    cupy = gpu.cupy
    rng = np.random.default_rng(3)
    g, a = (cupy.asarray(rng.standard_normal((4, 5, 6, 3)), dtype=cupy.float32)
            .transpose(0, 3, 1, 2) for _ in range(2))
    out = relu_grad_cuda(g, a)
    assert out.strides == g.strides
    np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(relu_grad_portable(g, a)))
    w, b = (cupy.asarray(rng.standard_normal(3), dtype=cupy.float32) for _ in range(2))
    out, y, s, mean, _ = BATCH_NORM(g, w, b, 1e-5)
    assert out.strides == y.strides == g.strides
    dx, dw, db = BATCH_NORM_GRAD(a, g, w, y, s, mean)
    assert dx.strides == g.strides and dw.shape == db.shape == (3,)
    for got, want in zip((out, dx, dw, db), (*batch_norm_portable(g, w, b, 1e-5)[:1],
                                             *batch_norm_grad_portable(a, g, w, y, s, mean))):
        np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(want))


@pytest.mark.parametrize("shape, channels_last", [((5, 40, 41, 3), True), ((9000, 5), False),
                                                   ((2, 16, 70, 70), False)])
def test_batch_norm_in_parts_gives_the_references_bits(gpu, shape, channels_last):
    """Many rows of few channels (more than 8,192: the statistics summed in parts of 1,024
    rows, a block each): BatchNorm's kernels give the reference's numbers to the bit, the
    reference being NORMALIZE's kernels in parts and SUM's (out, s, mean, var; dx, dw, db),
    for a convolution's channels-last NCHW output, (N, C) and a C-ordered NCHW input."""
    from needle.backends.reductions import stat_rows
    from needle.ops.affine_norm import (
        BATCH_NORM,
        BATCH_NORM_GRAD,
        batch_norm_grad_portable,
        batch_norm_portable,
    )

    cupy = gpu.cupy
    rng = np.random.default_rng(4)
    x, g = (cupy.asarray(rng.standard_normal(shape) * 3 + 1, dtype=cupy.float32)
            for _ in range(2))
    if channels_last:
        x, g = x.transpose(0, 3, 1, 2), g.transpose(0, 3, 1, 2)
    c = x.shape[1]
    assert stat_rows(x.size // c, c) is not None  # (the case in parts)
    w, b = (cupy.asarray(rng.standard_normal(c), dtype=cupy.float32) for _ in range(2))
    out, y, s, mean, var = BATCH_NORM(x, w, b, 1e-5)
    want = batch_norm_portable(x, w, b, 1e-5)
    got = (out, s, mean, var) + BATCH_NORM_GRAD(g, x, w, y, s, mean)
    want = (want[0], *want[2:]) + batch_norm_grad_portable(g, x, w, want[1], s, mean)
    for i, (a, e) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(cupy.asnumpy(a), cupy.asnumpy(e), err_msg=str(i))
    host = cupy.asnumpy(x).astype(np.float64)  # and near float64's statistics
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    np.testing.assert_allclose(cupy.asnumpy(mean).reshape(-1), host.mean(axis=axes), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(var).reshape(-1), host.var(axis=axes), rtol=1e-5)


def test_relu_kernel_gives_numpys_maximum_to_the_bit(gpu):
    """ReLU's raw kernel against numpy's maximum(x, 0), bit patterns compared (-0 gives +0,
    NaN kept, infinities), C-ordered and a 1 x 1 channels-last view; its adjoint likewise
    against the portable rule."""
    from needle.backends.relu import relu_cuda, relu_grad_cuda
    from needle.ops.unary import relu_grad_portable

    cupy = gpu.cupy
    host = np.random.default_rng(7).standard_normal((4, 1, 1, 70)).astype(np.float32)
    host[0, 0, 0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -1e-45]
    for x in (host, host.transpose(0, 3, 1, 2)):
        y = relu_cuda(cupy.asarray(x) if x.flags.c_contiguous else
                      cupy.asarray(host).transpose(0, 3, 1, 2))
        want = np.maximum(x, 0)
        assert y.shape == want.shape
        np.testing.assert_array_equal(cupy.asnumpy(y).view(np.uint32), want.view(np.uint32))
        g = cupy.asarray(np.random.default_rng(8).standard_normal(y.shape), dtype=cupy.float32)
        a = cupy.asarray(x)
        np.testing.assert_array_equal(cupy.asnumpy(relu_grad_cuda(g, a)).view(np.uint32),
                                      cupy.asnumpy(relu_grad_portable(g, a)).view(np.uint32))


#: needle's raw CUDA kernels: module of needle.backends -> (its source's name, its entries)
RAW_KERNELS = {
    "affine_norm": ("BN_SOURCE", ("bn_cols", "bn_grad_cols", "bn_cols_parts", "bn_grad_part",
                                  "bn_grad_cols_parts")),
    "layer_norm": ("SOURCE", ("ln_rows", "ln_grad_rows", "ln_sums", "sum_cols2")),
    "cross_entropy": ("XENT_SOURCE", ("xent_rows", "xent_mean", "xent_grad")),
    "flat_concat": ("SOURCE", ("flat_concat",)),
    "im2col": ("SOURCE", ("im2col", "col2im")),
    "add_to_fresh": ("SOURCE", ("add_into",)),
    "relu": ("SOURCE", ("relu", "relu_grad")),
    "index_add": ("SEGMENT_SOURCE", ("segment_sum",)),
    "index_check": ("SOURCE", ("checked_indices",)),
    "normalize": ("SOURCE", ("norm_rows", "norm_cols", "norm_grad_rows", "norm_grad_cols",
                             "moving_averages", "sq_cols_part", "norm_cols_parts",
                             "norm_grad_part", "norm_grad_cols_parts")),
    "softmax": ("SOURCE", ("softmax_rows", "softmax_grad_rows")),
    "sums": ("SUM_SOURCE", ("sum_rows", "sum_cols_part", "sum_cols")),
}


#: the modules whose raw kernels are launched for int64 arrays (the others: float32, float64)
INTEGER_KERNELS = {"index_check"}


def _raw_sources():
    import importlib

    for module, (name, entries) in RAW_KERNELS.items():
        yield module, getattr(importlib.import_module(f"needle.backends.{module}"), name), entries


def test_every_raw_kernel_is_listed_and_gets_its_element_type(monkeypatch):
    """(no GPU needed) every backends module that launches a raw kernel is in RAW_KERNELS,
    each entry is defined in its source, and raw_kernel compiles the source with T defined:
    the source is never %-formatted (softmax's `r % tr` once made that fail on the GPU)."""
    import importlib
    from pathlib import Path

    cuda = importlib.import_module("needle.backends.cuda")  # (ndl.backends.cuda: the device)
    here = Path(cuda.__file__).parent
    launching = {p.stem for p in here.glob("*.py") if "raw_kernel(" in p.read_text()}
    assert launching - {"cuda"} == set(RAW_KERNELS)

    from needle.backends import launch

    class Fake(cuda.CUDADevice):
        cupy = type("cupy", (), {"RawKernel": staticmethod(lambda source, entry: (source,
                                                                                  entry)),
                                 "ndarray": object, "cuda": None})
    monkeypatch.setattr(cuda, "_KERNELS", {})
    for module, source, entries in _raw_sources():
        for entry in entries:
            assert f'extern "C" __global__ void {entry}(' in source, (module, entry)
            for dtype, ctype in (("float32", "float"), ("float64", "double")):
                launcher = Fake().raw_kernel(entry, source, entry, dtype)
                compiled, named = getattr(launcher, "kernel", launcher)  # (no cupy_backends)
                assert compiled == f"typedef {ctype} T;\n{source}" and named == entry
                # and every one launches directly: its signature's types are all packed
                assert launch.parameters(compiled, entry, dtype) is not None, (module, entry)
    assert len(cuda._KERNELS) == 2 * sum(len(e) for _, e in RAW_KERNELS.values())


def test_every_raw_kernel_compiles_for_hopper():
    """NVRTC (cupy's, no GPU needed) compiles every raw kernel for float and double."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc",
                                reason="cupy's NVRTC is not installed")
    from needle.backends.cuda import typed_source

    for module, source, _ in _raw_sources():
        for dtype in ("int64",) if module in INTEGER_KERNELS else ("float32", "float64"):
            program = nvrtc.createProgram(typed_source(source, dtype), f"{module}.cu", [], [])
            try:
                nvrtc.compileProgram(program, ["--gpu-architecture=compute_90"])
            except Exception as e:
                log = nvrtc.getProgramLog(program)
                pytest.fail(f"{module} ({dtype}) does not compile: {e}\n{log}")


def test_dtype_name_is_numpys_read_once_per_dtype():
    """(no GPU) the cuda kernels' dtype checks read a cached name: numpy's own, for every
    dtype the devices make, equal dtypes sharing it."""
    from needle.backends import dtype_names

    for dtype in ("float16", "float32", "float64", "int32", "int64", "bool", "uint8"):
        assert dtype_names.dtype_name(np.dtype(dtype)) == np.dtype(dtype).name == dtype
    assert dtype_names.dtype_name(np.zeros(2, dtype="f").dtype) == "float32"
    assert np.dtype("float32") in dtype_names._NAMES


def _stats(x, n, d):
    x = x.reshape(int(n), int(d))
    mu = x.mean(axis=0)
    return x, mu, ((x - mu) ** 2).mean(axis=0)


def _normalized(x, mu, v, eps, w, b, y, out, s, mean, var, rows=slice(None)):
    """Write y (and out = y w + b where w is given) for `rows` of x, and s, mean and var."""
    sd = np.sqrt(v + eps)
    y.reshape(x.shape)[rows] = (x[rows] - mu) / sd
    if w is not None:
        out.reshape(x.shape)[rows] = y.reshape(x.shape)[rows] * w + b
    s.reshape(-1)[...], mean.reshape(-1)[...], var.reshape(-1)[...] = 1 / sd, mu, v


def _adjoint(g, y, w, s, mg, mgy, dx, rows=slice(None)):
    gw = g[rows] if w is None else g[rows] * w
    dx.reshape(g.shape)[rows] = s.reshape(-1) * (gw - mg - y[rows] * mgy)


def _parts(grid, n, d, rows, parts=None):
    """Each part's rows (slices), checking the grid: (column blocks, parts)."""
    n, d, rows = int(n), int(d), int(rows)
    count = -(-n // rows)
    assert grid == ((d + 31) // 32, count) and parts in (None, count)
    return [slice(c * rows, (c + 1) * rows) for c in range(count)]


def _column_emulations():
    """numpy versions of the column statistics' kernels (normalize.py's, affine_norm.py's and
    SUM's sum_cols_part), taking the grid and the CUDA signatures' arguments by name; the
    ones in parts write each part's rows (or sums) separately."""
    def norm_cols(grid, x, y, s, mean, var, n, d, eps, w=None, b=None, out=None):
        assert grid == ((int(d) + 31) // 32,)
        x, mu, v = _stats(x, n, d)
        _normalized(x, mu, v, eps, w, b, y, out, s, mean, var)

    def grad_cols(grid, g, y, s, dx, n, d, w=None, dw=None, db=None):
        assert grid == ((int(d) + 31) // 32,)
        g, y = g.reshape(int(n), int(d)), y.reshape(int(n), int(d))
        gw = g if w is None else g * w
        _adjoint(g, y, w, s, gw.mean(axis=0), (gw * y).mean(axis=0), dx)
        if w is not None:
            dw[...], db[...] = (g * y).sum(axis=0), g.sum(axis=0)

    def sum_cols_part(grid, x, out, n, d, rows):
        x = x.reshape(int(n), int(d))
        for c, part in enumerate(_parts(grid, n, d, rows)):
            out[c] = x[part].sum(axis=0)

    def sq_cols_part(grid, x, sums, sq, n, d, rows, parts):
        x = x.reshape(int(n), int(d))
        mu = sums.sum(axis=0) / int(n)
        for c, part in enumerate(_parts(grid, n, d, rows, parts)):
            sq[c] = ((x[part] - mu) ** 2).sum(axis=0)

    def cols_parts(grid, x, sums, sq, y, s, mean, var, n, d, rows, parts, eps, w=None, b=None,
                   out=None):
        x = x.reshape(int(n), int(d))
        mu, v = sums.sum(axis=0) / int(n), sq.sum(axis=0) / int(n)
        for part in _parts(grid, n, d, rows, parts):
            _normalized(x, mu, v, eps, w, b, y, out, s, mean, var, part)

    def grad_part(grid, g, y, part, n, d, rows, parts, w=None):
        g, y = g.reshape(int(n), int(d)), y.reshape(int(n), int(d))
        gw = g if w is None else g * w
        for c, rows_c in enumerate(_parts(grid, n, d, rows, parts)):
            for k, terms in enumerate((gw, gw * y, g * y, g)):
                part[k, c] = terms[rows_c].sum(axis=0)

    def grad_cols_parts(grid, g, y, s, part, dx, n, d, rows, parts, w=None, dw=None, db=None):
        g, y = g.reshape(int(n), int(d)), y.reshape(int(n), int(d))
        mg, mgy, sum_gy, sum_g = part.sum(axis=1)
        for rows_c in _parts(grid, n, d, rows, parts):
            _adjoint(g, y, w, s, mg / int(n), mgy / int(n), dx, rows_c)
        if w is not None:
            dw[...], db[...] = sum_gy, sum_g

    return {"norm_cols": norm_cols, "bn_cols": norm_cols, "norm_grad_cols": grad_cols,
            "bn_grad_cols": grad_cols, "sum_cols_part": sum_cols_part,
            "sq_cols_part": sq_cols_part, "norm_cols_parts": cols_parts,
            "bn_cols_parts": cols_parts, "norm_grad_part": grad_part, "bn_grad_part": grad_part,
            "norm_grad_cols_parts": grad_cols_parts, "bn_grad_cols_parts": grad_cols_parts}


def _fake_gpu(emulations, launched):
    """A stand-in for the cuda device: numpy in cupy's place, each raw kernel its numpy
    emulation, called with the grid and the CUDA signature's arguments by name."""
    from types import SimpleNamespace as NS

    def raw_kernel(name, source, entry, dtype):
        assert dtype in ("float32", "float64")
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            assert block == (32, 32) and len(args) == len(names), entry
            assert all(a.flags.c_contiguous for a in args if isinstance(a, np.ndarray))
            launched.append(entry)
            emulations[entry](grid, **dict(zip(names, args)))
        return launch

    return NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty),
              **_scopes(), raw_kernel=raw_kernel)


def test_statistics_in_parts_split_many_rows_of_few_columns():
    """(no GPU) which column statistics are summed in parts, and in how many rows each."""
    from needle.backends.reductions import _MIN_STAT_PARTS, _PART_ROWS, stat_rows

    assert stat_rows(_MIN_STAT_PARTS * _PART_ROWS, 16) is None  # ResNet9's at batch 128
    assert stat_rows(_MIN_STAT_PARTS * _PART_ROWS + 1, 16) == _PART_ROWS
    assert stat_rows(1024 * 64, 16) == _PART_ROWS  # ResNet9's first at batch 1024: 64 parts
    assert stat_rows(10**6, 64 * 32) is None  # 64 blocks of columns: enough blocks
    rows = stat_rows(3 * 10**6, 16)  # more parts than SUM makes: 1,024 at most
    assert rows > _PART_ROWS and -(-3 * 10**6 // rows) <= 1024


def test_batch_norm_kernels_get_their_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy standing in for cupy, and numpy versions of the kernels that take their
    arguments by the names of the CUDA signatures) the Python around the fused BatchNorm
    kernels and the normalisation's column kernels: rows of (N, C) and of NCHW inputs
    (C-ordered, and a convolution's channels-last output), many rows of few columns in
    parts (three launches forward, two backward), arguments in the kernels' order, results
    shaped and laid out as the reference's, to float rounding. The kernels themselves run in
    test_kernels.py, and to the bit below, where cupy sees a GPU."""
    from needle.backends import affine_norm, normalize
    from needle.ops.affine_norm import batch_norm_grad_portable, batch_norm_portable
    from needle.ops.norm import normalize_grad_portable, normalize_portable

    launched = []
    fake = _fake_gpu(_column_emulations(), launched)
    monkeypatch.setattr(affine_norm, "device_of", lambda a: fake)
    monkeypatch.setattr(normalize, "device_of", lambda a: fake)
    rng = np.random.default_rng(0)
    nhwc = rng.standard_normal((4, 5, 6, 3)).astype(np.float32)
    tall = rng.standard_normal((5, 40, 41, 3)).astype(np.float32)  # 8,200 rows: 9 parts
    for x, parts in ((rng.standard_normal((6, 5)), False),
                     (rng.standard_normal((4, 3, 5, 6)).astype(np.float32), False),
                     (nhwc.transpose(0, 3, 1, 2), False), (tall.transpose(0, 3, 1, 2), True),
                     (rng.standard_normal((9000, 5)) * 3 + 1, True)):
        c = x.shape[1]
        w, b = (rng.standard_normal(c).astype(x.dtype) for _ in range(2))
        launched.clear()
        got, want = affine_norm.batch_norm_cuda(x, w, b, 1e-5), batch_norm_portable(x, w, b, 1e-5)
        assert launched == (["sum_cols_part", "sq_cols_part", "bn_cols_parts"] if parts
                            else ["bn_cols"])
        g = rng.standard_normal(x.shape).astype(x.dtype)
        y, s, mean = want[1:4]
        launched.clear()
        got += affine_norm.batch_norm_grad_cuda(g, x, w, y, s, mean)
        assert launched == (["bn_grad_part", "bn_grad_cols_parts"] if parts else ["bn_grad_cols"])
        want += batch_norm_grad_portable(g, x, w, y, s, mean)
        axes = (0,) if x.ndim == 2 else (0, 2, 3)
        launched.clear()
        got += normalize.normalize_cuda(x, axes, 1e-5)
        got += (normalize.normalize_grad_cuda(g, y, s, axes),)
        assert launched == (["sum_cols_part", "sq_cols_part", "norm_cols_parts",
                             "norm_grad_part", "norm_grad_cols_parts"] if parts
                            else ["norm_cols", "norm_grad_cols"])
        want += normalize_portable(x, axes, 1e-5) + (normalize_grad_portable(g, y, s, axes),)
        for i, (a, e) in enumerate(zip(got, want, strict=True)):
            assert a.shape == e.shape and a.dtype == e.dtype, (x.shape, i)
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=f"{x.shape} {i}")
        if x.ndim == 4 and x.strides[1] == x.itemsize:  # channels-last in memory: kept so
            assert got[0].strides == got[1].strides == got[5].strides == x.strides
    assert affine_norm.batch_norm_grad_cuda(g, x, w, None, s, mean) is NotImplemented


def _run_c_body(body: str, size: int, **values) -> np.ndarray:
    """An elementwise kernel's C body run by numpy over every output index i at once: its
    integer arithmetic (C division of non-negative numbers as //), and one final
    `res = (cond) ? (T)0 : src[index];` as a masked gather from the flat `src`."""
    import re

    *lines, last = [line.strip().rstrip(";") for line in body.strip().splitlines()]
    scope = {"i": np.arange(size, dtype=np.int64), **values}
    for line in lines:
        for statement in line.replace("const long long ", "").split(", "):
            name, expr = statement.split(" = ", 1)
            scope[name.strip()] = eval(expr.replace(" / ", " // "), {}, scope)
    cond, index = re.fullmatch(r"res = \((.*)\) \? \(T\)0 : src\[(.*)\]", last).groups()
    cond = eval(" | ".join(f"({c})" for c in cond.split(" || ")), {}, scope)
    index = eval(index.replace(" / ", " // "), {}, scope)
    src = values["src"].reshape(-1)
    return np.where(cond, 0, src[np.where(cond, 0, index)])


def test_im2col_kernels_index_arithmetic_gathers_the_references_columns():
    """(no GPU) IM2COL_CUDA's C body, its integer arithmetic run by numpy over every output
    index: the reference's windows (padding, strides, kernels that are not square)."""
    from needle.backends.im2col import IM2COL_CUDA
    from needle.ops.im2col import im2col_portable

    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 7, 6, 3))
    for (kh, kw), s, p in [((3, 3), 1, 1), ((2, 3), 2, 0), ((5, 5), 3, 2), ((7, 7), 4, 3)]:
        want = im2col_portable(a, (kh, kw), s, p)
        n, ho, wo, k = want.shape
        got = _run_c_body(IM2COL_CUDA, want.size, src=a, H=7, W=6, C=3, KW=kw, K=k, S=s, P=p,
                          HO=ho, WO=wo)
        np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_window_kernels_get_their_sizes_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place) im2col_cuda and col2im_cuda hand their raw kernels the
    sizes in the order of the kernels' parameters: IM2COL_CUDA's body run by numpy over the
    arguments by name gives the reference's columns, and col2im's arguments by name give
    the reference's sum of the windows; with elementwise.RAW off, their ElementwiseKernels
    get the same sizes."""
    from types import SimpleNamespace as NS

    from needle.backends import elementwise, im2col
    from needle.ops.im2col import col2im_portable, im2col_portable

    def raw_kernel(name, source, entry, dtype):
        assert source is im2col.SOURCE and name == entry
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            kw = dict(zip(names, args, strict=True))
            arrays = {k: v for k, v in kw.items() if isinstance(v, np.ndarray)}
            sizes = {k: int(v) for k, v in kw.items() if k not in arrays}
            out = arrays["out"]
            assert (grid, block) == elementwise.flat_grid(out.size) and sizes["n"] == out.size
            if entry == "im2col":
                out[...] = _run_c_body(im2col.IM2COL_CUDA, out.size, src=arrays["src"],
                                       **sizes).reshape(out.shape)
            else:
                taps = arrays["taps"]
                assert (sizes["HO"], sizes["WO"]) == taps.shape[2:4] and sizes["N"] == out.shape[0]
                out[...] = col2im_portable(taps, tuple(sizes[k] for k in "NHWC"),
                                           (sizes["KH"], sizes["KW"]), sizes["S"], sizes["P"])
        return launch

    def elementwise_kernel(name, params, outs, body):  # (elementwise.RAW off: as before)
        names = [p.split()[-1] for p in params.split(",")]

        def run(*args):
            out = args[-1]
            launch = raw_kernel(name, im2col.SOURCE, name, "float64")
            launch(*elementwise.flat_grid(out.size),
                   (args[0], out, np.int64(out.size), *args[1:-1]))
            assert names[0] == ("src" if name == "im2col" else "taps")
            return out
        return run

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty), **_scopes(),
              raw_kernel=raw_kernel, elementwise_kernel=elementwise_kernel)
    monkeypatch.setattr(im2col, "device_of", lambda a: fake)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 7, 6, 3))
    for raw in (True, False):
        monkeypatch.setattr(elementwise, "RAW", raw)
        for kernel, s, p in [((3, 3), 1, 1), ((2, 3), 2, 0), ((5, 5), 3, 2)]:
            for _ in range(2):  # (the second call: the sizes kept from the first)
                want = im2col_portable(a, kernel, s, p)
                np.testing.assert_array_equal(im2col.im2col_cuda(a, kernel, s, p), want)
            n, ho, wo, _ = want.shape
            taps = rng.standard_normal((kernel[0] * kernel[1], n, ho, wo, 3))
            np.testing.assert_allclose(im2col.col2im_cuda(taps, a.shape, kernel, s, p),
                                       col2im_portable(taps, a.shape, kernel, s, p))


def _kernel_arguments(source: str, entry: str) -> list[str]:
    """The parameter names of `entry`'s CUDA signature in `source`."""
    import re

    params = re.search(rf"void {entry}\(([^)]*)\)", source).group(1)
    return [p.split()[-1].lstrip("*") for p in params.split(",")]


def test_sums_get_their_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, numpy kernels taking the CUDA signatures' arguments
    by name and the grid) sum_cuda's rows, columns, and long column sums in parts (the
    parts' grid and their second sum): the reference's sums to float rounding."""
    from types import SimpleNamespace as NS

    from needle.backends import sums

    def sum_rows(grid, x, out, d):
        out.reshape(-1)[...] = x.reshape(-1, int(d)).sum(axis=1)

    def sum_cols(grid, x, out, n, d):
        out.reshape(-1)[...] = x.reshape(int(n), int(d)).sum(axis=0)

    def sum_cols_part(grid, x, out, n, d, rows):
        x, rows = x.reshape(int(n), int(d)), int(rows)
        assert grid[1] == out.shape[0] == -(-int(n) // rows)
        for c in range(grid[1]):
            out[c] = x[c * rows:(c + 1) * rows].sum(axis=0)

    emulations = {"sum_rows": sum_rows, "sum_cols": sum_cols, "sum_cols_part": sum_cols_part}
    launched = []

    def raw_kernel(name, source, entry, dtype):
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            assert len(args) == len(names) and all(
                a.flags.c_contiguous for a in args if isinstance(a, np.ndarray))
            launched.append(entry)
            emulations[entry](grid, **dict(zip(names, args)))
        return launch

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty),
              **_scopes(), raw_kernel=raw_kernel)
    monkeypatch.setattr(sums, "device_of", lambda a: fake)
    rng = np.random.default_rng(0)
    for shape, axes, keepdims, kernels in [
            ((6, 5), (1,), True, ["sum_rows"]), ((300, 70), (0,), False, ["sum_cols"]),
            ((70000, 3), (0,), True, ["sum_cols_part", "sum_cols"]),
            ((8, 33, 5), (0, 1), False, ["sum_cols"]), ((2, 50000), (1,), False, [])]:
        a = rng.standard_normal(shape)  # (float64: numpy's own float32 sum over axis 0 of
        launched.clear()  # 70,000 rows is a plain running sum, 1e-5 from the parts')
        got = sums.sum_cuda(a, axes, keepdims)
        assert launched == kernels, shape
        if not kernels:
            assert got is NotImplemented
            continue
        want = a.sum(axis=axes, keepdims=keepdims)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-10)


def test_layer_norm_kernels_get_their_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, numpy kernels taking the CUDA signatures' arguments
    by name and the grid) the Python around LayerNorm's kernels: rows of 2-d, 3-d and
    transposed inputs, the adjoints' sums in one kernel or, for many rows of few columns, in
    parts of sums.py's rows and then the parts (as SUM would sum them), results shaped as
    the reference's, to float rounding. The kernels themselves run in test_kernels.py and
    below (to the bit) where cupy sees a GPU."""
    from types import SimpleNamespace as NS

    from needle.backends import layer_norm, normalize
    from needle.ops.affine_norm import layer_norm_grad_portable, layer_norm_portable

    def ln_rows(grid, x, w, b, out, y, s, mean, d, eps):
        x = x.reshape(-1, int(d))
        assert grid == (x.shape[0],)
        mu = x.mean(axis=1, keepdims=True)
        sd = np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps)
        y.reshape(x.shape)[...] = (x - mu) / sd
        out.reshape(x.shape)[...] = y.reshape(x.shape) * w + b
        s.reshape(-1)[...], mean.reshape(-1)[...] = (1 / sd).ravel(), mu.ravel()

    def ln_grad_rows(grid, g, y, w, s, dx, d):
        g, y = g.reshape(-1, int(d)), y.reshape(-1, int(d))
        assert grid == (g.shape[0],)
        gw = g * w
        dx.reshape(g.shape)[...] = s.reshape(-1, 1) * (
            gw - gw.mean(axis=1, keepdims=True) - y * (gw * y).mean(axis=1, keepdims=True))

    def ln_sums(grid, g, y, dw, db, n, d, rows):
        g, y, rows = g.reshape(int(n), int(d)), y.reshape(int(n), int(d)), int(rows)
        assert grid == ((int(d) + 31) // 32, -(-int(n) // rows))
        for c in range(grid[1]):
            part = slice(c * rows, (c + 1) * rows)
            dw.reshape(-1, int(d))[c] = (g[part] * y[part]).sum(axis=0)
            db.reshape(-1, int(d))[c] = g[part].sum(axis=0)

    def sum_cols2(grid, pw, pb, dw, db, n, d):
        assert grid == ((int(d) + 31) // 32,)
        dw[...] = pw.reshape(int(n), int(d)).sum(axis=0)
        db[...] = pb.reshape(int(n), int(d)).sum(axis=0)

    emulations = {"ln_rows": ln_rows, "ln_grad_rows": ln_grad_rows, "ln_sums": ln_sums,
                  "sum_cols2": sum_cols2}
    launched = []

    def raw_kernel(name, source, entry, dtype):
        assert source is layer_norm.SOURCE and name == entry and dtype in ("float32", "float64")
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            assert len(args) == len(names) and all(
                a.flags.c_contiguous for a in args if isinstance(a, np.ndarray))
            kw = dict(zip(names, args))
            assert block == ((normalize._threads(int(kw["d"])),) if "rows" in entry
                             else (32, 32)), entry
            launched.append(entry)
            emulations[entry](grid, **kw)
        return launch

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty),
              **_scopes(), raw_kernel=raw_kernel)
    monkeypatch.setattr(layer_norm, "device_of", lambda a: fake)
    rng = np.random.default_rng(0)
    for x, parts in ((rng.standard_normal((6, 5)), False),
                     (rng.standard_normal((3, 4, 37)).astype(np.float32), False),
                     (rng.standard_normal((40, 7)).T, False),
                     (rng.standard_normal((3, 1000, 5)), True)):  # 3,000 rows of 5: in parts
        c = x.shape[-1]
        w, b = (rng.standard_normal(c).astype(x.dtype) for _ in range(2))
        launched.clear()
        got, want = layer_norm.layer_norm_cuda(x, w, b, 1e-5), layer_norm_portable(x, w, b, 1e-5)
        assert launched == ["ln_rows"]
        g = rng.standard_normal(x.shape).astype(x.dtype)
        y, s, mean = want[1:]
        launched.clear()
        got += layer_norm.layer_norm_grad_cuda(g, x, w, y, s, mean)
        assert launched == ["ln_grad_rows", "ln_sums"] + (["sum_cols2"] if parts else [])
        want += layer_norm_grad_portable(g, x, w, y, s, mean)
        for i, (a, e) in enumerate(zip(got, want)):
            assert a.shape == e.shape and a.dtype == e.dtype, (x.shape, i)
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=f"{x.shape} {i}")
    assert layer_norm.layer_norm_grad_cuda(g, x, w, None, s, mean) is NotImplemented
    assert layer_norm.layer_norm_cuda(x[..., :0], w[:0], b[:0], 1e-5) is NotImplemented
    assert layer_norm.layer_norm_cuda(x, w[:2], b[:2], 1e-5) is NotImplemented


def test_layer_norm_kernels_give_the_references_bits():
    """(where cupy sees a GPU) LayerNorm's kernels against the reference on the same GPU,
    to the bit: out, y, s and mean, and the three adjoints, also for many rows of few
    columns (the adjoints' sums in parts)."""
    device = ndl.cuda()
    if not device.enabled():
        pytest.skip(device.unavailable_reason())
    from needle.backends import layer_norm
    from needle.ops.affine_norm import layer_norm_grad_portable, layer_norm_portable

    cupy = device.cupy
    rng = np.random.default_rng(4)
    for shape, dtype in (((6, 5), "float32"), ((16, 64, 64), "float32"), ((256, 64, 64),
                         "float32"), ((3, 4, 300), "float64"), ((5000, 3), "float32")):
        x = cupy.asarray(rng.standard_normal(shape) * 3 + 1, dtype=dtype)
        w, b, = (cupy.asarray(rng.standard_normal(shape[-1]), dtype=dtype) for _ in range(2))
        g = cupy.asarray(rng.standard_normal(shape), dtype=dtype)
        got, want = layer_norm.layer_norm_cuda(x, w, b, 1e-5), layer_norm_portable(x, w, b, 1e-5)
        y, s, mean = want[1:]
        got += layer_norm.layer_norm_grad_cuda(g, x, w, y, s, mean)
        want += layer_norm_grad_portable(g, x, w, y, s, mean)
        for i, (a, e) in enumerate(zip(got, want)):
            assert a.shape == e.shape and a.dtype == e.dtype
            np.testing.assert_array_equal(cupy.asnumpy(a), cupy.asnumpy(e),
                                          err_msg=f"{shape} {dtype} result {i}")


def test_index_check_gets_its_arguments_in_the_kernels_order(monkeypatch):
    """(no GPU: numpy in cupy's place, a numpy kernel taking the CUDA signature's arguments
    by name) the Python around the index check's kernel: a C-ordered copy of a view, the
    grid, and the reference's (indices, any bad)."""
    from types import SimpleNamespace as NS

    from needle.backends import index_check
    from needle.ops.indices import checked_indices_portable

    def checked_indices(x, out, bad, size, n):
        assert x.flags.c_contiguous and x.size == out.size == size
        flat = x.reshape(-1)
        wrong = (flat < 0) | (flat >= n)
        out.reshape(-1)[...] = np.where(wrong, 0, flat)
        bad[...] = bad | wrong.any()

    def raw_kernel(name, source, entry, dtype):
        assert source is index_check.SOURCE and name == entry == "checked_indices"
        assert dtype == "int64"
        names = _kernel_arguments(source, entry)

        def launch(grid, block, args):
            assert len(args) == len(names) and block == (256,)
            kw = dict(zip(names, args))
            assert grid == (min(-(-int(kw["size"]) // 256), 1024),)
            checked_indices(**kw)
        return launch

    fake = NS(cupy=NS(ascontiguousarray=np.ascontiguousarray, empty=np.empty, zeros=np.zeros,
                      bool_=np.bool_), **_scopes(), raw_kernel=raw_kernel)
    monkeypatch.setattr(index_check, "device_of", lambda a: fake)
    ids = np.random.default_rng(0).integers(-3, 12, (7, 400))
    for x in (np.clip(ids, 0, 9), ids, ids.T, ids[:1, :1]):
        got, want = index_check.checked_indices_cuda(x, 10), checked_indices_portable(x, 10)
        assert got[0].shape == want[0].shape and got[0].dtype == want[0].dtype
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1].shape == () and bool(got[1]) == bool(want[1])
    assert index_check.checked_indices_cuda(ids.astype(np.int32), 10) is NotImplemented
