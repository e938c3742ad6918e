"""ndl.nn layers and loss: forward against numpy, gradients against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.testing import check_gradients


def T(a, device, dtype="float64", requires_grad=False) -> ndl.Tensor:
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=requires_grad)


def rtol(device) -> float:
    return 1e-6 if device.kind == "cuda" else 1e-10


def data(*shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def with_params(module: nn.Module, *names: str):
    """fn(x, *params): `module(x)` with its named parameters replaced by the given tensors."""
    def fn(x, *params):
        for name, p in zip(names, params):
            if isinstance(getattr(module, name, None), nn.Parameter):
                delattr(module, name)  # (a Tensor over a Parameter is refused, as PyTorch)
            setattr(module, name, p)
        return module(x)
    return fn


def np_norm(x, axis, eps):
    return (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + eps)


# ----- simple layers ---------------------------------------------------------------------
@pytest.mark.parametrize("layer, ref", [
    (nn.Identity(), lambda x: x),
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Flatten(), lambda x: x.reshape(x.shape[0], -1)),
    (nn.Sequential(nn.Tanh(), nn.ReLU()), lambda x: np.maximum(np.tanh(x), 0)),
    (nn.Residual(nn.Tanh()), lambda x: np.tanh(x) + x),
], ids=["identity", "relu", "tanh", "sigmoid", "flatten", "sequential", "residual"])
def test_simple_layers_forward_and_gradient(layer, ref, device):
    x = data(2, 3, 4) + 0.05  # away from relu's kink at 0
    np.testing.assert_allclose(layer(T(x, device)).numpy(), ref(x), rtol=rtol(device))
    check_gradients(layer, x, device=device)


def test_sequential_modules_are_indexable(device):
    a, b = nn.ReLU(), nn.Linear(2, 3, device=device)
    seq = nn.Sequential(a, b)
    assert seq.modules[0] is a and seq.modules[1] is b and seq[1] is b and len(seq) == 2
    with pytest.raises(TypeError, match="argument 1 must be a Module, found int"):
        nn.Sequential(a, 3)



def test_sequential_slices_are_sequentials(device):
    """As PyTorch: a slice is a Sequential of those modules (callable), an index the module."""
    np.random.seed(0)
    a, b, c = nn.Linear(3, 4, device=device), nn.ReLU(), nn.Linear(4, 2, device=device)
    seq = nn.Sequential(a, b, c)
    head = seq[0:2]
    assert type(head) is nn.Sequential and head.modules == [a, b]
    x = T(data(5, 3), device, dtype="float32")
    np.testing.assert_array_equal(head(x).numpy(), b(a(x)).numpy())
    assert seq[-1] is c and seq[-3] is a and seq[-2:].modules == [b, c]
    assert seq[::-1].modules == [c, b, a] and len(seq[5:]) == 0
    seq.eval()
    assert not seq[1:].training  # the slice is in the mode of the Sequential it came from
    with pytest.raises(IndexError):
        seq[3]


# ----- Linear --------------------------------------------------------------------------
def test_linear_draws_weight_then_bias_from_numpy(device):
    np.random.seed(12)
    layer = nn.Linear(5, 3, device=device)
    np.random.seed(12)
    bw, bb = math.sqrt(2) * math.sqrt(3 / 5), math.sqrt(2) * math.sqrt(3 / 3)
    w = np.random.rand(5, 3) * (bw - -bw) + -bw
    b = (np.random.rand(3, 1) * (bb - -bb) + -bb).reshape(1, 3)
    assert isinstance(layer.weight, nn.Parameter) and isinstance(layer.bias, nn.Parameter)
    assert layer.weight.dtype == "float32" and layer.weight.device == device
    np.testing.assert_array_equal(layer.weight.numpy(), w.astype(np.float32))
    np.testing.assert_array_equal(layer.bias.numpy(), b.astype(np.float32))


@pytest.mark.parametrize("shape", [(4, 3), (1, 5, 3), (2, 2, 3)])
def test_linear_forward_broadcasts_over_leading_dims(shape, device):
    layer = nn.Linear(3, 2, device=device, dtype="float64")
    x = data(*shape)
    expected = x @ layer.weight.numpy() + layer.bias.numpy()
    out = layer(T(x, device))
    assert out.shape == shape[:-1] + (2,)
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol(device))


def test_linear_bias_replaced_with_a_vector_still_broadcasts(device):
    layer = nn.Linear(3, 2, device=device, dtype="float64")
    layer.bias.data = T([1.0, -2.0], device)
    x = data(4, 3)
    np.testing.assert_allclose(layer(T(x, device)).numpy(),
                               x @ layer.weight.numpy() + [1.0, -2.0], rtol=rtol(device))


def test_linear_without_bias(device):
    layer = nn.Linear(3, 2, bias=False, device=device, dtype="float64")
    assert layer.bias is None and len(layer.parameters()) == 1
    x = data(4, 3)
    np.testing.assert_allclose(layer(T(x, device)).numpy(), x @ layer.weight.numpy(),
                               rtol=rtol(device))


def test_linear_gradients(device):
    layer = nn.Linear(3, 2, device=device, dtype="float64")
    check_gradients(with_params(layer, "weight", "bias"), data(1, 4, 3),
                    layer.weight.numpy(), layer.bias.numpy(), device=device)


def test_linear_rejects_the_wrong_number_of_features(device):
    layer = nn.Linear(3, 2, device=device)
    before = layer.weight.numpy()
    with pytest.raises(ValueError, match="expected input with 3 features.*found 4"):
        layer(T(data(5, 4), device, "float32"))
    np.testing.assert_array_equal(layer.weight.numpy(), before)


# ----- Dropout -------------------------------------------------------------------------
HOST_GENERATOR = ("cpu", "strict")  # devices whose training draws are numpy's global state


def test_dropout_training_on_the_host_uses_one_numpy_draw(device):
    if device.kind not in HOST_GENERATOR:
        pytest.skip(f"{device} draws Dropout masks with its own generator")
    x = data(4, 5)
    np.random.seed(13)
    out = nn.Dropout(0.3)(T(x, device))
    np.random.seed(13)
    mask = np.random.rand(4, 5) < 0.7
    np.testing.assert_allclose(out.numpy(), x * mask / 0.7, rtol=rtol(device))
    after_forward = np.random.rand()
    np.random.seed(13)
    np.random.rand(4, 5)
    assert np.random.rand() == after_forward  # exactly one draw of x's shape


def test_dropout_masks_come_from_the_devices_generator(device):
    x = data(64, 50) + 2.0  # no zeros in x: a zero in the output is a dropped entry
    layer = nn.Dropout(0.3)

    def masks():
        ndl.manual_seed(21)
        state = np.random.get_state()[1].copy()
        first, second = (layer(T(x, device)).numpy() for _ in range(2))
        numpy_untouched = np.array_equal(np.random.get_state()[1], state)
        return first, second, numpy_untouched

    first, second, numpy_untouched = masks()
    again, _, _ = masks()
    np.testing.assert_array_equal(first, again)  # manual_seed repeats the masks
    assert not np.array_equal(first == 0, second == 0)  # the generator moves on
    kept = first != 0
    np.testing.assert_allclose(first[kept], (x / 0.7)[kept], rtol=rtol(device))
    assert 0.6 < kept.mean() < 0.8
    # on the host devices the draws are numpy's; the others leave numpy's state alone
    assert numpy_untouched == (device.kind not in HOST_GENERATOR)


def test_device_generator_is_seeded_from_numpy_without_manual_seed(device):
    if device.kind in HOST_GENERATOR:
        pytest.skip(f"{device} draws from numpy's global state itself")
    device._generator = device._seed = None  # as if never seeded
    np.random.seed(5)
    a = device.to_numpy(device.random((3, 4)))
    device._generator = None
    np.random.seed(5)
    b = device.to_numpy(device.random((3, 4)))
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and ((0 <= a) & (a < 1)).all()


def test_dropout_is_the_courses_float32_mask_and_scaling_to_the_bit(device):
    """x * mask / (1 - p) with mask = rand <= 1 - p, in that float32 order (x * (mask /
    (1 - p)) rounds differently): the same bits on every device but jax and torch on a GPU."""
    x = data(64, 50).astype(np.float32)
    ndl.manual_seed(17)
    out = nn.Dropout(0.1)(T(x, device, "float32")).numpy()
    ndl.manual_seed(17)  # the same draws of the device's generator (numpy's on cpu)
    mask = (device.to_numpy(device.random((64, 50))) <= 0.9).astype(np.float32)
    expected = x * mask / np.float32(0.9)
    assert out.dtype == np.float32 and not np.array_equal(expected, x * (mask / np.float32(0.9)))
    # XLA, and PyTorch's CUDA kernels (seen on an H100), turn a division by a scalar into a
    # product by 1 / scalar
    if device.kind == "jax" or (device.kind == "torch" and device.index != "cpu"):
        np.testing.assert_allclose(out, expected, rtol=2e-7, atol=0)
    else:
        np.testing.assert_array_equal(out, expected)


def test_layernorm1d_is_the_courses_float32_order(device):
    """mean = sum / n, var = sum((x - mean)^2) / n, (x - mean) / sqrt(var + eps): to the
    bit where the device computes with numpy's kernels, to float32 rounding elsewhere."""
    x = (data(40, 27) * 3 + 1).astype(np.float32)
    out = nn.LayerNorm1d(27, device=device)(T(x, device, "float32")).numpy()
    n = np.float32(27)
    mean = (x.sum(axis=1) / n).reshape(-1, 1)
    var = (((x - mean) ** 2).sum(axis=1) / n).reshape(-1, 1)
    expected = (x - mean) / np.sqrt(var + np.float32(1e-5))
    if device.kind in ("cpu", "strict"):
        np.testing.assert_array_equal(out, expected)
    else:  # the library's own sums round differently
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_dropout_p0_training_is_identity_and_draws_nothing(device):
    x = T(data(4, 5), device)
    ndl.manual_seed(16)
    assert nn.Dropout(0.0)(x) is x  # no mask, no multiply, no node
    assert np.random.rand() == np.random.RandomState(16).rand()


