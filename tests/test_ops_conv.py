"""Convolution: the op against PyTorch, the fast gathers against the portable one, pad, and the
layers on NCHW images (nn.Conv, BatchNorm2d). The op table (test_ops.py) checks conv, pad, im2col,
col2im and taps against numpy and finite differences; flip, dilate, undilate and stack over
every axis combination are in test_ops_axes.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.ops.im2col import IM2COL, im2col_array
from needle.testing import check_gradients


def tensor(x, device, dtype="float64", requires_grad=True):
    return ndl.Tensor(x, device=device, dtype=dtype, requires_grad=requires_grad)


def torch_conv(a, b, stride, padding):
    """needle's NHWC / (K, K, C_in, C_out) conv through PyTorch's NCHW / OIHW conv2d."""
    torch = pytest.importorskip("torch")
    out = torch.nn.functional.conv2d(torch.tensor(a).permute(0, 3, 1, 2),
                                     torch.tensor(b).permute(3, 2, 0, 1),
                                     stride=stride, padding=padding)
    return out.permute(0, 2, 3, 1).numpy()


# ----- the op ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_conv_matches_pytorch(k, device):
    pytest.importorskip("torch")
    rng = np.random.default_rng(k)
    a = rng.standard_normal((2, 9, 7, 3))  # non-square
    b = rng.standard_normal((k, k, 3, 4))
    for stride, padding in itertools.product((1, 2), range(k + 1)):
        out = ndl.conv(tensor(a, device), tensor(b, device), stride=stride, padding=padding)
        ref = torch_conv(a, b, stride, padding)
        assert out.shape == ref.shape, (stride, padding)
        np.testing.assert_allclose(out.numpy(), ref, atol=1e-5, rtol=1e-5,
                                   err_msg=f"k={k} stride={stride} padding={padding}")


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), (2, 2), (3, 1)])
def test_conv_gradients_match_pytorch(stride, padding, device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(stride * 10 + padding)
    a, b = rng.standard_normal((3, 8, 7, 4)), rng.standard_normal((3, 3, 4, 5))
    g = rng.standard_normal(torch_conv(a, b, stride, padding).shape)
    x, w = tensor(a, device), tensor(b, device)
    ndl.conv(x, w, stride, padding).backward(tensor(g, device, requires_grad=False))
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out = torch.nn.functional.conv2d(ta.permute(0, 3, 1, 2), tb.permute(3, 2, 0, 1),
                                     stride=stride, padding=padding)
    out.permute(0, 2, 3, 1).backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), ta.grad.numpy(), atol=1e-9)
    np.testing.assert_allclose(w.grad.numpy(), tb.grad.numpy(), atol=1e-9)


def test_conv_second_order_gradient(device):
    rng = np.random.default_rng(1)

    def grad_norm(x, w):  # |dL/dx|^2 + |dL/dw|^2 of L = sum(conv(x, w)^2): second order
        out = ndl.conv(x, w, stride=2, padding=1)
        (out * out).sum().backward(create_graph=True)
        return (x.grad * x.grad).sum() + (w.grad * w.grad).sum()

    check_gradients(grad_norm, rng.standard_normal((1, 4, 5, 2)),
                    rng.standard_normal((3, 3, 2, 2)), device=device, rtol=1e-4)


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((2, 9, 7, 3), (3, 3), 1, 1), ((2, 9, 7, 3), (7, 7), 4, 3), ((1, 5, 6, 2), (2, 3), 2, 0),
    ((3, 4, 4, 5), (1, 1), 1, 0), ((2, 8, 8, 3), (5, 5), 3, 5),
])
def test_device_gather_agrees_with_the_portable_one(shape, kernel, stride, padding, device):
    rng = np.random.default_rng(2)
    host = rng.standard_normal(shape)
    arrays = [device.asarray(host)]
    # a permuted (non-contiguous) view, as nn.Conv hands NCHW input over
    nchw = device.asarray(np.ascontiguousarray(host.transpose(0, 3, 1, 2)))
    arrays.append(device.xp.permute_dims(nchw, (0, 2, 3, 1)))
    for a in arrays:
        fast = im2col_array(a, kernel, stride, padding)
        portable = im2col_array(a, kernel, stride, padding, portable=True)
        assert fast.shape == portable.shape
        np.testing.assert_array_equal(device.to_numpy(fast), device.to_numpy(portable))


def test_the_shared_strided_gather_with_cupys_call_signature_on_numpy():
    # cuda's gather is this function with cupy's zeros and as_strided (shape and strides
    # positional, no `writeable`): its logic, run here on numpy
    from needle.backends.im2col import strided_im2col

    a = np.random.default_rng(9).standard_normal((2, 7, 6, 3))
    for kernel, stride, padding in [((3, 3), 1, 1), ((5, 5), 2, 2), ((2, 3), 3, 0)]:
        got = strided_im2col(np.zeros, lambda x, shape, strides: np.lib.stride_tricks.as_strided(
            x, shape, strides), a, kernel, stride, padding)
        np.testing.assert_array_equal(got, im2col_array(a, kernel, stride, padding,
                                                        portable=True))
    assert IM2COL.fast["cuda"] == "needle.backends.im2col:im2col_cuda"


def test_cpu_has_a_fast_gather_and_strict_the_portable_one():
    a = np.zeros((1, 4, 4, 1))
    assert IM2COL.implementation("cpu")(a, (3, 3), 1, 1).shape == (1, 4, 4, 9)
    assert IM2COL.implementation("cpu") is not IM2COL.reference
    assert IM2COL.implementation("strict") is IM2COL.reference


def test_torch_convolutions_run_at_float32_precision_on_a_gpu():
    """cuDNN's TF32 (PyTorch's default for convolutions, ~1e-3 relative error) is off for
    float32 tensors on a GPU inside the torch device's conv kernels, and the user's setting is
    back afterwards, also after an error; on the cpu and for float64 nothing is touched."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from needle.backends.conv_torch import _float32_precision

    cudnn = torch.backends.cudnn
    saved = cudnn.allow_tf32
    try:
        cudnn.allow_tf32 = True
        gpu32 = SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32)
        with _float32_precision(gpu32):
            assert cudnn.allow_tf32 is False
        assert cudnn.allow_tf32 is True
        with pytest.raises(KeyError), _float32_precision(gpu32):
            raise KeyError("inside")
        assert cudnn.allow_tf32 is True
        for other in (SimpleNamespace(device=torch.device("cuda"), dtype=torch.float64),
                      torch.zeros(1)):
            with _float32_precision(other):
                assert cudnn.allow_tf32 is True
        cudnn.allow_tf32 = False  # the user's choice is left as it is
        with _float32_precision(gpu32):
            assert cudnn.allow_tf32 is False
        assert cudnn.allow_tf32 is False
    finally:
        cudnn.allow_tf32 = saved


