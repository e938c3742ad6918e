"""The torch and jax devices: names, lazy imports, numpy's random state, 64-bit policy.

Everything else about them is the whole suite run on them (the `device` fixture's "torch" and
"jax"); these are the parts only these two devices have.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import needle as ndl
from needle import backends
from needle.backends.jax_device import JaxDevice
from needle.backends.torch_device import TorchDevice


def test_names_identity_and_pickling():
    assert repr(ndl.torch()) == "torch()" and ndl.torch() is ndl.torch("cpu")
    assert ndl.torch("cuda") is ndl.torch("cuda:0") and repr(ndl.torch("cuda")) == "torch('cuda:0')"
    assert ndl.torch("mps") is ndl.torch("MPS") and ndl.torch("cuda:1") != ndl.torch("cuda")
    assert repr(ndl.jax()) == "jax()" and ndl.jax("gpu") is ndl.jax("gpu:0")
    assert ndl.jax("cuda:1") is ndl.jax("gpu:1") and ndl.jax() != ndl.jax("cpu")
    for dev in (ndl.torch(), ndl.torch("cuda:1"), ndl.torch("mps"), ndl.jax(), ndl.jax("tpu")):
        assert pickle.loads(pickle.dumps(dev)) is dev
        assert backends.get_device(dev.kind, dev.index) is dev
    for bad in ("gpu", "cuda:x", "mps:1", "xla"):
        with pytest.raises(ValueError, match="torch device"):
            ndl.torch(bad)
    with pytest.raises(ValueError, match="jax device"):
        ndl.jax("mps")
    assert ndl.all_devices() == [ndl.cpu(), ndl.cuda(), ndl.strict(), ndl.torch(), ndl.jax()]


def test_the_suite_lets_jax_allocate_as_it_goes():
    """conftest.py's default, which this file's subprocesses inherit: jax would otherwise take
    75% of a GPU's memory in each process, and the suite's other workers run out."""
    import conftest

    assert conftest.JAX_PREALLOCATE_NAMED or os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def run_python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_constructing_imports_neither_library():
    run_python("""
        import sys, needle as ndl
        ndl.torch("cuda"), ndl.torch("mps"), ndl.jax(), ndl.jax("gpu")
        assert "torch" not in sys.modules and "jax" not in sys.modules
        """)


def test_missing_library_is_a_reason_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setitem(sys.modules, "jax", None)
    for dev, hint in ((TorchDevice("cpu"), "needle[torch]"), (TorchDevice("cuda"), "needle[torch]"),
                      (JaxDevice(), "needle[jax]")):
        assert not dev.enabled() and hint in dev.unavailable_reason()
        with pytest.raises(RuntimeError, match=hint.replace("[", r"\[").replace("]", r"\]")):
            dev.zeros(2)


def test_accelerators_that_are_absent_say_so():
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        assert "CUDA GPU" in ndl.torch("cuda").unavailable_reason()
    if not torch.backends.mps.is_available():
        assert "MPS" in ndl.torch("mps").unavailable_reason()
    assert "torch('cuda:99')" in ndl.torch("cuda:99").unavailable_reason()


def test_torch_tensors_never_require_grad():
    pytest.importorskip("torch")
    dev = ndl.torch()
    x = ndl.Tensor(np.ones((2, 3)), device=dev, dtype="float32")
    w = ndl.init.randn(3, 2, device=dev, requires_grad=True)
    (x @ w).relu().sum().backward()
    for array in (x._array, w._array, w.grad._array, dev.rand(2)):
        assert array.requires_grad is False


def test_mps_has_no_float64():
    """The MPS rules, run on the cpu: float64 data becomes float32, dtype float64 is refused."""
    torch = pytest.importorskip("torch")
    import array_api_compat.torch as xp

    dev = TorchDevice("mps")
    dev._reason = ""  # pretend the accelerator is there, computing on the cpu
    dev._load = lambda: (setattr(dev, "_torch", torch), (xp, torch.device("cpu")))[1]
    assert dev.from_numpy(np.ones(2)).dtype == torch.float32
    assert dev.rand(2).dtype == torch.float32
    with pytest.raises(TypeError, match="no 64-bit floats"):
        ndl.Tensor([1.0], device=dev, dtype="float64")
    assert dev.dtype("float32") == torch.float32


def test_importing_jax_keeps_numpys_random_state():
    pytest.importorskip("jax")
    out = run_python("""
        import numpy as np, needle as ndl
        np.random.seed(4)
        dev = ndl.jax()
        assert dev.enabled()  # imports jax
        print(repr(float(np.random.rand())), repr(float(ndl.init.rand(1, device=dev).numpy()[0])))
        """)
    np.random.seed(4)
    first, second = np.random.rand(), np.float32(np.random.rand())
    assert [float(v) for v in out.split()] == [first, second]


def test_jax_without_x64_holds_32_bit_types_and_leaves_jax_alone():
    pytest.importorskip("jax")
    run_python("""
        import warnings
        warnings.simplefilter("error")  # no truncation warnings from needle's own calls
        import numpy as np, needle as ndl
        dev = ndl.jax()
        t = ndl.Tensor(np.arange(6.0).reshape(2, 3), device=dev)  # float64 data
        assert t.dtype == "float32", t.dtype
        assert ndl.Tensor([1, 2], device=dev).dtype == "int32"
        for name in ("float64", "int64"):
            try:
                ndl.Tensor([1.0], device=dev, dtype=name)
            except TypeError as e:
                assert "jax_enable_x64" in str(e) and name in str(e), e
            else:
                raise AssertionError(f"dtype {name} was accepted")
        model = ndl.nn.Sequential(ndl.nn.Embedding(5, 4, device=dev),
                                  ndl.nn.Linear(4, 3, device=dev))
        opt = ndl.optim.Adam(model.parameters(), lr=0.1)
        loss = ndl.nn.SoftmaxLoss()(model(ndl.Tensor([[1, 4]], device=dev)).reshape((2, 3)),
                                    ndl.Tensor([0, 2], device=dev))
        loss.backward()
        opt.step()
        ndl.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        wide = ndl.Tensor(np.ones(3), dtype="float64")  # (a review: a float64 leaf's .to
        assert wide.to(dev).dtype == "float32"  # asked jax for float64 and raised)
        lin = ndl.nn.Linear(3, 2, dtype="float64")
        h = lin(ndl.Tensor(np.ones((1, 3)), dtype="float64")).to(dev)
        assert h.dtype == "float32"
        (h * h).sum().backward()
        assert lin.weight.grad.dtype == "float64"  # (the adjoint back in the input's dtype)
        import jax, jax.numpy as jnp
        assert not jax.config.jax_enable_x64 and jnp.ones(2).dtype == jnp.float32
        """)



def test_jax_without_x64_refuses_integers_that_32_bits_cannot_hold():
    """int64 data becomes int32 while x64 is off: values outside int32 raise a ValueError
    (they wrapped, and an embedding id or label 2**40 read as 0), in range they convert."""
    pytest.importorskip("jax")
    run_python("""
        import numpy as np, needle as ndl
        dev = ndl.jax()

        def refused(make, dtype, low, high):
            try:
                make()
            except ValueError as e:
                for part in (f"[{low}, {high}]", dtype, "jax_enable_x64"):
                    assert part in str(e), (part, str(e))
            else:
                raise AssertionError(f"{dtype} data in [{low}, {high}] was accepted")

        refused(lambda: ndl.nn.Embedding(5, 3, device=dev)(
            ndl.Tensor(np.array([[2**40, 0]]), device=dev)), "int64", 0, 2**40)
        logits = ndl.Tensor(np.zeros((1, 5)), device=dev, dtype="float32")
        refused(lambda: ndl.nn.SoftmaxLoss()(logits, ndl.Tensor([2**33], device=dev)),
                "int64", 2**33, 2**33)
        refused(lambda: ndl.Tensor(np.array([-2**31 - 1, 3]), device=dev), "int64",
                -2**31 - 1, 3)
        refused(lambda: ndl.Tensor(np.array([2**32], dtype=np.uint64), device=dev), "uint64",
                2**32, 2**32)
        host = ndl.jax("cpu")  # jax's host memory, where from_dlpack shares numpy's
        refused(lambda: ndl.from_dlpack(np.array([2**40]), device=host), "int64", 2**40, 2**40)
        edges = ndl.Tensor(np.array([-2**31, 2**31 - 1]), device=dev)
        assert edges.dtype == "int32" and edges.numpy().tolist() == [-2**31, 2**31 - 1]
        top = ndl.Tensor(np.array([2**32 - 1], dtype=np.uint64), device=dev)
        assert top.dtype == "uint32" and top.numpy().tolist() == [2**32 - 1]
        assert ndl.Tensor(np.zeros(0, dtype=np.int64), device=dev).shape == (0,)
        assert ndl.from_dlpack(np.array([7, -7]), device=host).numpy().tolist() == [7, -7]
        """)


def test_jax_with_x64_holds_float64():
    pytest.importorskip("jax")
    run_python("""
        import jax
        jax.config.update("jax_enable_x64", True)
        import numpy as np, needle as ndl
        t = ndl.Tensor(np.arange(3.0), device=ndl.jax())
        assert t.dtype == "float64" and (t * t).sum().numpy() == 5.0
        """)


def test_jax_matmuls_run_at_full_float32_precision_unless_the_user_chose(device):
    # on a GPU jax's default precision multiplies float32 with reduced-precision passes; the
    # jax device asks for "highest" in every product needle makes (Linear, attention) and in
    # its convolutions (XLA's own: backends/conv_jax.py), unless the user set jax's own
    # default, which needle then follows
    if device.kind != "jax":
        pytest.skip("jax only")
    calls = []
    real = device.xp.matmul
    assert real.keywords == {"precision": "highest"}

    def spy(a, b):
        calls.append((tuple(a.shape), tuple(b.shape)))
        return real(a, b)

    import jax

    assert jax.config.jax_default_matmul_precision is None  # the user's setting is untouched
    device.xp.matmul = spy
    try:
        np.random.seed(0)
        conv = ndl.nn.Conv(2, 3, 3, device=device)
        x = ndl.Tensor(np.ones((1, 2, 4, 4)), device=device)
        conv(x).sum().backward()
        (x.reshape((2, 16)) @ ndl.Tensor(np.ones((16, 2)), device=device)).sum().backward()
    finally:
        device.xp.matmul = real
    assert ((2, 16), (16, 2)) in calls  # the plain matmul
    from needle.backends import conv_jax
    from needle.ops.conv import CONV

    assert CONV.on(x._array) is conv_jax.conv_jax and conv_jax._highest()
    run_python("""
        import jax
        jax.config.update("jax_default_matmul_precision", "bfloat16")
        import needle as ndl
        import jax.numpy as jnp
        from needle.backends import conv_jax
        assert ndl.jax().xp.matmul is jnp.matmul  # the user's choice: left alone
        assert not conv_jax._highest()  # in the convolutions too
        """)


def test_torch_relu_and_clamps_make_no_tensor_of_the_python_number(monkeypatch):
    # array-api-compat's maximum(x, 0) makes a tensor of 0 on x's device at every call: on a
    # GPU a host-to-device copy and a sync per ReLU (seen on an H100); the torch device's
    # namespace clamps instead, with the same numbers
    torch = pytest.importorskip("torch")
    dev = ndl.torch()
    xp = dev.xp
    made = []
    real = torch.asarray
    monkeypatch.setattr(torch, "asarray", lambda *a, **k: made.append(a) or real(*a, **k))
    x = ndl.Tensor(np.array([[-1.5, 0.0, 2.0], [np.nan, -0.0, 3.0]]), device=dev,
                   dtype="float32")
    out = ndl.ops.relu(x).numpy()
    low, high = xp.maximum(x._array, -1), xp.minimum(x._array, 1)
    assert made == []
    ints = xp.maximum(xp.asarray([-2, 3]), 0)  # not floating: compat's own function
    np.testing.assert_array_equal(out, np.maximum(x.numpy(), 0))
    np.testing.assert_array_equal(low.numpy(), np.maximum(x.numpy(), -1))
    np.testing.assert_array_equal(high.numpy(), np.minimum(x.numpy(), 1))
    assert ints.tolist() == [0, 3]


def test_torch_namespaces_direct_functions_agree_with_array_api_compats():
    """reshape, sum, matmul, permute_dims and matrix_transpose skip compat's Python where it
    has nothing to do (no copy asked, axes given, one dtype): the same results, dtypes and
    errors as compat's on every call form needle makes, compat's own function for the rest."""
    torch = pytest.importorskip("torch")
    import array_api_compat.torch as compat

    xp = ndl.torch().xp
    assert xp.reshape is not compat.reshape and xp.sum is not compat.sum
    x = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    ints = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    flags = ints > 2

    def same(a, b):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)

    for shape, copy in [((6, 4), None), ((4, -1), None), ((24,), True), ((2, 12), False)]:
        same(xp.reshape(x, shape, copy=copy), compat.reshape(x, shape, copy=copy))
    assert xp.reshape(x, (6, 4)).data_ptr() == x.data_ptr()  # a view where one exists
    with pytest.raises(ValueError):  # no view of a transposed array: compat's error
        xp.reshape(x.permute(2, 0, 1), (24,), copy=False)
    for a in (x, ints, flags):
        for axis in (None, (), 0, -1, (0, 1), (0, -1)):
            for keepdims in (False, True):
                same(xp.sum(a, axis=axis, keepdims=keepdims),
                     compat.sum(a, axis=axis, keepdims=keepdims))
        same(xp.sum(a, axis=1, dtype=torch.float64), compat.sum(a, axis=1, dtype=torch.float64))
    b = torch.ones((4, 5), dtype=torch.float32)
    same(xp.matmul(x, b), compat.matmul(x, b))
    same(xp.matmul(x, b.double()), compat.matmul(x, b.double()))  # promoted to float64
    assert xp.matmul(x, b.double()).dtype == torch.float64
    same(xp.permute_dims(x, (2, 0, 1)), compat.permute_dims(x, (2, 0, 1)))
    for a in (x, b, ints):
        same(xp.matrix_transpose(a), compat.matrix_transpose(a))
    assert xp.matrix_transpose(x).data_ptr() == x.data_ptr()  # a view, as compat's
    with pytest.raises(ValueError, match="at least 2-dimensional"):  # compat's error
        xp.matrix_transpose(torch.ones(3))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_torch_refuses_the_unsigned_dtypes_it_only_stores(dtype):
    """torch has no addition, max or negation on uint16/32/64 (NotImplementedError at the
    first op, where every other device computed); made on torch, they are a TypeError."""
    d = ndl.torch()
    if not d.enabled():
        pytest.skip(d.unavailable_reason())
    with pytest.raises(TypeError, match=rf"dtype {dtype}: torch has no arithmetic on it"):
        ndl.Tensor(np.array([1, 2], dtype=dtype), device=d)
    with pytest.raises(TypeError, match=rf"dtype {dtype}: torch has no arithmetic on it"):
        ndl.init.zeros(2, device=d, dtype=dtype)
    with pytest.raises(TypeError, match=rf"dtype {dtype}: torch has no arithmetic on it"):
        ndl.Tensor(np.array([1, 2], dtype=dtype)).to(d)
    assert (ndl.Tensor(np.array([250, 10], np.uint8), device=d) + 1).numpy().tolist() == [251, 11]


def test_importing_jax_leaves_other_threads_draws_alone():
    """import_jax restored numpy's global state after the import (jax's k8s module draws 5
    numbers), rewinding every draw another thread made meanwhile: seeded weights came out
    different, some repeated. Now the importing thread alone draws from a private state."""
    pytest.importorskip("jax")
    out = run_python("""
        import threading, time
        import numpy as np, needle as ndl
        def draws():
            np.random.seed(0)
            out = []
            for _ in range(60):
                out.append(np.random.rand(4))
                time.sleep(0.005)
            return out
        reference, got = draws(), {}
        other = threading.Thread(target=lambda: got.setdefault("draws", draws()))
        other.start()
        time.sleep(0.02)
        assert ndl.jax().enabled()  # imports jax in this thread meanwhile
        other.join()
        print(sum(not np.array_equal(a, b) for a, b in zip(reference, got["draws"])))
        """)
    assert out.strip().splitlines()[-1] == "0", out


def test_deferred_checks_are_raised_in_the_thread_that_made_them(monkeypatch):
    """An accelerator defers index checks to the next read: the list was the device's, so
    another thread's next read raised this thread's bad id, and this thread's read returned
    row 0 silently. Each thread now keeps its own (simulated on torch:cpu)."""
    dev = ndl.torch()
    if not dev.enabled():
        pytest.skip(dev.unavailable_reason())
    monkeypatch.setattr(TorchDevice, "defers_checks", property(lambda self: True))
    emb = ndl.nn.Embedding(10, 4, device=dev)
    made, read = threading.Event(), threading.Event()
    out = {}

    def bad_request():
        with ndl.no_grad():
            y = emb(ndl.Tensor(np.array([[1, 42]]), device=dev, dtype="int64"))
        made.set()
        read.wait()
        try:
            y.numpy()
            out["bad"] = "returned"
        except ValueError as e:
            out["bad"] = str(e)

    def other_work():
        made.wait()
        out["other"] = float((ndl.Tensor(np.ones(3, np.float32), device=dev) * 2).sum().numpy())
        read.set()
    threads = [threading.Thread(target=bad_request), threading.Thread(target=other_work)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"other": 6.0, "bad": "Embedding: indices must be in [0, 10), found 42"}


def test_a_finished_threads_deferred_checks_are_raised_by_the_reader(monkeypatch):
    """A worker made the lookup with a bad id and ended; the per-thread lists lost its
    check and the main thread's read returned row 0 silently. A finished thread's checks
    are raised by the next read of any thread."""
    dev = ndl.torch()
    if not dev.enabled():
        pytest.skip(dev.unavailable_reason())
    monkeypatch.setattr(TorchDevice, "defers_checks", property(lambda self: True))
    emb = ndl.nn.Embedding(5, 2, device=dev)
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault(
        "y", emb(ndl.Tensor(np.array([[1, 7]]), device=dev, dtype="int64"))))
    worker.start()
    worker.join()
    with pytest.raises(ValueError, match=r"Embedding: indices must be in \[0, 5\), found 7"):
        out["y"].numpy()
