"""ndl.init against numpy: every draw is np.random's, transformed as the course documents."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

import needle as ndl
from needle import init


def check(t: ndl.Tensor, expected: np.ndarray, device, dtype: str = "float32") -> None:
    """Same device, dtype, shape and values (bit for bit: the same IEEE operations)."""
    assert t.device == device
    assert t.dtype == dtype
    assert t.shape == expected.shape
    np.testing.assert_array_equal(t.numpy(), expected.astype(dtype))


def test_rand_is_numpy_rand_scaled(device):
    np.random.seed(3)
    t = init.rand(4, 5, low=-2.0, high=3.0, device=device)
    np.random.seed(3)
    check(t, np.random.rand(4, 5) * (3.0 - -2.0) + -2.0, device)
    assert not t.requires_grad


def test_randn_is_numpy_randn_scaled(device):
    np.random.seed(4)
    t = init.randn(3, 2, mean=1.5, std=0.5, device=device, dtype="float64",
                   requires_grad=True)
    np.random.seed(4)
    check(t, np.random.randn(3, 2) * 0.5 + 1.5, device, "float64")
    assert t.requires_grad


def test_constant_ones_zeros(device):
    check(init.constant(2, 3, c=2.5, device=device), np.full((2, 3), 2.5), device)
    check(init.ones(4, device=device, dtype="float64"), np.ones(4), device, "float64")
    check(init.zeros(2, 1, 3, device=device), np.zeros((2, 1, 3)), device)
    assert init.ones(2, device=device, requires_grad=True).requires_grad


def test_randb_is_rand_at_most_p(device):
    np.random.seed(5)
    t = init.randb(6, 7, p=0.3, device=device)
    np.random.seed(5)
    check(t, np.random.rand(6, 7) <= 0.3, device, "bool")


def test_one_hot_picks_identity_rows(device):
    labels = np.array([2, 0, 3, 3])
    for i in (labels.tolist(), ndl.Tensor(labels, device=device, requires_grad=False)):
        check(init.one_hot(4, i, device=device), np.eye(4)[labels], device)
    check(init.one_hot(3, [1], device=device, dtype="float64"), np.eye(3)[[1]], device,
          "float64")


def test_zeros_like_and_ones_like_keep_shape_and_dtype(device):
    x = ndl.Tensor(np.arange(6.0).reshape(2, 3), device=device, dtype="float64")
    check(init.zeros_like(x), np.zeros((2, 3)), device, "float64")
    check(init.ones_like(x), np.ones((2, 3)), device, "float64")
    assert init.ones_like(x, requires_grad=True).requires_grad
    assert not init.zeros_like(x).requires_grad


def test_xavier_uniform(device):
    np.random.seed(6)
    t = init.xavier_uniform(5, 3, gain=1.5, device=device)
    a = 1.5 * math.sqrt(6 / (5 + 3))
    np.random.seed(6)
    check(t, np.random.rand(5, 3) * (a - -a) + -a, device)
    assert np.all(np.abs(t.numpy()) <= a)


def test_xavier_normal(device):
    np.random.seed(7)
    t = init.xavier_normal(4, 6, gain=2.0, device=device, dtype="float64")
    std = 2.0 * math.sqrt(2 / (4 + 6))
    np.random.seed(7)
    check(t, np.random.randn(4, 6) * std + 0.0, device, "float64")


def test_kaiming_uniform(device):
    np.random.seed(8)
    t = init.kaiming_uniform(7, 2, device=device)
    bound = math.sqrt(2) * math.sqrt(3 / 7)
    np.random.seed(8)
    check(t, np.random.rand(7, 2) * (bound - -bound) + -bound, device)
    assert np.all(np.abs(t.numpy()) <= bound)


def test_kaiming_uniform_shape_overrides_but_bound_uses_fan_in(device):
    np.random.seed(9)
    t = init.kaiming_uniform(3 * 3 * 2, 4, shape=(3, 3, 2, 4), device=device)
    bound = math.sqrt(2) * math.sqrt(3 / 18)
    np.random.seed(9)
    check(t, np.random.rand(3, 3, 2, 4) * (bound - -bound) + -bound, device)


def test_kaiming_normal(device):
    np.random.seed(10)
    t = init.kaiming_normal(9, 5, device=device, dtype="float64")
    std = math.sqrt(2) / math.sqrt(9)
    np.random.seed(10)
    check(t, np.random.randn(9, 5) * std + 0.0, device, "float64")


def test_initialisers_are_identical_on_every_device(device):
    np.random.seed(11)
    here = init.kaiming_uniform(6, 3, device=device).numpy()
    np.random.seed(11)
    on_cpu = init.kaiming_uniform(6, 3, device=ndl.cpu()).numpy()
    np.testing.assert_array_equal(here, on_cpu)


def test_only_relu_nonlinearity_is_supported(device):
    with pytest.raises(ValueError, match="relu.*tanh"):
        init.kaiming_uniform(3, 4, nonlinearity="tanh", device=device)


@pytest.mark.parametrize("name", ["kaiming_normal", "xavier_uniform", "xavier_normal"])
def test_shape_overrides_the_drawn_shape_of_every_initialiser(name, device):
    fn = getattr(init, name)
    np.random.seed(12)
    t = fn(18, 4, shape=(3, 3, 2, 4), device=device, dtype="float64")
    np.random.seed(12)
    flat = fn(18, 4, device=device, dtype="float64")  # the same draws, in the same order
    assert t.shape == (3, 3, 2, 4)
    np.testing.assert_array_equal(t.numpy(), flat.numpy().reshape(-1)[:72].reshape(3, 3, 2, 4))


SAME_WEIGHTS_EVERYWHERE = """
import sys
import numpy as np
import needle as ndl
from needle import init, nn

