"""PyTorch's options that the course's layers lacked: nn.Conv(padding=) and
nn.RNN / nn.LSTM(batch_first=), against PyTorch and numpy; without them, the course's layers
(draws, outputs, repr, state_dict) as before."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import needle as ndl
from needle import nn


def tensor(a, device, dtype="float32", requires_grad=False):
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=requires_grad)


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----- nn.Conv(padding=) -----------------------------------------------------------------------
CONVS = [  # kernel_size, stride, padding, bias
    (3, 1, "same", True), (5, 1, "same", False), (1, 1, "same", True),
    (3, 1, "valid", True), (4, 2, "valid", False), (3, 2, 0, True), (3, 1, 2, True),
    (1, 1, 3, False), (5, 2, 1, True), (2, 1, (1, 1), True),
]


@pytest.mark.parametrize("k,stride,padding,bias", CONVS)
def test_conv_padding_matches_pytorch(k, stride, padding, bias, device):
    torch = pytest.importorskip("torch")
    np.random.seed(k + stride)
    conv = nn.Conv(3, 4, k, stride=stride, bias=bias, padding=padding, device=device)
    x_host, w = data(2, 3, 9, 8), conv.weight.numpy()
    x = tensor(x_host, device, requires_grad=True)
    out = conv(x)
    tx = torch.tensor(x_host, requires_grad=True)
    tw = torch.tensor(w).permute(3, 2, 0, 1).detach().requires_grad_()  # (K, K, I, O) -> OIKK
    tb = torch.tensor(conv.bias.numpy(), requires_grad=True) if bias else None
    ref = torch.nn.functional.conv2d(tx, tw, tb, stride=stride, padding=padding)
    assert out.shape == tuple(ref.shape)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
    g = data(*out.shape, seed=1)
    out.backward(tensor(g, device))
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(conv.weight.grad.numpy(), tw.grad.permute(2, 3, 1, 0).numpy(),
                               atol=1e-3, rtol=1e-4)
    if bias:
        np.testing.assert_allclose(conv.bias.grad.numpy(), tb.grad.numpy(), atol=1e-3,
                                   rtol=1e-4)


def test_conv_valid_padding_against_numpy(device):
    """padding='valid' sums every K×K window with no zeros added (runs without torch)."""
    conv = nn.Conv(2, 3, 3, padding="valid", bias=False, device=device)
    x = data(1, 2, 5, 4)
    w = conv.weight.numpy()  # (K, K, C_in, C_out)
    expected = np.zeros((1, 3, 3, 2))
    for i in range(3):
        for j in range(2):
            expected[0, :, i, j] = np.einsum("cab,abco->o", x[0, :, i:i + 3, j:j + 3], w)
    np.testing.assert_allclose(conv(tensor(x, device)).numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("k,stride", [(1, 1), (2, 2), (3, 1), (3, 2), (4, 1), (5, 2)])
def test_conv_default_padding_is_the_courses(k, stride, device):
    """No padding argument: kernel_size // 2, the course's draws, outputs and repr, exactly;
    any padding draws the same weights."""
    x = tensor(data(2, 3, 7, 6), device)
    layers = []
    for padding in ({}, {"padding": None}, {"padding": k // 2}, {"padding": 0}):
        np.random.seed(5)
        layers.append(nn.Conv(3, 4, k, stride, device=device, **padding))
    default, none, explicit, zero = layers
    np.random.seed(5)
    fan_in = 3 * k * k
    bound = math.sqrt(2) * math.sqrt(3 / fan_in)
    weight = np.random.rand(k, k, 3, 4) * 2 * bound - bound
    np.testing.assert_allclose(default.weight.numpy(), weight, rtol=1e-6)
    for layer in (none, explicit, zero):
        for (name, a), (_, b) in zip(default.state_dict().items(), layer.state_dict().items()):
            assert np.array_equal(a.numpy(), b.numpy()), name
    assert default.padding == none.padding == explicit.padding == k // 2 and zero.padding == 0
    assert np.array_equal(default(x).numpy(), explicit(x).numpy())
    assert np.array_equal(none(x).numpy(), explicit(x).numpy())
    assert repr(default) == f"Conv(3, 4, kernel_size={k}, stride={stride}, bias=True)"
    assert repr(explicit) == repr(default)
    if k > 1:
        assert repr(zero) == f"Conv(3, 4, kernel_size={k}, stride={stride}, padding=0, bias=True)"
        assert default(x).shape != zero(x).shape


def test_conv_padding_leaves_state_dict_alone(device):
    """padding is no parameter or buffer: checkpoints load across paddings."""
    np.random.seed(0)
    source = nn.Conv(2, 3, 3, device=device)
    target = nn.Conv(2, 3, 3, padding="valid", device=device)
    assert list(target.state_dict()) == list(source.state_dict()) == ["weight", "bias"]
    target.load_state_dict(source.state_dict())
    x = tensor(data(1, 2, 5, 5), device)
    # valid padding gives the interior of the same-padded output
    np.testing.assert_allclose(target(x).numpy(), source(x).numpy()[:, :, 1:-1, 1:-1],
                               atol=1e-6)
    assert pickle.loads(pickle.dumps(target)).padding == 0


def test_conv_padding_errors_name_the_argument():
    with pytest.raises(ValueError, match="Conv: padding must be >= 0, found -1"):
        nn.Conv(2, 3, 3, padding=-1)
    with pytest.raises(ValueError, match="Conv: padding must be None, an integer >= 0, 'same' "
                                         "or 'valid', found 'full'"):
        nn.Conv(2, 3, 3, padding="full")
    with pytest.raises(TypeError, match="Conv: padding must be an integer, found 1.5"):
        nn.Conv(2, 3, 3, padding=1.5)
    with pytest.raises(TypeError, match="Conv: padding must be an integer, found True"):
        nn.Conv(2, 3, 3, padding=True)
    with pytest.raises(ValueError, match="Conv: padding='same' needs an odd kernel_size, "
                                         "found 4"):
        nn.Conv(2, 3, 4, padding="same")
    with pytest.raises(ValueError, match="Conv: padding='same' needs stride=1 .* found "
                                         "stride=2"):
        nn.Conv(2, 3, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match=r"Conv: only equal padding .* padding=\(1, 2\)"):
        nn.Conv(2, 3, 3, padding=(1, 2))


# ----- nn.RNN / nn.LSTM(batch_first=) ----------------------------------------------------------
def build(kind, n_in, H, L, bias, device, batch_first):
    if kind == "lstm":
        m = nn.LSTM(n_in, H, L, bias, device=device, batch_first=batch_first)
        return m, m.lstm_cells
    m = nn.RNN(n_in, H, L, bias, kind, device=device, batch_first=batch_first)
    return m, m.rnn_cells


def torch_copy(torch, cells, t):
    """The PyTorch stack `t` with the needle cells' weights copied in: needle keeps W_ih
    (input_size, G*H), PyTorch weight_ih_l{k} its transpose (as tests/test_rnn.py)."""
    with torch.no_grad():
        for k, cell in enumerate(cells):
            for name in ("W_ih", "W_hh", "bias_ih", "bias_hh"):
                p = getattr(cell, name)
                if p is not None:
                    getattr(t, f"{name.replace('W_', 'weight_')}_l{k}").copy_(
                        torch.tensor(p.numpy().T))
    return t


STACKS = [  # kind (tanh, relu: RNN), T, B, L, bias, initial state
    ("tanh", 5, 3, 2, True, True), ("relu", 4, 2, 1, False, False),
    ("lstm", 6, 3, 2, True, True), ("lstm", 1, 4, 1, False, False), ("lstm", 3, 1, 2, True, False),
]


def run_stack(kind, m, X, h0, c0):
    """(output, h_n, c_n or None) of a needle or PyTorch stack."""
    if kind == "lstm":
        out, (h, c) = m(X, None if h0 is None else (h0, c0))
        return out, h, c
    out, h = m(X, h0)
    return out, h, None


@pytest.mark.parametrize("kind,T,B,L,bias,state", STACKS)
def test_batch_first_matches_pytorch(kind, T, B, L, bias, state, device):
    torch = pytest.importorskip("torch")
    n_in, H = 4, 5
    np.random.seed(T + L)
    m, cells = build(kind, n_in, H, L, bias, device, batch_first=True)
    t = (torch.nn.LSTM(n_in, H, L, bias=bias, batch_first=True) if kind == "lstm" else
         torch.nn.RNN(n_in, H, L, kind, bias=bias, batch_first=True))
    torch_copy(torch, cells, t)
    x, h0, c0 = data(B, T, n_in, seed=1), data(L, B, H, seed=2), data(L, B, H, seed=3)
    g, gh = data(B, T, H, seed=4), data(L, B, H, seed=5)
    X = tensor(x, device, requires_grad=True)
    states = [tensor(a, device, requires_grad=True) for a in (h0, c0)] if state else [None] * 2
    out, h_n, c_n = run_stack(kind, m, X, *states)
    assert out.shape == (B, T, H) and h_n.shape == (L, B, H)
    ((out * tensor(g, device)).sum() + (h_n * tensor(gh, device)).sum()).backward()

    tx = torch.tensor(x, requires_grad=True)
    t_states = [torch.tensor(a, requires_grad=True) for a in (h0, c0)] if state else [None] * 2
    t_out, t_h, t_c = run_stack(kind, t, tx, *t_states)
    ((t_out * torch.tensor(g)).sum() + (t_h * torch.tensor(gh)).sum()).backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(h_n.numpy(), t_h.detach().numpy(), atol=1e-5)
    if kind == "lstm":
        np.testing.assert_allclose(c_n.numpy(), t_c.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), atol=1e-5)
    if state:
        np.testing.assert_allclose(states[0].grad.numpy(), t_states[0].grad.numpy(), atol=1e-5)
    for k, cell in enumerate(cells):
        for name in ("W_ih", "W_hh", "bias_ih", "bias_hh"):
            p = getattr(cell, name)
            if p is not None:
                ref = getattr(t, f"{name.replace('W_', 'weight_')}_l{k}").grad.numpy().T
                np.testing.assert_allclose(p.grad.numpy(), ref, atol=1e-5,
                                           err_msg=f"layer {k} {name}")


@pytest.mark.parametrize("kind", ["tanh", "lstm"])
def test_batch_first_is_the_time_major_stack_transposed(kind, device):
    """Against numpy: a (B, T, n) input gives the (T, B, n) run's output with its first two
    axes swapped, and the same states (runs without torch)."""
    np.random.seed(1)
    m, _ = build(kind, 3, 4, 2, True, device, batch_first=False)
    x = data(5, 2, 3)
    out, h_n, c_n = run_stack(kind, m, tensor(x, device), None, None)
    m.batch_first = True
    out_bf, h_bf, c_bf = run_stack(kind, m, tensor(x.transpose(1, 0, 2), device), None, None)
    np.testing.assert_allclose(out_bf.numpy(), out.numpy().transpose(1, 0, 2), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(h_bf.numpy(), h_n.numpy(), rtol=1e-6, atol=1e-7)
    if kind == "lstm":
        np.testing.assert_allclose(c_bf.numpy(), c_n.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["tanh", "lstm"])
def test_default_stack_is_the_courses(kind, device):
    """No batch_first: time-major, the same draws, output, repr and state_dict as
    batch_first=False, and the same draws as batch_first=True."""
    x = tensor(data(4, 3, 2), device)
    stacks = []
    for option in ({}, {"batch_first": False}, {"batch_first": True}):
        np.random.seed(9)
        stacks.append(build(kind, 2, 3, 2, True, device, **option) if option else
                      (nn.LSTM(2, 3, 2, device=device) if kind == "lstm" else
                       nn.RNN(2, 3, 2, device=device), None))
    (default, _), (explicit, _), (first, _) = stacks
    assert default.batch_first is False
    for other in (explicit, first):
        a, b = default.state_dict(), other.state_dict()
        assert list(a) == list(b)
        assert all(np.array_equal(a[name].numpy(), b[name].numpy()) for name in a)
    assert np.array_equal(default(x)[0].numpy(), explicit(x)[0].numpy())
    assert default(x)[0].shape == (4, 3, 3)
    assert repr(default) == repr(explicit) and "batch_first" not in repr(default)
    assert repr(first).startswith(f"{type(first).__name__}(2, 3, num_layers=2, "
                                  "batch_first=True\n")


def test_batch_first_keeps_the_fused_lstm_cell(device):
    lstm = nn.LSTM(3, 2, batch_first=True, device=device)
    out, _ = lstm(tensor(data(2, 4, 3), device, requires_grad=True))
    names = {type(n.op).__name__ for n in ndl.autograd.find_topo_sort([out]) if n.op}
    assert {"LSTMCellState", "LSTMCellOutput", "Transpose"} <= names
    assert not names & {"Sigmoid", "Tanh", "EWiseMul"}


def test_batch_first_lstm_compiles(device):
    """A compiled training step of a batch_first LSTM equals the eager one, bit for bit."""
    def train(compiled):
        np.random.seed(2)
        lstm = nn.LSTM(3, 4, 2, batch_first=True, device=device)
        head = nn.Linear(4, 1, device=device)
        params = lstm.parameters() + head.parameters()
        opt = ndl.optim.SGD(params, lr=0.1)
        initial = [p.numpy() for p in params]

        def step(x, y):
            opt.reset_grad()
            out, (h, c) = lstm(x)
            loss = ((head(out) - y) ** 2).sum()
            loss.backward()
            opt.step()
            return loss, h

        if compiled:
            step = ndl.compile(step)
        results = []
        for i in range(3):
            x, y = tensor(data(2, 5, 3, seed=i), device), tensor(data(2, 5, 1, seed=9), device)
            loss, h = step(x, y)
            results += [loss.numpy(), h.numpy()]
        if compiled:
            assert step.captures == 1
        trained = [p.numpy() for p in params]
        assert not any(np.array_equal(a, b) for a, b in zip(initial, trained))  # all trained
        return results + trained

    eager, compiled = train(False), train(True)
    assert len(eager) == len(compiled) == 6 + 10
    for i, (a, b) in enumerate(zip(eager, compiled)):
        assert np.array_equal(a, b), f"entry {i}: eager {a}, compiled {b}"


def test_batch_first_errors_name_the_argument_and_layout(device):
    with pytest.raises(TypeError, match="LSTM: batch_first must be True or False, found 'yes'"):
        nn.LSTM(3, 4, batch_first="yes")
    with pytest.raises(TypeError, match="RNN: batch_first must be True or False, found 1"):
        nn.RNN(3, 4, batch_first=1)
    rnn = nn.RNN(3, 4, 2, batch_first=True, device=device)
    with pytest.raises(ValueError, match=r"RNN: expected X of shape \(B, T, input_size\) with "
                                         r"input_size=3, found \(2, 5, 4\)"):
        rnn(tensor(np.zeros((2, 5, 4)), device))
    with pytest.raises(ValueError, match=r"RNN: expected h0 of shape \(2, 6, 4\), "
                                         r"found \(2, 5, 4\)"):  # B is X's first axis
        rnn(tensor(np.zeros((6, 5, 3)), device), tensor(np.zeros((2, 5, 4)), device))
    with pytest.raises(ValueError, match=r"LSTM: expected a sequence length larger than 0, "
                                         r"found an input of shape \(2, 0, 3\) \(B, T, "):
        nn.LSTM(3, 4, batch_first=True, device=device)(tensor(np.zeros((2, 0, 3)), device))


def test_a_stack_pickled_without_batch_first_is_time_major(device):
    """A stack from before the option (no batch_first in its __dict__) runs as it did."""
    lstm = nn.LSTM(2, 3, device=device)
    del lstm.__dict__["batch_first"]
    copy = pickle.loads(pickle.dumps(lstm))
    assert copy.batch_first is False
    assert copy(tensor(data(4, 1, 2), device))[0].shape == (4, 1, 3)