def test_float32_conv_and_its_adjoints_match_float64(device):
    """float32 convolutions against float64 ones on every device: a library's own convolution
    (cuDNN on a GPU, for torch and jax) at reduced precision (TF32: ~1e-3) would miss this;
    float32 sums of 288 terms agree to 1e-5."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((8, 12, 12, 32)), rng.standard_normal((3, 3, 32, 16))
    g = rng.standard_normal((8, 6, 6, 16))

    def run(dtype):
        a, b = tensor(x, device, dtype), tensor(w, device, dtype)
        out = ndl.conv(a, b, stride=2, padding=1)
        out.backward(tensor(g, device, dtype, requires_grad=False))
        return out.numpy(), a.grad.numpy(), b.grad.numpy()

    float32 = run("float32")
    assert float32[0].dtype == np.float32
    for got, exact in zip(float32, run("float64")):
        np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())


def test_conv_errors_name_the_shapes(device):
    x = tensor(np.zeros((1, 4, 4, 3)), device)
    with pytest.raises(ValueError, match=r"input has 3 channels .* weights expect 2"):
        ndl.conv(x, tensor(np.zeros((3, 3, 2, 1)), device))
    with pytest.raises(ValueError, match=r"kernel \(7, 7\) is larger than the padded input"):
        ndl.conv(x, tensor(np.zeros((7, 7, 3, 1)), device), padding=1)
    with pytest.raises(ValueError, match=r"NHWC input and \(K, K, C_in, C_out\) weights"):
        ndl.conv(tensor(np.zeros((4, 4, 3)), device), tensor(np.zeros((3, 3, 3, 1)), device))
    with pytest.raises(ValueError, match="stride must be >= 1, got 0"):
        ndl.conv(x, tensor(np.zeros((3, 3, 3, 1)), device), stride=0)
    with pytest.raises(TypeError, match="padding must be an int"):
        ndl.conv(x, tensor(np.zeros((3, 3, 3, 1)), device), padding=1.5)


@pytest.mark.parametrize("c_in, c_out", [(0, 3), (2, 0), (0, 0)])
@pytest.mark.parametrize("create_graph", [True, False])
def test_conv_with_no_channels(c_in, c_out, create_graph, device):
    """As numpy: no input channels sum to zeros, no output channels give an empty output
    (PyTorch's conv2d gave no output channels, or raised, for these)."""
    a = tensor(np.ones((1, 4, 4, c_in)), device)
    b = tensor(np.ones((3, 3, c_in, c_out)), device)
    bias = tensor(np.arange(float(c_out)), device)
    out = ndl.ops.conv(a, b, 1, 1, bias=bias)
    assert out.shape == (1, 4, 4, c_out)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(np.arange(c_out), out.shape))
    out.backward(tensor(np.ones(out.shape), device), create_graph=create_graph)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape and bias.grad.shape == (c_out,)
    for t in (a, b):
        np.testing.assert_array_equal(t.grad.numpy(), np.zeros(t.shape))
    np.testing.assert_array_equal(bias.grad.numpy(), np.full(c_out, 16.0))
    nchw = ndl.ops.Conv(1, 1, "NCHW")(tensor(np.ones((1, c_in, 4, 4)), device), b)
    assert nchw.shape == (1, c_out, 4, 4)
    np.testing.assert_array_equal(nchw.numpy(), np.zeros(nchw.shape))