def weights(device):
    np.random.seed(7)
    models = [nn.Linear(5, 4, device=device), nn.Conv(3, 4, 3, device=device),
              nn.Embedding(11, 6, device=device), nn.LSTM(6, 5, 2, device=device),
              nn.RNN(4, 3, device=device), nn.BatchNorm1d(3, device=device),
              nn.Transformer(8, 16, 1, num_head=2, dim_head=4, sequence_len=6, device=device)]
    out = [p.numpy() for m in models for p in m.parameters()]
    for fn in (init.xavier_uniform, init.xavier_normal, init.kaiming_uniform,
               init.kaiming_normal):
        out.append(fn(7, 9, device=device).numpy())
    out.append(init.rand(3, 4, low=-0.3, high=0.7, device=device).numpy())
    out.append(init.randn(3, 4, mean=0.1, std=3.3, device=device).numpy())
    out.append(init.randb(50, p=0.3, device=device).numpy())
    out.append(np.random.rand())  # the same number of draws (Dropout masks are the device
    # generator's: tests/test_nn.py)
    return out

reference = weights(ndl.cpu())
assert all(a.dtype != np.float64 for a in reference[:-1])
for name in sys.argv[1:]:
    device = ndl.jax() if name == "jax" else getattr(ndl, name)()
    if not device.enabled():
        continue
    for i, (got, want) in enumerate(zip(weights(device), reference)):
        assert np.asarray(got).dtype == np.asarray(want).dtype, (name, i)
        assert np.array_equal(got, want), (name, i, np.abs(got - want).max())
import jax
assert not jax.config.jax_enable_x64  # jax's default: 32-bit
print("same")
"""


def test_a_seed_gives_the_same_bits_on_every_device_with_jax_in_32_bit():
    """np.random.seed(k) draws bit-identical weights and initialisers on cpu,
    strict, torch and jax with jax's 64-bit types off (its default, which the suite's
    conftest turns on): the initialisers compute in float64 on the host and cast once."""
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", SAME_WEIGHTS_EVERYWHERE, "strict", "torch",
                          "jax"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["same"], out.stderr


def test_constant_of_an_integer_dtype_needs_a_whole_number_in_range(device):
    """`constant(c=300, dtype="uint8")` was [44, 44] on jax and an OverflowError or a
    RuntimeError elsewhere; c=-1 was [255, 255] on torch and jax; NaN as int32 was INT_MIN,
    0 or an error. Now one ValueError everywhere; a whole float (7.0) is taken."""
    with pytest.raises(ValueError, match="constant: c must be finite, found nan"):
        ndl.init.constant(2, c=float("nan"), device=device, dtype="int32")
    for c, dtype in ((300, "uint8"), (-1, "uint8"), (1.5, "int32"), (2**31, "int32")):
        with pytest.raises(ValueError, match=rf"constant: c=.* is not a whole number in the "
                                             rf"range .* of dtype {dtype}"):
            ndl.init.constant(2, c=c, device=device, dtype=dtype)
    out = ndl.init.constant(2, c=7.0, device=device, dtype="int32")
    assert out.dtype == "int32" and out.numpy().tolist() == [7, 7]


def test_dtype_none_is_float64_on_every_device_that_has_it(device):
    """dtype=None was float64 on cpu, strict and jax, float32 on torch (zeros, ones,
    constant), and bool on torch for one_hot (strict crashed)."""
    widest = "float64"
    try:
        device.dtype("float64")
    except TypeError:  # (jax without x64, MPS)
        widest = "float32"
    for t in (ndl.init.zeros(2, device=device, dtype=None),
              ndl.init.ones(2, device=device, dtype=None),
              ndl.init.constant(2, c=0.5, device=device, dtype=None),
              ndl.init.one_hot(3, np.array([0, 2]), device=device, dtype=None)):
        assert t.dtype == widest, (t, t.dtype)
    assert ndl.init.one_hot(3, np.array([0, 2]), device=device, dtype=None).numpy().tolist() \
        == [[1, 0, 0], [0, 0, 1]]


def test_constant_takes_numpy_integers_exactly(device):
    """np.int64(2**53 + 1) went through a float (2**53) and np.int64(2**63 - 1) was refused
    as not a whole number."""
    try:
        device.dtype("int64")
    except TypeError:
        pytest.skip(f"{device} has no int64 (jax without x64)")
    for c in (np.int64(2**53 + 1), np.int64(2**63 - 1), 2**53 + 1):
        assert ndl.init.constant(1, c=c, device=device, dtype="int64").numpy().tolist() \
            == [int(c)]


def test_random_weights_past_the_dtype_are_an_error(device):
    """(A numerics audit.) xavier_uniform(gain=1e40) gave float32 weights of +-inf."""
    with pytest.raises(ValueError, match="overflow dtype float32 .* a gain or bound too large"):
        ndl.init.xavier_uniform(3, 3, gain=1e40, device=device)
    with pytest.raises(ValueError, match="overflow dtype float32"):
        ndl.init.randn(4, std=1e39, device=device)
    assert np.isfinite(ndl.init.xavier_uniform(3, 3, gain=1e30, device=device).numpy()).all()
