"""Recurrent layers: RNNCell, RNN, LSTMCell, LSTM against PyTorch (weights copied in) and a
numpy reference, the course's draw order, replaced weights, errors and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle.nn import Parameter
from needle.nn.rnn import LSTM, RNN, LSTMCell, RNNCell
from needle.testing import check_gradients


def tensor(a, device, dtype="float32", requires_grad=False):
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=requires_grad)


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def grad_of(p):
    """p.grad as numpy, zeros where no gradient reached p (PyTorch reports zeros)."""
    return np.zeros(p.shape) if p.grad is None else p.grad.numpy()


def torch_copy(torch, cells, make):
    """The PyTorch module `make()` with the needle cells' weights copied in (transposed)."""
    t = make()
    suffixes = [""] if len(cells) == 1 and not hasattr(t, "num_layers") else [
        f"_l{k}" for k in range(len(cells))]
    with torch.no_grad():
        for cell, sfx in zip(cells, suffixes):
            for name in ("W_ih", "W_hh", "bias_ih", "bias_hh"):
                p = getattr(cell, name)
                if p is not None:
                    target = getattr(t, name.replace("W_", "weight_") + sfx)
                    target.copy_(torch.tensor(p.numpy().T))
    return t


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def numpy_stack(kind, cells, X, h0, c0):
    """The reference forward in float64: (output, h_n, c_n) of an RNN or LSTM stack."""
    hs, cs = [], []
    for k, cell in enumerate(cells):
        W_ih, W_hh = cell.W_ih.numpy().astype(np.float64), cell.W_hh.numpy()
        b = 0.0 if cell.bias_ih is None else cell.bias_ih.numpy() + cell.bias_hh.numpy()
        h, c, out = h0[k], c0[k], []
        for x in X:
            z = x @ W_ih + h @ W_hh + b
            if kind == "lstm":
                i, f, g, o = np.split(z, 4, axis=1)
                c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
                h = sigmoid(o) * np.tanh(c)
            else:
                h = np.tanh(z) if kind == "tanh" else np.maximum(z, 0)
            out.append(h)
        X = np.stack(out)
        hs.append(h)
        cs.append(c)
    return X, np.stack(hs), np.stack(cs)


def build(kind, n_in, H, L, bias, device, dtype="float32"):
    if kind == "lstm":
        m = LSTM(n_in, H, L, bias, device=device, dtype=dtype)
        return m, m.lstm_cells
    m = RNN(n_in, H, L, bias, kind, device=device, dtype=dtype)
    return m, m.rnn_cells


# ----- against PyTorch -------------------------------------------------------------------------
STACKS = [  # kind (tanh, relu: RNN), T, B, L, bias, initial state
    ("tanh", 13, 15, 2, True, True), ("tanh", 1, 1, 1, False, False),
    ("relu", 6, 4, 2, False, True), ("relu", 9, 3, 1, True, False),
    ("lstm", 13, 15, 2, True, True), ("lstm", 1, 2, 2, False, False),
    ("lstm", 7, 5, 1, False, True), ("lstm", 4, 3, 2, True, False),
]