@pytest.mark.parametrize("stride,padding,bias", [(1, 1, True), (2, 0, False), (3, 2, True)])
def test_nchw_layout_is_the_nhwc_conv_permuted(stride, padding, bias, device):
    """Conv(layout="NCHW") (nn.Conv's) on NCHW x: the NHWC op's output and adjoints, permuted;
    float64 (a library's convolution may pick another algorithm for the other memory order)."""
    rng = np.random.default_rng(stride * 10 + padding)
    a, b, c = (rng.standard_normal(s) for s in [(2, 7, 6, 3), (3, 3, 3, 4), (4,)])
    x, w, z = tensor(a, device), tensor(b, device), tensor(c, device)
    xt, wt, zt = (tensor(a.transpose(0, 3, 1, 2), device), tensor(b, device),
                  tensor(c, device))
    out = ndl.conv(x, w, stride, padding, bias=z if bias else None)
    op = ndl.ops.Conv(stride, padding, layout="NCHW")
    out_t = op(xt, wt, zt) if bias else op(xt, wt)
    np.testing.assert_allclose(out_t.numpy(), out.numpy().transpose(0, 3, 1, 2), rtol=1e-12,
                               atol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(tensor(g, device, requires_grad=False))
    out_t.backward(tensor(g.transpose(0, 3, 1, 2), device, requires_grad=False))
    np.testing.assert_allclose(xt.grad.numpy(), x.grad.numpy().transpose(0, 3, 1, 2),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wt.grad.numpy(), w.grad.numpy(), rtol=1e-12, atol=1e-12)
    if bias:
        np.testing.assert_allclose(zt.grad.numpy(), z.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_nchw_conv_second_order_gradient(device):
    rng = np.random.default_rng(2)

    def grad_norm(x, w, c):  # every adjoint of the NCHW op differentiated again
        out = ndl.ops.Conv(2, 1, "NCHW")(x, w, c)
        (out * out).sum().backward(create_graph=True)
        return (x.grad * x.grad).sum() + (w.grad * w.grad).sum() + (c.grad * c.grad).sum()

    check_gradients(grad_norm, rng.standard_normal((1, 2, 4, 5)),
                    rng.standard_normal((3, 3, 2, 2)), rng.standard_normal(2), device=device,
                    rtol=1e-4)


def test_nchw_conv_errors_name_the_layout(device):
    x = tensor(np.zeros((1, 3, 4, 4)), device)
    with pytest.raises(ValueError, match=r"input has 3 channels \(NCHW shape \(1, 3, 4, 4\)\)"):
        ndl.ops.Conv(1, 1, "NCHW")(x, tensor(np.zeros((3, 3, 2, 1)), device))
    with pytest.raises(ValueError, match=r"larger than the padded input: input shape "
                                         r"\(1, 3, 4, 4\) \(NCHW\)"):
        ndl.ops.Conv(1, 0, "NCHW")(x, tensor(np.zeros((7, 7, 3, 1)), device))
    with pytest.raises(ValueError, match=r"layout must be one of \('NHWC', 'NCHW'\), got 'CHWN'"):
        ndl.ops.Conv(1, 1, "CHWN")


# ----- pad: errors (its forward and gradient are the op table's pad cases) --------------------
def test_pad_errors(device):
    x = tensor(np.zeros((2, 3)), device)
    with pytest.raises(ValueError, match=r"pad: 1 \(before, after\) pairs for an input of 2"):
        ndl.pad(x, ((1, 1),))
    with pytest.raises(ValueError, match="pad: a width must be >= 0, got -1"):
        ndl.pad(x, ((0, 0), (-1, 1)))
    with pytest.raises(TypeError, match="pad: axes must be"):
        ndl.pad(x, (1, 2))


# ----- nn.Conv ---------------------------------------------------------------------------------
def test_conv_layer_draws_weight_then_bias_from_numpy_global_state(device):
    np.random.seed(3)
    conv = nn.Conv(2, 4, 3, device=device)
    np.random.seed(3)
    fan_in = 2 * 3 * 3
    bound = math.sqrt(2) * math.sqrt(3 / fan_in)
    weight = np.random.rand(3, 3, 2, 4) * 2 * bound - bound
    b = 1 / math.sqrt(fan_in)
    bias = np.random.rand(4) * 2 * b - b
    assert conv.weight.shape == (3, 3, 2, 4) and conv.bias.shape == (4,)
    np.testing.assert_allclose(conv.weight.numpy(), weight, rtol=1e-6)
    np.testing.assert_allclose(conv.bias.numpy(), bias, rtol=1e-6)
    assert conv.padding == 1
    assert repr(conv) == "Conv(2, 4, kernel_size=3, stride=1, bias=True)"


@pytest.mark.parametrize("k,stride,bias", [(3, 1, True), (3, 2, True), (5, 2, False),
                                           (1, 1, True), (4, 2, True)])
def test_conv_layer_matches_pytorch_conv2d(k, stride, bias, device):
    torch = pytest.importorskip("torch")
    np.random.seed(k + stride)
    conv = nn.Conv(3, 5, k, stride=stride, bias=bias, device=device)
    x_host = np.random.standard_normal((2, 3, 9, 8)).astype(np.float32)
    x = tensor(x_host, device, "float32")
    out = conv(x)
    ref_layer = torch.nn.Conv2d(3, 5, k, stride=stride, padding=k // 2, bias=bias)
    with torch.no_grad():
        ref_layer.weight.copy_(torch.tensor(conv.weight.numpy()).permute(3, 2, 0, 1))
        if bias:
            ref_layer.bias.copy_(torch.tensor(conv.bias.numpy()))
    tx = torch.tensor(x_host, requires_grad=True)
    ref = ref_layer(tx)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
    g = np.random.standard_normal(out.shape).astype(np.float32)
    out.backward(tensor(g, device, "float32", requires_grad=False))
    ref.backward(torch.tensor(g))
    weight_grad = ref_layer.weight.grad.permute(2, 3, 1, 0).numpy()
    np.testing.assert_allclose(conv.weight.grad.numpy(), weight_grad, atol=1e-3, rtol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
    if bias:
        np.testing.assert_allclose(conv.bias.grad.numpy(), ref_layer.bias.grad.numpy(),
                                   atol=1e-3, rtol=1e-4)


def test_conv_layer_is_one_node_on_its_nchw_input(device):
    """No permute nodes around the op (the course's layer made two each way)."""
    conv = nn.Conv(3, 4, 3, device=device)
    x = tensor(np.ones((2, 3, 5, 5)), device, "float32")
    out = conv(x)
    assert type(out.op).__name__ == "Conv" and out.op.layout == "NCHW"
    assert out.inputs[0] is x and out.shape == (2, 4, 5, 5)


def test_conv_layer_errors(device):
    conv = nn.Conv(3, 4, 3, device=device)
    with pytest.raises(ValueError, match=r"Conv: expected input of shape \(N, 3, H, W\), "
                                         r"found \(2, 4, 5, 5\)"):
        conv(tensor(np.zeros((2, 4, 5, 5)), device, "float32"))
    with pytest.raises(ValueError, match="Conv: out_channels must be >= 1, found 0"):
        nn.Conv(3, 0, 3)
    with pytest.raises(ValueError, match="only square kernels"):
        nn.Conv(3, 4, (3, 5))


def test_conv_layer_round_trips_through_state_dict(device):
    np.random.seed(0)
    a, b = nn.Conv(2, 3, 3, device=device), nn.Conv(2, 3, 3, device=device)
    b.load_state_dict(a.state_dict())
    x = tensor(np.random.standard_normal((1, 2, 5, 5)), device, "float32")
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())


# ----- BatchNorm2d against PyTorch ------------------------------------------------------------
def test_batchnorm2d_matches_pytorch_in_train_and_eval(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    bn = nn.BatchNorm2d(3, device=device, dtype="float64")
    ref = torch.nn.BatchNorm2d(3, dtype=torch.float64)
    for _ in range(2):
        x = rng.standard_normal((4, 3, 5, 6)) * 2 + 1
        g = rng.standard_normal(x.shape)
        t, tx = tensor(x, device), torch.tensor(x, requires_grad=True)
        out, tout = bn(t), ref(tx)
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), atol=1e-10)
        out.backward(tensor(g, device, requires_grad=False))
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), atol=1e-10)
    assert bn.running_mean.shape == (3,)
    np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-12)
    # the course's running variance is the biased one; PyTorch keeps the unbiased one
    bn.eval(), ref.eval()
    x = rng.standard_normal((2, 3, 5, 6))
    np.testing.assert_allclose(bn(tensor(x, device)).numpy(),
                               ((x - bn.running_mean.numpy()[:, None, None])
                                / np.sqrt(bn.running_var.numpy()[:, None, None] + 1e-5)),
                               atol=1e-10)


