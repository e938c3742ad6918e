"""The LSTM cell's elementwise part as two fused ops, the new cell state and the new output.

Both take the (B, 4H) gate pre-activations z (PyTorch's gate order i, f, g, o), so a step is
`c' = lstm_cell_state(z, c)` and `h' = lstm_cell_output(z, c')`: two nodes where the
unfused step records eleven. Their gradients are needle ops (run on raw arrays when no graph
is recorded), so second order works.
"""

from __future__ import annotations

from ..autograd.graph import array_function, array_of
from ..autograd.tensor import Tensor, constant_like
from ..backends import namespace
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


class LSTMCellState(PromotingOp):
    """c' = f * c + i * g from the gates z (B, 4H) and the state c (B, H); c' = i * g
    without c (a zero state)."""

    op_name = "lstm_cell_state"

    def compute(self, z, c=None):
        xp = namespace(z)
        hidden = _hidden("lstm_cell_state", z, c)
        s = _sigmoid_formula(z[:, :2 * hidden])
        ig = s[:, :hidden] * xp.tanh(z[:, 2 * hidden:3 * hidden])
        return ig if c is None else s[:, hidden:] * c + ig

    def gradient(self, out_grad, node):
        z, c = node.inputs[0], (node.inputs[1] if len(node.inputs) > 1 else None)
        hidden = z.shape[1] // 4
        i, f = sigmoid(_gate(z, 0, hidden)), sigmoid(_gate(z, 1, hidden))
        t = tanh(_gate(z, 2, hidden))
        blocks = [out_grad * t * i * (1 - i), None, out_grad * i * (1 - t * t), None]
        if c is None:
            return (_join(blocks, out_grad),)
        blocks[1] = out_grad * c * f * (1 - f)
        return _join(blocks, out_grad), out_grad * f


class LSTMCellOutput(PromotingOp):
    """h' = o * tanh(c') from the gates z (B, 4H) and the new state c' (B, H)."""

    op_name = "lstm_cell_output"

    def compute(self, z, c):
        xp = namespace(z)
        hidden = _hidden("lstm_cell_output", z, c)
        return _sigmoid_formula(z[:, 3 * hidden:]) * xp.tanh(c)

    def gradient(self, out_grad, node):
        z, c = node.inputs
        hidden = z.shape[1] // 4
        o, t = sigmoid(_gate(z, 3, hidden)), tanh(c)
        return (_join([None, None, None, out_grad * t * o * (1 - o)], out_grad),
                out_grad * o * (1 - t * t))


def lstm_cell_state(z: Tensor, c: Tensor | None = None) -> Tensor:
    """The LSTM's new cell state f * c + i * g from gates z (B, 4H) and state c (None: zeros)."""
    return LSTMCellState()(z) if c is None else LSTMCellState()(z, c)


def lstm_cell_output(z: Tensor, c: Tensor) -> Tensor:
    """The LSTM's new output o * tanh(c') from gates z (B, 4H) and the new state c'."""
    return LSTMCellOutput()(z, c)