@pytest.mark.parametrize("kind,T,B,L,bias,state", STACKS)
def test_stack_matches_pytorch(kind, T, B, L, bias, state, device):
    torch = pytest.importorskip("torch")
    n_in, H = 5, 6
    np.random.seed(T)
    m, cells = build(kind, n_in, H, L, bias, device)
    x, h0, c0, g = data(T, B, n_in, seed=1), data(L, B, H, seed=2), data(L, B, H, seed=3), \
        data(T, B, H, seed=4)
    X = tensor(x, device, requires_grad=True)
    if kind == "lstm":
        t = torch_copy(torch, cells, lambda: torch.nn.LSTM(n_in, H, L, bias=bias))
        hx = (tensor(h0, device), tensor(c0, device)) if state else None
        out, (h_n, c_n) = m(X, hx)
    else:
        t = torch_copy(torch, cells, lambda: torch.nn.RNN(n_in, H, L, kind, bias=bias))
        out, h_n = m(X, tensor(h0, device) if state else None)
    (out * tensor(g, device)).sum().backward()

    tx = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    th0, tc0 = (torch.tensor(a, dtype=torch.float32) for a in (h0, c0))
    if kind == "lstm":
        t_out, (t_h, t_c) = t(tx, (th0, tc0) if state else None)
        np.testing.assert_allclose(c_n.numpy(), t_c.detach().numpy(), atol=1e-5)
    else:
        t_out, t_h = t(tx, th0 if state else None)
    (t_out * torch.tensor(g, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(h_n.numpy(), t_h.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(X.grad.numpy(), tx.grad.numpy(), atol=1e-5)
    for k, cell in enumerate(cells):
        for name in ("W_ih", "W_hh"):
            ref = getattr(t, name.replace("W_", "weight_") + f"_l{k}").grad.numpy().T
            np.testing.assert_allclose(grad_of(getattr(cell, name)), ref, atol=1e-5,
                                       err_msg=f"layer {k} {name}")


@pytest.mark.parametrize("kind,bias,state", [
    ("tanh", True, True), ("relu", False, False), ("lstm", True, True), ("lstm", False, False),
])
def test_cells_match_pytorch(kind, bias, state, device):
    torch = pytest.importorskip("torch")
    B, n_in, H = 15, 7, 4
    np.random.seed(3)
    x, h0, c0, g = data(B, n_in, seed=1), data(B, H, seed=2), data(B, H, seed=3), \
        data(B, H, seed=4)
    tx, th0, tc0 = (torch.tensor(a, dtype=torch.float32) for a in (x, h0, c0))
    if kind == "lstm":
        cell = LSTMCell(n_in, H, bias, device=device)
        t = torch_copy(torch, [cell], lambda: torch.nn.LSTMCell(n_in, H, bias=bias))
        h, c = cell(tensor(x, device), (tensor(h0, device), tensor(c0, device)) if state
                    else None)
        t_h, t_c = t(tx, (th0, tc0) if state else None)
        np.testing.assert_allclose(c.numpy(), t_c.detach().numpy(), atol=1e-5)
    else:
        cell = RNNCell(n_in, H, bias, kind, device=device)
        t = torch_copy(torch, [cell], lambda: torch.nn.RNNCell(n_in, H, bias, kind))
        h = cell(tensor(x, device), tensor(h0, device) if state else None)
        t_h = t(tx, th0 if state else None)
    np.testing.assert_allclose(h.numpy(), t_h.detach().numpy(), atol=1e-5)
    (h * tensor(g, device)).sum().backward()
    (t_h * torch.tensor(g, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(cell.W_ih.grad.numpy(), t.weight_ih.grad.numpy().T, atol=1e-5)


# ----- against numpy (runs without torch) ----------------------------------------------------
@pytest.mark.parametrize("kind,bias,state", [
    ("tanh", True, True), ("relu", True, False), ("lstm", True, True), ("lstm", False, False),
])
def test_stack_matches_numpy(kind, bias, state, device):
    T, B, L, n_in, H = 6, 4, 2, 3, 5
    np.random.seed(1)
    m, cells = build(kind, n_in, H, L, bias, device)
    x = data(T, B, n_in, seed=1)
    h0, c0 = (data(L, B, H, seed=s) if state else np.zeros((L, B, H)) for s in (2, 3))
    ref_out, ref_h, ref_c = numpy_stack(kind, cells, x, h0, c0)
    if kind == "lstm":
        out, (h_n, c_n) = m(tensor(x, device), (tensor(h0, device), tensor(c0, device))
                            if state else None)
        np.testing.assert_allclose(c_n.numpy(), ref_c, atol=1e-5)
    else:
        out, h_n = m(tensor(x, device), tensor(h0, device) if state else None)
    np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-5)
    np.testing.assert_allclose(h_n.numpy(), ref_h, atol=1e-5)


@pytest.mark.parametrize("kind", ["tanh", "lstm"])
def test_stack_gradients_by_finite_differences(kind, device):
    T, B, L, n_in, H = 3, 2, 2, 2, 3
    np.random.seed(0)
    m, _ = build(kind, n_in, H, L, True, device, dtype="float64")
    x, h0, c0 = data(T, B, n_in, seed=1), data(L, B, H, seed=2), data(L, B, H, seed=3)
    if kind == "lstm":
        check_gradients(lambda x, h, c: m(x, (h, c))[0], x, h0, c0, device=device)
        # c_n, which the output does not show whole
        check_gradients(lambda x, h, c: m(x, (h, c))[1][1], x, h0, c0, device=device)
    else:
        check_gradients(lambda x, h: m(x, h)[0], x, h0, device=device)


# ----- parameters: draw order, attributes, replacement -----------------------------------------
@pytest.mark.parametrize("cls,gates", [(RNNCell, 1), (LSTMCell, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_seeded_draw_order(cls, gates, bias, device):
    n_in, H = 3, 4
    k = np.sqrt(1 / H)
    np.random.seed(7)
    cell = cls(n_in, H, bias=bias, device=device)
    np.random.seed(7)
    shapes = [(n_in, gates * H), (H, gates * H)] + [(gates * H,)] * (2 * bias)
    expected = [np.random.rand(*s) * 2 * k - k for s in shapes]
    after = np.random.rand()
    np.random.seed(7)
    for s in shapes:
        np.random.rand(*s)
    assert after == np.random.rand()  # exactly these draws: two without a bias
    names = ["W_ih", "W_hh", "bias_ih", "bias_hh"]
    assert [n for n, _ in cell.named_parameters()] == names[:len(shapes)]
    for name, want in zip(names, expected):
        got = getattr(cell, name)
        assert got.dtype == tensor(0.0, device).dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    if not bias:
        assert cell.bias_ih is None and cell.bias_hh is None


def test_stacks_draw_layer_by_layer(device):
    np.random.seed(5)
    rnn = RNN(2, 3, 2, device=device)
    np.random.seed(5)
    cells = [RNNCell(2, 3, device=device), RNNCell(3, 3, device=device)]
    for a, b in zip(rnn.parameters(), [p for c in cells for p in c.parameters()]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    lstm = LSTM(2, 3, 2, False, device=device)
    assert [n for n, _ in lstm.named_parameters()] == [
        "lstm_cells.0.W_ih", "lstm_cells.0.W_hh", "lstm_cells.1.W_ih", "lstm_cells.1.W_hh"]
    assert lstm.lstm_cells[1].W_ih.shape == (3, 12)


def test_attributes_and_repr():
    rnn = RNN(3, 4, 2, False, "relu")  # bias is the 4th positional argument
    assert (rnn.input_size, rnn.hidden_size, rnn.num_layers, rnn.bias, rnn.nonlinearity) == (
        3, 4, 2, False, "relu")
    assert all(c.bias_ih is None and c.nonlinearity == "relu" for c in rnn.rnn_cells)
    lstm = LSTM(3, 4)
    assert (lstm.input_size, lstm.hidden_size, lstm.num_layers, lstm.bias) == (3, 4, 1, True)
    assert repr(RNNCell(3, 4)) == "RNNCell(3, 4)"
    assert repr(RNNCell(3, 4, False, "relu")) == "RNNCell(3, 4, bias=False, nonlinearity=relu)"
    assert repr(LSTMCell(3, 4, bias=False)) == "LSTMCell(3, 4, bias=False)"
    assert repr(LSTM(3, 4, num_layers=2)).startswith("LSTM(3, 4, num_layers=2\n")
    assert repr(RNN(3, 4)).startswith("RNN(3, 4\n")


@pytest.mark.parametrize("cls", [RNNCell, LSTMCell, RNN, LSTM])
def test_replaced_weights_are_used_and_get_gradients(cls, device):
    np.random.seed(0)
    m = cls(3, 2, device=device)
    cell = m if cls in (RNNCell, LSTMCell) else (getattr(m, "rnn_cells", None)
                                                 or m.lstm_cells)[0]
    x = data(4, 3) if cls in (RNNCell, LSTMCell) else data(2, 4, 3)

    def first(out):
        while isinstance(out, tuple):
            out = out[0]
        return out

    before = first(m(tensor(x, device))).numpy()
    new = Parameter(tensor(cell.W_ih.numpy() * 2, device))
    cell.W_ih = new
    out = first(m(tensor(x, device)))
    assert not np.allclose(out.numpy(), before)
    out.sum().backward()
    assert new.grad is not None and new.grad.shape == new.shape
    assert np.abs(new.grad.numpy()).sum() > 0
    if cls is RNNCell:  # d sum(tanh(z)) / dW_ih = X^T (1 - h^2)
        h = out.numpy()
        np.testing.assert_allclose(new.grad.numpy(), x.T @ (1 - h * h), atol=1e-5)


# ----- errors --------------------------------------------------------------------------------
def test_errors_name_the_shapes(device):
    with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu', found 'gelu'"):
        RNNCell(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="RNN: nonlinearity"):
        RNN(3, 4, nonlinearity="sigmoid")
    rnn, lstm = RNN(3, 4, 2, device=device), LSTM(3, 4, device=device)
    with pytest.raises(ValueError, match=r"RNN: expected X of shape \(T, B, input_size\) "
                                         r"with input_size=3, found \(2, 3\)"):
        rnn(tensor(np.zeros((2, 3)), device))
    with pytest.raises(ValueError, match=r"LSTM: expected X .* found \(2, 5, 4\)"):
        lstm(tensor(np.zeros((2, 5, 4)), device))
    with pytest.raises(ValueError, match=r"RNN: expected h0 of shape \(2, 5, 4\), "
                                         r"found \(1, 5, 4\)"):
        rnn(tensor(np.zeros((6, 5, 3)), device), tensor(np.zeros((1, 5, 4)), device))
    with pytest.raises(ValueError, match=r"LSTM: expected c0 of shape \(1, 5, 4\)"):
        z = tensor(np.zeros((1, 5, 4)), device)
        lstm(tensor(np.zeros((6, 5, 3)), device), (z, tensor(np.zeros((1, 4, 4)), device)))
    with pytest.raises(ValueError, match=r"RNNCell: expected X of shape \(B, input_size\)"):
        RNNCell(3, 4, device=device)(tensor(np.zeros((2, 5)), device))
    with pytest.raises(ValueError, match=r"LSTMCell: h must be None or a pair"):
        LSTMCell(3, 4, device=device)(tensor(np.zeros((2, 3)), device),
                                      tensor(np.zeros((2, 4)), device))
    with pytest.raises(ValueError, match="hidden_size must be >= 1"):
        LSTM(3, 0)


def lstm_cell_objective(z, c):
    """The fused cell ops chained as a step uses them, with output weights to mix both."""
    c2 = ndl.ops.lstm_cell_state(z, c)
    h2 = ndl.ops.lstm_cell_output(z, c2)
    return (h2 * h2).sum() + (c2 * c2 * 0.5).sum()


@pytest.mark.parametrize("with_state", [True, False])
def test_fused_cell_gradients_without_a_graph_equal_the_recorded_ones(with_state, device):
    # create_graph=False takes the raw-array path of the fused ops' gradients
    z, c = data(3, 8, seed=1), data(3, 2, seed=2)
    grads = []
    for create_graph in (True, False):
        zt = tensor(z, device, "float64", True)
        ct = tensor(c, device, "float64", True) if with_state else None
        out = lstm_cell_objective(zt, ct)
        out.backward(create_graph=create_graph)
        grads.append([zt.grad.numpy()] + ([ct.grad.numpy()] if with_state else []))
        assert (zt.grad.op is not None) == create_graph
    for recorded, raw in zip(*grads):
        np.testing.assert_allclose(raw, recorded, rtol=1e-13, atol=1e-15)


def test_fused_cell_second_order(device):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 8)), rng.standard_normal((3, 2))

    def grad_dot(z, c):
        lstm_cell_objective(z, c).backward()
        return (z.grad * tensor(a, z.device, "float64")).sum() + (
            c.grad * tensor(b, z.device, "float64")).sum()

    check_gradients(grad_dot, rng.standard_normal((3, 8)), rng.standard_normal((3, 2)),
                    device=device)


def test_lstm_step_records_two_fused_nodes(device):
    cell = LSTMCell(3, 2, device=device)
    h, c = cell(tensor(data(4, 3), device), (tensor(data(4, 2), device),
                                              tensor(data(4, 2, seed=1), device)))
    ops = {type(n.op).__name__ for n in ndl.autograd.find_topo_sort([h]) if n.op is not None}
    assert {"LSTMCellState", "LSTMCellOutput"} <= ops
    assert not ops & {"Sigmoid", "Tanh", "EWiseMul", "GetItem"}


def test_fused_cell_ops_check_shapes(device):
    with pytest.raises(ValueError, match=r"\(B, 4H\).*\(3, 7\)"):
        ndl.ops.lstm_cell_state(tensor(data(3, 7), device))
    with pytest.raises(ValueError, match=r"\(3, 2\).*\(3, 3\)"):
        ndl.ops.lstm_cell_output(tensor(data(3, 8), device), tensor(data(3, 3), device))


@pytest.mark.parametrize("cls", [RNN, LSTM])
@pytest.mark.parametrize("T", [1, 3])
def test_zero_initial_state_gives_every_layer_a_w_hh_gradient(cls, T, device):
    """With h=None the course (and PyTorch) multiply the zero state: W_hh of every layer
    gets a gradient, zeros from a single step, and the outputs are those of explicit zeros."""
    np.random.seed(3)
    stack = cls(4, 5, num_layers=2, device=device)
    X = tensor(data(T, 2, 4), device)
    out, _ = stack(X)
    ndl.ops.summation(out).backward()
    for name, p in stack.named_parameters():
        assert p.grad is not None, name
    if T == 1:  # one step from the zero state: hᵀ g with h = 0
        for cell in (stack.rnn_cells if cls is RNN else stack.lstm_cells):
            np.testing.assert_array_equal(cell.W_hh.grad.numpy(), np.zeros(cell.W_hh.shape))
    zeros = tensor(np.zeros((2, 2, 5)), device)
    explicit, _ = stack(X, zeros if cls is RNN else (zeros, zeros))
    np.testing.assert_array_equal(explicit.numpy(), out.numpy())
    with ndl.no_grad():  # no graph: the zero product is skipped, the numbers are the same
        np.testing.assert_array_equal(stack(X)[0].numpy(), out.numpy())


@pytest.mark.parametrize("cls", [RNNCell, LSTMCell])
def test_cell_without_state_gives_w_hh_a_gradient(cls, device):
    np.random.seed(4)
    cell = cls(3, 2, device=device)
    out = cell(tensor(data(4, 3), device))
    ndl.ops.summation(out if cls is RNNCell else out[0]).backward()
    np.testing.assert_array_equal(cell.W_hh.grad.numpy(), np.zeros((2, 2 * (1 if cls is
                                                                          RNNCell else 4))))


@pytest.mark.parametrize("cls", [RNN, LSTM])
def test_an_empty_sequence_is_a_clear_error(cls, device):
    """T = 0 failed deep inside with "stack: needs at least one tensor"; a batch of 0 is fine."""
    layer = cls(3, 2, device=device)
    with pytest.raises(ValueError, match=rf"{cls.__name__}: expected a sequence length larger "
                                         r"than 0, found an input of shape \(0, 4, 3\)"):
        layer(ndl.Tensor(np.zeros((0, 4, 3)), device=device, dtype="float32"))
    out = layer(ndl.Tensor(np.zeros((5, 0, 3)), device=device, dtype="float32"))[0]
    assert out.shape == (5, 0, 2)