def test_dropout_eval_is_identity_and_draws_nothing(device):
    layer = nn.Dropout(0.5).eval()
    x = T(data(3, 4), device)
    np.random.seed(14)
    assert layer(x) is x
    assert np.random.rand() == np.random.RandomState(14).rand()


def test_dropout_gradient(device):
    layer = nn.Dropout(0.4)

    def fn(x):
        ndl.manual_seed(15)  # the same mask on every call, on every device
        return layer(x)

    check_gradients(fn, data(3, 4), device=device)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_rejects_p_outside_0_1(p):
    with pytest.raises(ValueError, match=rf"Dropout: p must be in \[0.0, 1.0\], found {p}"):
        nn.Dropout(p)


def test_dropout_of_p_1_gives_zeros_and_draws_nothing(device):
    """(A numerics audit.) Dropout(1.0) was a ValueError; PyTorch gives zeros (no draw)."""
    x = ndl.Tensor(np.arange(1.0, 7.0).reshape(2, 3), device=device, dtype="float32",
                   requires_grad=True)
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    out = nn.Dropout(1.0)(x)
    out.sum().backward()
    assert out.dtype == "float32" and not out.numpy().any() and not x.grad.numpy().any()
    assert (np.random.get_state()[1] == state).all()


# ----- normalisation -------------------------------------------------------------------
def test_batchnorm1d_training_forward_and_running_stats(device):
    bn = nn.BatchNorm1d(3, eps=1e-3, momentum=0.2, device=device, dtype="float64")
    bn.weight.data = T([1.0, 2.0, 0.5], device)
    bn.bias.data = T([0.0, -1.0, 3.0], device)
    rm, rv = np.zeros(3), np.ones(3)
    for seed in range(3):
        x = data(6, 3, seed=seed) * 2 + 1
        out = bn(T(x, device))
        expected = np_norm(x, 0, 1e-3) * [1.0, 2.0, 0.5] + [0.0, -1.0, 3.0]
        np.testing.assert_allclose(out.numpy(), expected, rtol=rtol(device), atol=1e-12)
        rm, rv = 0.8 * rm + 0.2 * x.mean(0), 0.8 * rv + 0.2 * x.var(0)  # biased var
        np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=rtol(device))
        np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=rtol(device))
    for buf in (bn.running_mean, bn.running_var):  # updated without recording graph
        assert buf.op is None and not buf.requires_grad and not isinstance(buf, nn.Parameter)


