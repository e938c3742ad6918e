"""The LSTM cell's elementwise part as two fused ops, the new cell state and the new output.

Both take the (B, 4H) gate pre-activations z (PyTorch's gate order i, f, g, o), so a step is
`c' = lstm_cell_state(z, c)` and `h' = lstm_cell_output(z, c')`: two nodes where the
unfused step records eleven. Their gradients are needle ops (run on raw arrays when no graph
is recorded), so second order works.
"""

from __future__ import annotations

from typing import Any

from ..autograd.graph import Value, array_function, array_of
from ..autograd.tensor import Tensor, constant_like
from ..backends import namespace
from ..kernels import Kernel
from .dtypes import PromotingOp
from .movement import get_item, reshape
from .tuple import stack
from .unary import _sigmoid_formula, sigmoid, tanh


def _hidden(op: str, z, c) -> int:
    """H from z (B, 4H), checking c (B, H) when given."""
    shape = tuple(z.shape)
    if len(shape) != 2 or shape[1] % 4:
        raise ValueError(f"{op}: expected gate pre-activations of shape (B, 4H), found {shape}")
    hidden = shape[1] // 4
    if c is not None and tuple(c.shape) != (shape[0], hidden):
        raise ValueError(f"{op}: gates of shape {shape} need a state of shape "
                         f"{(shape[0], hidden)}, found {tuple(c.shape)}")
    return hidden


def _gate(z, k: int, hidden: int):
    """Gate block k of (B, 4H) gates (a Tensor or an array)."""
    return get_item(z, (slice(None), slice(k * hidden, (k + 1) * hidden)))


@array_function
def _zeros_like(a):
    """Zeros of a's shape and dtype."""
    return namespace(a).zeros_like(a)


def _join(blocks: list, out_grad):
    """The (B, 4H) adjoint of the gates from four (B, H) blocks (None: zeros)."""
    some = next(b for b in blocks if b is not None)
    data = array_of(some)
    zero = constant_like(out_grad, _zeros_like(data))
    parts = [zero if b is None else b for b in blocks]
    return reshape(stack(parts, 1), (data.shape[0], 4 * data.shape[1]))


def lstm_state_portable(z: Any, c: Any) -> Any:
    """f * c + i * g from the gates z (B, 4H) and the state c (B, H) or None (zeros)."""
    xp = namespace(z)
    hidden = z.shape[1] // 4
    s = _sigmoid_formula(z[:, :2 * hidden])
    ig = s[:, :hidden] * xp.tanh(z[:, 2 * hidden:3 * hidden])
    return ig if c is None else s[:, hidden:] * c + ig


def lstm_output_portable(z: Any, c: Any) -> Any:
    """o * tanh(c) from the gates z (B, 4H) and the new state c (B, H)."""
    hidden = z.shape[1] // 4
    return _sigmoid_formula(z[:, 3 * hidden:]) * namespace(z).tanh(c)


def lstm_state_grad_portable(z: Any, c: Any, g: Any) -> Any:
    """[dz | dc] (B, 5H): lstm_cell_state's adjoints of z (B, 4H) and c (zeros without c)
    for the output adjoint g (B, H), in the order of operations of the needle-op rule."""
    xp = namespace(z)
    hidden = z.shape[1] // 4
    i, f = (_sigmoid_formula(z[:, k * hidden:(k + 1) * hidden]) for k in (0, 1))
    t = xp.tanh(z[:, 2 * hidden:3 * hidden])
    zero = xp.zeros_like(g)
    df = zero if c is None else g * c * f * (1 - f)
    return xp.concat([g * t * i * (1 - i), df, g * i * (1 - t * t), zero, g * f], axis=1)


def lstm_output_grad_portable(z: Any, c: Any, g: Any) -> Any:
    """[dz | dc] (B, 5H): lstm_cell_output's adjoints of z (B, 4H) and c for g (B, H)."""
    xp = namespace(z)
    hidden = z.shape[1] // 4
    o, t = _sigmoid_formula(z[:, 3 * hidden:]), xp.tanh(c)
    zero = xp.zeros_like(g)
    return xp.concat([zero, zero, zero, g * t * o * (1 - o), g * o * (1 - t * t)], axis=1)


#: on cuda each is one elementwise kernel (backends/lstm.py) where the portable versions
#: launch 5 to 15 small ones per time step; the same roundings in the same order
LSTM_STATE = Kernel("lstm_state", lstm_state_portable,
                    fast={"cuda": "needle.backends.lstm:lstm_state_cuda"})
LSTM_OUTPUT = Kernel("lstm_output", lstm_output_portable,
                     fast={"cuda": "needle.backends.lstm:lstm_output_cuda"})
LSTM_STATE_GRAD = Kernel("lstm_state_grad", lstm_state_grad_portable,
                         fast={"cuda": "needle.backends.lstm:lstm_state_grad_cuda"})
LSTM_OUTPUT_GRAD = Kernel("lstm_output_grad", lstm_output_grad_portable,
                          fast={"cuda": "needle.backends.lstm:lstm_output_grad_cuda"})


def _split(packed, hidden: int):
    """(dz (B, 4H), dc (B, H)) from a packed (B, 5H) adjoint: two GetItem nodes, or on a raw
    array (no graph recorded) the same two views without building the ops."""
    z, c = (slice(None), slice(0, 4 * hidden)), (slice(None), slice(4 * hidden, 5 * hidden))
    if isinstance(packed, Value):
        return get_item(packed, z), get_item(packed, c)
    return packed[z], packed[c]