def test_one_conv_op_used_twice_keeps_each_nodes_windows_apart(device):
    # Conv keeps the forward's windows for the weight gradient; a second call of the same op
    # instance must not hand the first node the second input's windows
    rng = np.random.default_rng(7)
    a1, a2 = rng.standard_normal((1, 4, 4, 2)), rng.standard_normal((1, 4, 4, 2))
    b = rng.standard_normal((3, 3, 2, 2))
    op = ndl.ops.Conv(1, 1)
    w = tensor(b, device)
    out1 = op(tensor(a1, device), w)
    op(tensor(a2, device), w)
    out1.sum().backward()
    ref = tensor(b, device)
    ndl.conv(tensor(a1, device), ref, 1, 1).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), ref.grad.numpy(), atol=1e-12)


def test_conv_bias_is_added_in_the_node_and_checked(device):
    rng = np.random.default_rng(21)
    a = ndl.Tensor(rng.standard_normal((2, 4, 4, 3)), device=device)
    b = ndl.Tensor(rng.standard_normal((3, 3, 3, 2)), device=device)
    c = ndl.Tensor(rng.standard_normal(2), device=device)
    out = ndl.conv(a, b, 1, 1, bias=c)
    assert type(out.op).__name__ == "Conv" and len(out.inputs) == 3
    np.testing.assert_allclose(out.numpy(), (ndl.conv(a, b, 1, 1) + c).numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match=r"bias must have shape \(2,\).*found \(3,\)"):
        ndl.conv(a, b, 1, 1, bias=ndl.Tensor(np.zeros(3), device=device))


