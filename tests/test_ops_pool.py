"""Pooling: max_pool2d / avg_pool2d (and the unfold2d / fold2d they are built on) over many
window shapes against numpy loops and PyTorch, ties, errors, and the layers. The op table
(test_ops.py) also puts each of these ops through its forward, finite-difference, adjoint-shape
and graph-free backward checks."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.nn.pool import AvgPool2d, MaxPool2d
from needle.ops.pool import avg_pool2d, fold2d, max_pool2d, unfold2d
from needle.testing import check_gradients

POOLS = {"max": (max_pool2d, np.max), "avg": (avg_pool2d, np.mean)}

# (N, C, H, W, kernel, stride): disjoint, cropped, overlapping, gaps (s > k), global, k = 1
CONFIGS = [
    (2, 2, 4, 6, 2, 2),
    (2, 2, 5, 7, 2, 2),
    (2, 2, 5, 6, 3, 2),
    (1, 3, 5, 4, 3, 1),
    (2, 1, 7, 5, 2, 3),
    (1, 2, 3, 3, 3, 3),
    (1, 2, 4, 5, 1, 2),
]
GRAD_CONFIGS = [((2, 2, 4, 6), 2, 2), ((2, 2, 5, 6), 2, 2), ((1, 2, 5, 6), 3, 2),
                ((1, 2, 4, 5), 3, 1)]


def config_id(c) -> str:
    n, ch, h, w, k, s = c
    return f"{n}x{ch}x{h}x{w}-k{k}s{s}"


def np_pool(x: np.ndarray, k: int, s: int, reduce) -> np.ndarray:
    """Pooling by explicit loops over the output pixels."""
    n, c, h, w = x.shape
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, ho, wo))
    for y in range(ho):
        for x_ in range(wo):
            out[:, :, y, x_] = reduce(x[:, :, y * s:y * s + k, x_ * s:x_ * s + k], axis=(2, 3))
    return out


def distinct(shape, seed: int = 0) -> np.ndarray:
    """Values 1/size apart in random order: no ties, gaps far above the probe step."""
    size = int(np.prod(shape))
    return np.random.default_rng(seed).permutation(size).reshape(shape) / size - 0.5


def tensor(x, device, dtype="float64") -> ndl.Tensor:
    return ndl.Tensor(x, device=device, dtype=dtype)


# ----- forward ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", POOLS)
@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_forward_matches_numpy_loops(kind, config, device):
    *shape, k, s = config
    fn, reduce = POOLS[kind]
    x = np.random.default_rng(1).standard_normal(shape)
    out = fn(tensor(x, device), k, s)
    assert out.device == device
    np.testing.assert_allclose(out.numpy(), np_pool(x, k, s, reduce), rtol=1e-12, atol=1e-15)


def test_forward_matches_torch(device):
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    rng = np.random.default_rng(2)
    for config in CONFIGS:
        *shape, k, s = config
        x = rng.standard_normal(shape)
        for ours, theirs in ((max_pool2d, functional.max_pool2d),
                             (avg_pool2d, functional.avg_pool2d)):
            expected = theirs(torch.from_numpy(x), k, s).numpy()
            np.testing.assert_allclose(ours(tensor(x, device), k, s).numpy(), expected,
                                       rtol=1e-12, atol=1e-15, err_msg=config_id(config))


def test_stride_defaults_to_the_kernel_size(device):
    x = tensor(np.arange(32.0).reshape(1, 2, 4, 4), device)
    np.testing.assert_array_equal(max_pool2d(x, 2).numpy(), max_pool2d(x, 2, 2).numpy())
    np.testing.assert_array_equal(avg_pool2d(x, 2).numpy(), avg_pool2d(x, 2, 2).numpy())
    np.testing.assert_array_equal(max_pool2d(x, 2).numpy()[0, 0], [[5, 7], [13, 15]])


def test_float32_stays_float32(device):
    x = tensor(np.ones((1, 1, 4, 4)), device, "float32")
    for out in (max_pool2d(x, 2), avg_pool2d(x, 3, 1), max_pool2d(x, 3, 1), avg_pool2d(x, 2)):
        assert out.dtype == "float32"


# ----- gradients ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", POOLS)
@pytest.mark.parametrize("shape, k, s", GRAD_CONFIGS, ids=lambda v: str(v))
def test_gradient_matches_finite_differences(kind, shape, k, s, device):
    fn = POOLS[kind][0]
    check_gradients(lambda t: fn(t, k, s), distinct(shape), device=device)


def test_gradient_matches_torch(device):
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    rng = np.random.default_rng(3)
    for config in CONFIGS:
        *shape, k, s = config
        x = distinct(shape, seed=4)
        for ours, theirs in ((max_pool2d, functional.max_pool2d),
                             (avg_pool2d, functional.avg_pool2d)):
            t, tt = tensor(x, device), torch.tensor(x, requires_grad=True)
            out = ours(t, k, s)
            g = rng.standard_normal(out.shape)
            out.backward(tensor(g, device))
            theirs(tt, k, s).backward(torch.from_numpy(g))
            np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-12,
                                       atol=1e-15, err_msg=config_id(config))


def test_max_ties_share_the_adjoint_equally(device):
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 0:2, 2:4] = [[3.0, 1.0], [3.0, 2.0]]  # window (0, 1): a tie of two
    x[0, 0, 2:4, 2:4] = [[1.0, 2.0], [0.5, 0.0]]  # window (1, 1): one maximum
    t = tensor(x, device)  # window (0, 0) and (1, 0): four equal zeros
    max_pool2d(t, 2).backward(tensor([[[[1.0, 2.0], [3.0, 4.0]]]], device))
    expected = [[0.25, 0.25, 1, 0], [0.25, 0.25, 1, 0], [0.75, 0.75, 0, 4], [0.75, 0.75, 0, 0]]
    np.testing.assert_allclose(t.grad.numpy()[0, 0], expected)


def test_max_ties_over_overlapping_windows(device):
    # all equal: each of the 4 windows (k=2, s=1 over 3x3) gives each of its entries 1/4
    t = tensor(np.ones((1, 1, 3, 3)), device)
    max_pool2d(t, 2, 1).sum().backward()
    np.testing.assert_allclose(t.grad.numpy()[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]]
                               / np.float64(4))
    # one maximum in the middle: it collects the whole adjoint of every window
    x = np.zeros((1, 1, 3, 3))
    x[0, 0, 1, 1] = 1.0
    t = tensor(x, device)
    max_pool2d(t, 2, 1).sum().backward()
    np.testing.assert_allclose(t.grad.numpy()[0, 0], [[0, 0, 0], [0, 4, 0], [0, 0, 0]])


def test_avg_spreads_the_adjoint_evenly(device):
    t = tensor(np.zeros((1, 1, 3, 4)), device)
    avg_pool2d(t, 2, 1).sum().backward()  # windows cover entries 1, 2 or 4 times
    np.testing.assert_allclose(t.grad.numpy()[0, 0], [[1, 2, 2, 1], [2, 4, 4, 2],
                                                      [1, 2, 2, 1]] / np.float64(4))
    t = tensor(np.zeros((1, 1, 5, 5)), device)
    avg_pool2d(t, 2).sum().backward()  # the last row and column are in no window
    expected = np.full((5, 5), 0.25)
    expected[4, :] = expected[:, 4] = 0
    np.testing.assert_allclose(t.grad.numpy()[0, 0], expected)


@pytest.mark.parametrize("kind", POOLS)
def test_second_order(kind, device):
    # d/dx sum(d/dx sum(c1 * pool(x)^2) * c2), by finite differences
    fn = POOLS[kind][0]
    rng = np.random.default_rng(5)
    c1, c2 = rng.standard_normal((1, 1, 2, 3)), rng.standard_normal((1, 1, 4, 5))

    def grad_dot_c(x):
        (fn(x, 3, 1) ** 2 * tensor(c1, device)).sum().backward()
        return (x.grad * tensor(c2, device)).sum()

    check_gradients(grad_dot_c, distinct((1, 1, 4, 5)), device=device)


# ----- unfold2d / fold2d: the window gather and its adjoint, the scatter-add ----------------
@pytest.mark.parametrize("shape, k, s", [((1, 5, 6), 3, 2), ((1, 1, 4, 5), 2, 2),
                                         ((3, 4), 2, 1)], ids=str)
def test_unfold_and_fold(shape, k, s, device):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape)
    h, w = shape[-2:]
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    expected = np.stack([x[..., i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s]
                         for i in range(k) for j in range(k)])
    np.testing.assert_array_equal(unfold2d(tensor(x, device), k, s).numpy(), expected)
    # fold is unfold's adjoint: <unfold(x), t> == <x, fold(t)>
    t = rng.standard_normal(expected.shape)
    folded = fold2d(tensor(t, device), k, s, (h, w)).numpy()
    assert folded.shape == shape
    np.testing.assert_allclose(np.sum(folded * x), np.sum(expected * t), rtol=1e-12)
    check_gradients(lambda a: unfold2d(a, k, s), x, device=device)
    check_gradients(lambda a: fold2d(a, k, s, (h, w)), t, device=device)


# ----- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [max_pool2d, avg_pool2d])
def test_bad_arguments_are_refused(fn, device):
    x = tensor(np.zeros((1, 1, 3, 5)), device)
    with pytest.raises(ValueError, match=r"kernel_size 4 is larger than the input's \(H, W\) "
                                         r"= \(3, 5\) \(shape \(1, 1, 3, 5\)\)"):
        fn(x, 4)
    with pytest.raises(ValueError, match="kernel_size must be >= 1, got 0"):
        fn(x, 0)
    with pytest.raises(ValueError, match="stride must be >= 1, got -1"):
        fn(x, 2, -1)
    for bad in (2.0, True, (2, 2), None):
        with pytest.raises(TypeError, match="kernel_size must be an int"):
            fn(x, bad)
    with pytest.raises(ValueError, match=r"expected a 4-D \(N, C, H, W\) input, got shape "
                                         r"\(1, 3, 5\)"):
        fn(tensor(np.zeros((1, 3, 5)), device), 2)


def test_fold_checks_its_input_shape(device):
    with pytest.raises(ValueError, match=r"fold2d: expected shape \(9, \.\.\., 2, 2\) for "
                                         r"kernel 3, stride 2 and size \(5, 6\), got \(9, 2, 3\)"):
        fold2d(tensor(np.zeros((9, 2, 3)), device), 3, 2, (5, 6))
    with pytest.raises(TypeError, match=r"fold2d: size must be \(H, W\), got 5"):
        fold2d(tensor(np.zeros((9, 2, 2)), device), 3, 2, 5)


# ----- layers -------------------------------------------------------------------------------
def test_layers_match_the_ops_and_print_like_pytorch(device):
    x = tensor(np.random.default_rng(7).standard_normal((2, 3, 5, 6)), device)
    for layer, fn in ((MaxPool2d(3, 2), max_pool2d), (AvgPool2d(3, stride=2), avg_pool2d)):
        np.testing.assert_array_equal(layer(x).numpy(), fn(x, 3, 2).numpy())
        assert layer.parameters() == []
    assert repr(MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2)"
    assert repr(AvgPool2d(3, 1)) == "AvgPool2d(kernel_size=3, stride=1)"
    model = nn.Sequential(MaxPool2d(2), nn.ReLU())
    assert repr(model) == "Sequential(\n  (0): MaxPool2d(kernel_size=2, stride=2)\n  (1): ReLU()\n)"


def test_layers_check_their_input(device):
    with pytest.raises(ValueError, match=r"MaxPool2d: expected 4-D input \(N, C, H, W\), "
                                         r"found shape \(3, 5, 5\)"):
        MaxPool2d(2)(tensor(np.zeros((3, 5, 5)), device))
    with pytest.raises(ValueError, match=r"AvgPool2d: .*found shape \(5, 5\)"):
        AvgPool2d(2)(tensor(np.zeros((5, 5)), device))
    with pytest.raises(ValueError, match="larger than the input"):
        AvgPool2d(4)(tensor(np.zeros((1, 1, 3, 3)), device))
    with pytest.raises(ValueError, match="AvgPool2d: kernel_size must be >= 1, found 0"):
        AvgPool2d(0)
    with pytest.raises(TypeError, match="MaxPool2d: stride must be an integer, found 1.5"):
        MaxPool2d(2, 1.5)


def test_flatten_after_pooling(device):
    x = tensor(np.random.default_rng(8).standard_normal((2, 3, 5, 6)), device)
    model = nn.Sequential(MaxPool2d(2), nn.Flatten())
    out = model(x)
    assert out.shape == (2, 3 * 2 * 3)
    np.testing.assert_array_equal(out.numpy(), max_pool2d(x, 2).numpy().reshape(2, -1))
    out.sum().backward()
    assert x.grad.shape == x.shape
    np.testing.assert_array_equal(x.grad.numpy().sum(axis=(2, 3)), np.full((2, 3), 6.0))


def test_float16_average_pooling_sums_in_float32(device):
    """(A numerics audit.) Two entries of 30000 summed to inf in float16; PyTorch's average
    is 30000."""
    if device.kind == "strict":
        pytest.skip("strict has no float16")
    x = ndl.Tensor(np.full((1, 1, 2, 2), 30000.0), device=device, dtype="float16")
    out = avg_pool2d(x, 2)
    assert out.dtype == "float16"
    np.testing.assert_array_equal(out.numpy(), np.full((1, 1, 1, 1), 30000.0, np.float16))