def test_batchnorm1d_eval_uses_running_stats(device):
    bn = nn.BatchNorm1d(3, device=device, dtype="float64")
    bn(T(data(8, 3, seed=1) * 3, device))
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    bn.eval()
    x = data(5, 3, seed=2)
    np.testing.assert_allclose(bn(T(x, device)).numpy(), (x - rm) / np.sqrt(rv + 1e-5),
                               rtol=rtol(device))
    np.testing.assert_array_equal(bn.running_mean.numpy(), rm)  # eval leaves them alone


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batchnorm1d_gradients(training, device):
    bn = nn.BatchNorm1d(3, device=device, dtype="float64").train(training)
    bn.running_var.data = T([0.5, 2.0, 1.5], device)
    check_gradients(with_params(bn, "weight", "bias"), data(4, 3), data(3, seed=1),
                    data(3, seed=2), device=device)


def test_batchnorm2d_normalises_channels_over_n_h_w(device):
    bn = nn.BatchNorm2d(2, device=device, dtype="float64")
    x = data(3, 2, 4, 5) * 2 + 1
    np.testing.assert_allclose(bn(T(x, device)).numpy(), np_norm(x, (0, 2, 3), 1e-5),
                               rtol=rtol(device), atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean((0, 2, 3)),
                               rtol=rtol(device))
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var((0, 2, 3)),
                               rtol=rtol(device))
    check_gradients(with_params(bn, "weight", "bias"), data(2, 2, 2, 3), data(2, seed=1),
                    data(2, seed=2), device=device)


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_batchnorm2d_gives_the_course_formulations_numbers(layout, device):
    """One BatchNorm node on the NCHW input, and the numbers of the course's
    BatchNorm2d (permute to NHWC, reshape to (N*H*W, C), BatchNorm1d, back): to the bit for
    the output, the input's adjoint and the running statistics where the rows kernel runs
    (the same kernel on the same rows), the weight's and bias's sums to 1e-6; on torch,
    PyTorch's batch norm reads NCHW itself and sums in another order, and BatchNorm1d's
    node is PyTorch's batch norm with its affine map: a few ulps. On an NCHW
    array and on a channels-last one (a convolution's output)."""
    rng = np.random.default_rng(8)
    x_host = (rng.standard_normal((4, 3, 5, 6)) * 2 + 1).astype(np.float32)
    g_host = rng.standard_normal(x_host.shape).astype(np.float32)
    bn2, bn1 = nn.BatchNorm2d(3, device=device), nn.BatchNorm1d(3, device=device)
    for bn in (bn2, bn1):
        bn.weight.data, bn.bias.data = T(data(3, seed=1), device, "float32"), T(
            data(3, seed=2), device, "float32")

    def leaf(a):
        t = T(a if layout == "nchw" else a.transpose(0, 2, 3, 1), device, "float32")
        return t if layout == "nchw" else ndl.ops.permute(t.detach(), (0, 3, 1, 2)).detach()

    got = {}
    for course, bn in ((False, bn2), (True, bn1)):
        x = leaf(x_host)
        x.requires_grad = True
        if course:
            n, c, h, w = x.shape
            flat = ndl.ops.reshape(ndl.ops.permute(x, (0, 2, 3, 1)), (n * h * w, c))
            out = ndl.ops.permute(ndl.ops.reshape(bn(flat), (n, h, w, c)), (0, 3, 1, 2))
        else:
            out = bn(x)
            assert type(out.op).__name__ == "BatchNorm" and out.inputs[0] is x
        out.backward(T(g_host, device, "float32"))
        got[course] = [a.numpy() for a in (out, x.grad, bn.running_mean, bn.running_var,
                                           bn.weight.grad, bn.bias.grad)]
    exact = {"rtol": 0, "atol": 0} if device.kind != "torch" else {"rtol": 1e-5, "atol": 1e-6}
    for new, course, tolerance in zip(got[False], got[True],
                                      [exact] * 4 + [{"rtol": 1e-6, "atol": 1e-5}] * 2):
        np.testing.assert_allclose(new, course, **tolerance)