@pytest.mark.parametrize("place", ["cpu", "cuda"])
def test_torch_conv_weights_are_read_in_place_and_train_as_contiguous_ones(place, monkeypatch):
    """On torch nn.Conv keeps its (K, K, C_in, C_out) weights in (C_out, C_in, K, K) memory
    order (`Device.conv_weights`), the layout PyTorch's convolution reads as it is: its
    forward and backward copy no weights (with C-ordered weights they copied them at every
    call), and SGD with momentum and Adam keep that layout (such a parameter is updated on
    its own arrays, outside the flat groups). The numbers of three steps are those of the
    same model with C-ordered weights, to the bit."""
    pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    device = ndl.torch(place)
    if not device.enabled():
        pytest.skip(device.unavailable_reason())
    import torch

    # (cuDNN's default weight adjoint is not deterministic: two runs differ in the last bit)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)

    def model():
        np.random.seed(0)
        return nn.Sequential(nn.Conv(4, 8, 3, device=device), nn.ReLU(),
                             nn.Conv(8, 8, 3, stride=2, device=device))

    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((2, 4, 6, 6)).astype(np.float32), device=device)
    g = ndl.Tensor(rng.standard_normal((2, 8, 3, 3)).astype(np.float32), device=device)
    results = []
    for layout in ("conv", "C"):
        for make in (lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9),
                     lambda ps: ndl.optim.Adam(ps, lr=0.01)):
            net = model()
            weights = [p for p in net.parameters() if p.ndim == 4]
            for w in weights:
                oihw = w._array.permute(3, 2, 0, 1)
                assert oihw.is_contiguous() and not w._array.is_contiguous()
                if layout == "C":
                    w._array = w._array.contiguous()
            opt = make(net.parameters())
            for _ in range(3):
                opt.reset_grad()
                (net(x) * g).sum().backward()
                opt.step()
            assert all(w._array.permute(3, 2, 0, 1).is_contiguous() is (layout == "conv")
                       for w in weights)  # the layout after three steps
            results.append([p.numpy() for p in net.parameters()])
    for conv_ordered, c_ordered in zip(results[:2], results[2:]):
        for a, b in zip(conv_ordered, c_ordered):
            np.testing.assert_array_equal(a, b)
    # (profiled last: a backward to the input changes oneDNN's later choices on the cpu)
    net, x.requires_grad = model(), True  # the full backward (the input's adjoint too)
    (net(x) * g).sum().backward()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        (net(x) * g).sum().backward()
    shapes = {tuple(p._array.permute(3, 2, 0, 1).shape) for p in net.parameters() if p.ndim == 4}
    copied = [e.input_shapes for e in prof.events()
              if e.name == "aten::clone" and tuple(e.input_shapes[0]) in shapes]
    assert copied == []