class LSTMCellState(PromotingOp):
    """c' = f * c + i * g from the gates z (B, 4H) and the state c (B, H); c' = i * g
    without c (a zero state)."""

    op_name = "lstm_cell_state"

    def compute(self, z, c=None):
        _hidden("lstm_cell_state", z, c)
        return LSTM_STATE(z, c)

    def gradient(self, out_grad, node):
        z = node.inputs[0]
        hidden = z.shape[1] // 4
        if len(node.inputs) == 1:
            return (_split(LSTMCellStateGrad()(z, out_grad), hidden)[0],)
        return _split(LSTMCellStateGrad()(z, node.inputs[1], out_grad), hidden)


class LSTMCellOutput(PromotingOp):
    """h' = o * tanh(c') from the gates z (B, 4H) and the new state c' (B, H)."""

    op_name = "lstm_cell_output"

    def compute(self, z, c):
        _hidden("lstm_cell_output", z, c)
        return LSTM_OUTPUT(z, c)

    def gradient(self, out_grad, node):
        z, c = node.inputs
        return _split(LSTMCellOutputGrad()(z, c, out_grad), z.shape[1] // 4)


class LSTMCellStateGrad(PromotingOp):
    """[dz | dc] (B, 5H): lstm_cell_state's adjoints for the output adjoint g, from
    (z, c, g), or (z, g) for a zero state (dz's f block and dc are then zeros).

    Its own gradient (second order), for the adjoint [h0 h1 h2 h3 | hc] and with
    i, f, t = sigmoid(z0), sigmoid(z1), tanh(z2), i' = i (1 - i), f' = f (1 - f), t' = 1 - t^2:
    dg = h0 t i' + h1 c f' + h2 i t' + hc f, dc = h1 g f',
    dz = [g i' (h0 t (1 - 2i) + h2 t'), g f' (h1 c (1 - 2f) + hc), g t' (h0 i' - 2 h2 i t), 0].
    """

    op_name = "lstm_cell_state_grad"

    def compute(self, z, *rest):
        c, g = rest if len(rest) == 2 else (None, rest[0])
        _hidden("lstm_cell_state_grad", z, g)
        return LSTM_STATE_GRAD(z, c, g)

    def gradient(self, h, node):
        z, g = node.inputs[0], node.inputs[-1]
        c = node.inputs[1] if len(node.inputs) == 3 else None
        hidden = z.shape[1] // 4
        h0, h1, h2, _, hc = (_gate(h, k, hidden) for k in range(5))
        i, f = sigmoid(_gate(z, 0, hidden)), sigmoid(_gate(z, 1, hidden))
        t = tanh(_gate(z, 2, hidden))
        di, df, dt = i * (1 - i), f * (1 - f), 1 - t * t
        grad_g = h0 * t * di + h2 * i * dt + hc * f
        block1 = g * df * hc
        if c is not None:
            grad_g = grad_g + h1 * c * df
            block1 = g * df * (h1 * c * (1 - 2 * f) + hc)
        blocks = [g * di * (h0 * t * (1 - 2 * i) + h2 * dt), block1,
                  g * dt * (h0 * di - 2 * h2 * i * t), None]
        grad_z = _join(blocks, g)
        if c is None:
            return grad_z, grad_g
        return grad_z, h1 * g * df, grad_g


class LSTMCellOutputGrad(PromotingOp):
    """[dz | dc] (B, 5H): lstm_cell_output's adjoints for the output adjoint g, from (z, c, g).

    Its own gradient, for the adjoint [h0 h1 h2 h3 | hc] and with o = sigmoid(z3), t = tanh(c),
    o' = o (1 - o), t' = 1 - t^2: dg = h3 t o' + hc o t', dc = g t' (h3 o' - 2 hc o t),
    dz = [0, 0, 0, g o' (h3 t (1 - 2o) + hc t')].
    """

    op_name = "lstm_cell_output_grad"

    def compute(self, z, c, g):
        _hidden("lstm_cell_output_grad", z, c)
        return LSTM_OUTPUT_GRAD(z, c, g)

    def gradient(self, h, node):
        z, c, g = node.inputs
        hidden = z.shape[1] // 4
        h3, hc = _gate(h, 3, hidden), _gate(h, 4, hidden)
        o, t = sigmoid(_gate(z, 3, hidden)), tanh(c)
        do, dt = o * (1 - o), 1 - t * t
        grad_z = _join([None, None, None, g * do * (h3 * t * (1 - 2 * o) + hc * dt)], g)
        return grad_z, g * dt * (h3 * do - 2 * hc * o * t), h3 * t * do + hc * o * dt


def lstm_cell_state(z: Tensor, c: Tensor | None = None) -> Tensor:
    """The LSTM's new cell state f * c + i * g from gates z (B, 4H) and state c (None: zeros)."""
    return LSTMCellState()(z) if c is None else LSTMCellState()(z, c)


def lstm_cell_output(z: Tensor, c: Tensor) -> Tensor:
    """The LSTM's new output o * tanh(c') from gates z (B, 4H) and the new state c'."""
    return LSTMCellOutput()(z, c)