def test_layernorm1d_forward_and_gradients(device):
    ln = nn.LayerNorm1d(4, eps=1e-4, device=device, dtype="float64")
    w, b = data(4, seed=1), data(4, seed=2)
    ln.weight.data, ln.bias.data = T(w, device), T(b, device)
    for shape in [(3, 4), (2, 3, 4)]:
        x = data(*shape) * 3 + 2
        np.testing.assert_allclose(ln(T(x, device)).numpy(), np_norm(x, -1, 1e-4) * w + b,
                                   rtol=rtol(device), atol=1e-12)
    check_gradients(with_params(ln, "weight", "bias"), data(3, 4), w, b, device=device)


@pytest.mark.parametrize("make, shape", [
    (lambda d: nn.BatchNorm1d(3, device=d), (4, 2)),
    (lambda d: nn.BatchNorm2d(3, device=d), (4, 3)),
    (lambda d: nn.LayerNorm1d(3, device=d), (4, 2)),
], ids=["bn1d", "bn2d", "ln1d"])
def test_norms_reject_wrong_shapes(make, shape, device):
    with pytest.raises(ValueError, match=rf"expected input of shape .*3.*found \({shape[0]}"):
        make(device)(T(data(*shape), device, "float32"))


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batchnorm_needs_more_than_one_value_per_channel_to_train(training, device):
    bn1, bn2 = nn.BatchNorm1d(3, device=device), nn.BatchNorm2d(3, device=device)
    for bn in (bn1, bn2):
        bn.train(training)
    one, pixel = T(data(1, 3), device, "float32"), T(data(1, 3, 1, 1), device, "float32")
    if training:  # the variance of one value is 0: PyTorch refuses it too
        with pytest.raises(ValueError, match=r"BatchNorm1d: expected more than 1 value per "
                                             r"channel when training, found input of shape "
                                             r"\(1, 3\)"):
            bn1(one)
        with pytest.raises(ValueError, match=r"BatchNorm2d: .*found input of shape "
                                             r"\(1, 3, 1, 1\)"):
            bn2(pixel)
        np.testing.assert_array_equal(bn1.running_mean.numpy(), np.zeros(3))  # untouched
    else:  # eval uses the running statistics: one sample is fine
        np.testing.assert_allclose(bn1(one).numpy(), one.numpy() / np.sqrt(1 + 1e-5),
                                   rtol=1e-6)
        assert bn2(pixel).shape == (1, 3, 1, 1)
    assert bn2(T(data(1, 3, 2, 1), device, "float32")).shape == (1, 3, 2, 1)  # N*H*W = 2
    for bn, shape in ((bn1, (0, 3)), (bn2, (0, 3, 2, 2)), (bn2, (2, 3, 0, 2))):
        with pytest.raises(ValueError, match=rf"{type(bn).__name__}: expected .* per channel "
                                             rf".*found input of shape \({shape[0]}, 3"):
            bn(T(np.zeros(shape), device, "float32"))


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.Linear(0, 3), ValueError, r"Linear: in_features must be >= 1, found 0"),
    (lambda: nn.Linear(-1, 3), ValueError, r"Linear: in_features must be >= 1, found -1"),
    (lambda: nn.Linear(3, 0), ValueError, r"Linear: out_features must be >= 1, found 0"),
    (lambda: nn.Linear(2.0, 3), TypeError, r"Linear: in_features must be an integer, "
                                           r"found 2.0 \(float\)"),
    (lambda: nn.Linear(3, True), TypeError, r"out_features must be an integer, found True"),
    (lambda: nn.Linear("3", 3), TypeError, r"in_features must be an integer, found '3'"),
    (lambda: nn.BatchNorm1d(0), ValueError, r"BatchNorm1d: dim must be >= 1, found 0"),
    (lambda: nn.BatchNorm2d(-2), ValueError, r"BatchNorm2d: dim must be >= 1, found -2"),
    (lambda: nn.BatchNorm1d(1.5), TypeError, r"BatchNorm1d: dim must be an integer"),
    (lambda: nn.LayerNorm1d(0), ValueError, r"LayerNorm1d: dim must be >= 1, found 0"),
    (lambda: nn.LayerNorm1d(False), TypeError, r"LayerNorm1d: dim must be an integer"),
], ids=["linear-in-0", "linear-in-neg", "linear-out-0", "linear-float", "linear-bool",
        "linear-str", "bn1d-0", "bn2d-neg", "bn1d-float", "ln-0", "ln-bool"])