def test_a_loaded_state_dict_keeps_the_torch_conv_weights_layout():
    """load_state_dict copies each array into the tensor's own layout (Device.laid_out_like):
    a torch Conv's weights stay in (C_out, C_in, K, K) memory order with the loaded values
    (a checkpoint's arrays are C-ordered)."""
    pytest.importorskip("torch")
    device = ndl.torch()
    np.random.seed(1)
    saved = nn.Conv(3, 4, 3, device=device).state_dict()
    np.random.seed(2)
    conv = nn.Conv(3, 4, 3, device=device)
    host = {k: v.numpy() for k, v in saved.items()}
    conv.load_state_dict(host)  # numpy arrays, C order
    assert conv.weight._array.permute(3, 2, 0, 1).is_contiguous()
    np.testing.assert_array_equal(conv.weight.numpy(), host["weight"])
    np.testing.assert_array_equal(conv.bias.numpy(), host["bias"])


def test_a_conv_moved_to_torch_gets_the_weights_layout():
    """Module.to lays out what it moved (`_placed`): a Conv built on the cpu and moved to
    torch has its weights in (C_out, C_in, K, K) memory order, the same values; moved back,
    C order (the cpu's conv_weights keeps an array as it is)."""
    pytest.importorskip("torch")
    np.random.seed(3)
    model = nn.Sequential(nn.Conv(3, 4, 3), nn.ReLU())
    values = model.modules[0].weight.numpy()
    model.to(ndl.torch())
    weight = model.modules[0].weight
    assert weight._array.permute(3, 2, 0, 1).is_contiguous()
    np.testing.assert_array_equal(weight.numpy(), values)
    model.to(ndl.cpu())
    assert weight._array.flags.c_contiguous
    np.testing.assert_array_equal(weight.numpy(), values)