def test_layer_sizes_must_be_positive_integers(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_layer_sizes_accept_numpy_integers(device):
    layer = nn.Linear(np.int64(3), np.int32(2), device=device)
    assert type(layer.in_features) is int and layer.weight.shape == (3, 2)
    assert nn.BatchNorm1d(np.int64(4), device=device).weight.shape == (4,)
    assert nn.LayerNorm1d(np.int16(2), device=device).dim == 2


def test_only_linear_and_dropout_draw_random_numbers(device):
    np.random.seed(16)
    for module in (nn.BatchNorm1d(3, device=device), nn.BatchNorm2d(3, device=device),
                   nn.LayerNorm1d(3, device=device), nn.ReLU(), nn.SoftmaxLoss()):
        assert module is not None
    assert np.random.rand() == np.random.RandomState(16).rand()


# ----- SoftmaxLoss ---------------------------------------------------------------------
def np_softmax_loss(z, y):
    m = z.max(1, keepdims=True)
    lse = np.log(np.exp(z - m).sum(1)) + m[:, 0]
    return np.mean(lse - z[np.arange(len(y)), y])


@pytest.mark.parametrize("label_dtype", ["int64", "int32", "uint8"])
def test_softmax_loss_forward_and_gradient(label_dtype, device):
    z, y = data(5, 4), np.array([0, 3, 1, 1, 2])
    labels = T(y, device, label_dtype)
    loss = nn.SoftmaxLoss()(T(z, device), labels)
    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), np_softmax_loss(z, y), rtol=rtol(device))
    check_gradients(lambda logits: nn.SoftmaxLoss()(logits, labels), z, device=device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_loss_is_finite_for_huge_logits(dtype, device):
    z = np.array([[1e4, -1e4, 0.0], [-1e4, 1e4 - 1.0, 1e4]])
    y = np.array([0, 1])
    loss = nn.SoftmaxLoss()(T(z, device, dtype), T(y, device, "int64")).numpy()
    expected = (0.0 + 1.0 + np.log1p(np.exp(-1.0))) / 2  # exact: 1e4 logits cancel
    assert np.isfinite(loss)
    # float32 spacing at 1e4 is 2**-10: the logsumexp is exact to that
    atol = 2**-10 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(loss, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("bad", [4, -1])
def test_softmax_loss_rejects_labels_out_of_range(bad, device):
    z = T(data(3, 4), device)
    with pytest.raises(ValueError, match=rf"labels must be in \[0, 4\).*found {bad}"):
        nn.SoftmaxLoss()(z, T([0, bad, 1], device, "int64")).numpy()  # (at the read on a GPU)
    with pytest.raises(ValueError, match="labels must be whole numbers, found 1.5"):
        nn.SoftmaxLoss()(z, T([0.0, 1.5, 1.0], device)).numpy()
    with pytest.raises(ValueError, match=r"labels of shape \(3,\), found \(2,\)"):
        nn.SoftmaxLoss()(z, T([0, 1], device, "int64"))


def test_norm_statistics_of_float16_are_taken_in_float32(device):
    """A sum of float16 overflows past 65504: LayerNorm over 8192 features of size 4 gave
    zeros and BatchNorm over 8192 rows of about 10 gave NaN on cpu and jax."""
    try:
        device.dtype("float16")
    except TypeError:
        pytest.skip(f"{device} has no float16")
    rng = np.random.default_rng(0)
    cases = [(nn.LayerNorm1d(8192, device=device, dtype="float16"),
              (4 * rng.standard_normal((2, 8192))).astype(np.float16), -1),
             (nn.BatchNorm1d(2, device=device, dtype="float16"),
              (10 + rng.standard_normal((8192, 2))).astype(np.float16), 0)]
    for module, host, axis in cases:
        x = ndl.Tensor(host, device=device, dtype="float16")
        out = module(x)
        (out * out).sum().backward()
        h = host.astype(np.float64)
        y = (h - h.mean(axis, keepdims=True)) / np.sqrt(h.var(axis, keepdims=True) + 1e-5)
        assert out.dtype == "float16" and x.grad.dtype == "float16"
        np.testing.assert_allclose(out.numpy(), y, rtol=4e-3, atol=4e-3)  # (torch: 2.5 ulp)
        # d sum(y^2) / dx = 2 s P y = 0: y is orthogonal to P's complement
        np.testing.assert_allclose(x.grad.numpy(), np.zeros_like(h), atol=2e-2)



def test_batch_norm_refuses_eps_0_in_training(device):
    """A constant channel with eps 0 is 0/0: torch's kernel gave the bias, the other devices
    NaN. PyTorch refuses it ("eps must be positive during training"); eval mode is fine."""
    bn = nn.BatchNorm1d(2, eps=0.0, device=device)
    x = ndl.Tensor(np.ones((4, 2)), device=device, dtype="float32")
    with pytest.raises(ValueError, match="batch_norm: eps must be positive in training, got 0"):
        bn(x)
    bn.eval()
    np.testing.assert_allclose(bn(x).numpy(), np.ones((4, 2)), rtol=1e-6)
    tensor_eps = ndl.Tensor(np.array(1e-5), device=device, dtype="float32")
    assert nn.BatchNorm1d(2, eps=tensor_eps, device=device)(x).shape == (4, 2)


@pytest.mark.parametrize("name", ["normalize", "batch_norm", "dropout"])
def test_norms_and_dropout_refuse_integer_input(name, device):
    """They gave float64 on cpu and jax, float32 on torch and a raw TypeError on strict."""
    t = ndl.Tensor(np.arange(6).reshape(2, 3), device=device, dtype="int32")
    ones, zeros = (ndl.Tensor(np.full(3, v), device=device, dtype="int32") for v in (1, 0))
    call = {"normalize": lambda: ndl.ops.normalize(t, (1,)),
            "batch_norm": lambda: ndl.ops.batch_norm(t, ones, zeros),
            "dropout": lambda: nn.Dropout(0.5)(t)}[name]
    with pytest.raises(TypeError, match=f"{name}: needs a floating tensor, got int32"):
        call()
