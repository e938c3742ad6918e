"""Recurrent layers (the course's hw4 API): RNNCell, RNN, LSTMCell, LSTM.

Weights are stored input-major, W_ih (input_size, G * H) and W_hh (H, G * H), so a step is
`X @ W_ih + bias_ih + h @ W_hh + bias_hh` (PyTorch's weight_ih is W_ih transposed). The
LSTM's gates are PyTorch's, in its order: i, f, g, o. The stacks hand each layer's outputs, a
list of per-step Tensors, straight to the next layer and stack them only at the end.
"""

from __future__ import annotations

import math

from .. import init, ops
from ..arguments import flag
from ..autograd import Tensor
from ..backends import Device
from ..grad_mode import is_grad_enabled
from .module import Module, Parameter, check_size

_ACTIVATIONS = {"tanh": ops.tanh, "relu": ops.relu}


def _uniform(*shape: int, k: float, device: Device | None, dtype: str) -> Parameter:
    return Parameter(init.rand(*shape, low=-k, high=k, device=device, dtype=dtype))


def _check_state(owner: str, name: str, h: Tensor, expected: tuple[int, ...]) -> None:
    if not isinstance(h, Tensor) or h.shape != expected:
        found = h.shape if isinstance(h, Tensor) else type(h).__name__
        raise ValueError(f"{owner}: expected {name} of shape {expected}, found {found}")


def _check_input(owner: str, X: Tensor, ndim: int, input_size: int,
                 layout: str = "(T, B, input_size)") -> None:
    layout = "(B, input_size)" if ndim == 2 else layout
    if not isinstance(X, Tensor) or X.ndim != ndim or X.shape[-1] != input_size:
        found = X.shape if isinstance(X, Tensor) else type(X).__name__
        raise ValueError(f"{owner}: expected X of shape {layout} with input_size="
                         f"{input_size}, found {found}")


class _Cell(Module):
    """What RNNCell and LSTMCell share: the weights of `gates` blocks of H and the input term."""

    def __init__(self, owner: str, input_size: int, hidden_size: int, gates: int, bias: bool,
                 device: Device | None, dtype: str):
        super().__init__()
        self.input_size = n_in = check_size(owner, "input_size", input_size)
        self.hidden_size = H = check_size(owner, "hidden_size", hidden_size)
        self.bias = bias = flag(owner, "bias", bias)  # (bias="no" is true to Python)
        k = math.sqrt(1 / H)
        # the course's draw order: W_ih, W_hh, bias_ih, bias_hh
        self.W_ih = _uniform(n_in, gates * H, k=k, device=device, dtype=dtype)
        self.W_hh = _uniform(H, gates * H, k=k, device=device, dtype=dtype)
        self.bias_ih = _uniform(gates * H, k=k, device=device, dtype=dtype) if bias else None
        self.bias_hh = _uniform(gates * H, k=k, device=device, dtype=dtype) if bias else None

    def input_terms(self, steps: list[Tensor]) -> list[Tensor]:
        """X_t @ W_ih + bias_ih + bias_hh for each X_t (B, input_size): the steps' parts
        without h, the two biases added as one (G*H,) vector (broadcast over B)."""
        if self.bias_ih is None:
            return [x @ self.W_ih for x in steps]
        b = self.bias_ih + self.bias_hh
        return [x @ self.W_ih + b for x in steps]

    def sequence_terms(self, X: Tensor) -> list[Tensor]:
        """The input terms of all steps of X (T, B, input_size) from one product (one
        Affine node), as T (B, G*H) Tensors."""
        if self.bias_ih is None:
            xw = X @ self.W_ih
        else:
            xw = ops.affine(X, self.W_ih, self.bias_ih + self.bias_hh)
        return list(ops.split(xw, 0))

    def zero_state(self, xw: Tensor, h: Tensor | None) -> Tensor | None:
        """`h`, or for None zeros of (B, H) when a gradient is being recorded: the course
        (and PyTorch) multiply the zero state, so W_hh gets its (zero) gradient even from
        one step; without a graph the product adds nothing and is skipped."""
        if h is None and self.W_hh.requires_grad and is_grad_enabled():
            return init.zeros(xw.shape[0], self.hidden_size, device=xw.device, dtype=xw.dtype)
        return h

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(_Cell):
    """h' = act(X @ W_ih + bias_ih + h @ W_hh + bias_hh), act tanh or relu."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device: Device | None = None,
                 dtype: str = "float32"):
        if nonlinearity not in _ACTIVATIONS:
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', "
                             f"found {nonlinearity!r}")
        super().__init__("RNNCell", input_size, hidden_size, 1, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def step(self, xw: Tensor, h: Tensor | None) -> Tensor:
        """The next state from the input term `xw` (B, H) and the state h (None: zeros)."""
        h = self.zero_state(xw, h)
        if h is not None:
            xw = xw + h @ self.W_hh
        return _ACTIVATIONS[self.nonlinearity](xw)

    def forward(self, X: Tensor, h: Tensor | None = None) -> Tensor:
        """X (B, input_size), h (B, H) or None for zeros -> h' (B, H)."""
        _check_input("RNNCell", X, 2, self.input_size)
        if h is not None:
            _check_state("RNNCell", "h", h, (X.shape[0], self.hidden_size))
        return self.step(self.input_terms([X])[0], h)

    def extra_repr(self) -> str:
        act = "" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity}"
        return super().extra_repr() + act


class LSTMCell(_Cell):
    """i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the 4H gates; c' = f*c + i*g;
    h' = o * tanh(c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 device: Device | None = None, dtype: str = "float32"):
        super().__init__("LSTMCell", input_size, hidden_size, 4, bias, device, dtype)

    def step(self, xw: Tensor, h: Tensor | None, c: Tensor | None) -> tuple[Tensor, Tensor]:
        """(h', c') from the input term `xw` (B, 4H) and the state (None: zeros)."""
        h = self.zero_state(xw, h)
        if h is not None:
            xw = xw + h @ self.W_hh
        c = ops.lstm_cell_state(xw, c)  # two fused nodes (needle/ops/lstm.py)
        return ops.lstm_cell_output(xw, c), c

    def forward(self, X: Tensor, h: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor]:
        """X (B, input_size), h None (zeros) or (h0, c0) each (B, H) -> (h', c')."""
        _check_input("LSTMCell", X, 2, self.input_size)
        if h is None:
            return self.step(self.input_terms([X])[0], None, None)
        h0, c0 = _unpack_pair("LSTMCell", h)
        expected = (X.shape[0], self.hidden_size)
        _check_state("LSTMCell", "h0", h0, expected)
        _check_state("LSTMCell", "c0", c0, expected)
        return self.step(self.input_terms([X])[0], h0, c0)


def _unpack_pair(owner: str, h) -> tuple[Tensor, Tensor]:
    if not isinstance(h, (tuple, list)) or len(h) != 2:
        raise ValueError(f"{owner}: h must be None or a pair (h0, c0), "
                         f"found {type(h).__name__}")
    return h[0], h[1]


def _layer_inputs(cell: _Cell, X: Tensor | list[Tensor]) -> list[Tensor]:
    """The input term of every time step of X, a (T, B, n_in) Tensor or T (B, n_in) ones.

    One product over all T * B rows (`sequence_terms`), split into the T steps: split's
    adjoints are one-hot tuples the engine adds by picking, so backward stays linear in T
    (slicing with X[t] would give each step a dense (T, B, G*H) adjoint).
    """
    return cell.sequence_terms(X if isinstance(X, Tensor) else ops.stack(X, 0))


class _Stack(Module):
    """Sizes, checks and repr shared by RNN and LSTM."""

    batch_first: bool = False  # (the default for a stack pickled before the option existed)

    def __init__(self, owner: str, input_size: int, hidden_size: int, num_layers: int,
                 bias: bool, batch_first: bool):
        super().__init__()
        self.input_size = check_size(owner, "input_size", input_size)
        self.hidden_size = check_size(owner, "hidden_size", hidden_size)
        self.num_layers = check_size(owner, "num_layers", num_layers)
        self.bias = flag(owner, "bias", bias)
        self.batch_first = flag(owner, "batch_first", batch_first)

    def _time_major(self, X: Tensor, states: dict[str, Tensor | None]) -> Tensor:
        """X checked, with the states, and as (T, B, input_size): with batch_first the
        (B, T, input_size) input's first two axes swapped (a Transpose node)."""
        owner = type(self).__name__
        layout = "(B, T, input_size)" if self.batch_first else "(T, B, input_size)"
        _check_input(owner, X, 3, self.input_size, layout)
        T, B = X.shape[1::-1] if self.batch_first else X.shape[:2]
        if T == 0:
            raise ValueError(f"{owner}: expected a sequence length larger than 0, found an "
                             f"input of shape {tuple(X.shape)} {layout}")
        expected = (self.num_layers, B, self.hidden_size)
        for name, h in states.items():
            if h is not None:
                _check_state(owner, name, h, expected)
        return ops.transpose(X, (0, 1)) if self.batch_first else X

    def _output(self, outputs: list[Tensor]) -> Tensor:
        """The last layer's per-step outputs as (T, B, H), or (B, T, H) with batch_first
        (stacked on axis 1: the transpose back, without a node of its own)."""
        return ops.stack(outputs, 1 if self.batch_first else 0)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        text += "" if self.bias else ", bias=False"
        return text + (", batch_first=True" if self.batch_first else "")


class RNN(_Stack):
    """A stack of RNNCells over a sequence: X (T, B, input_size), or (B, T, input_size)
    with batch_first -> (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, nonlinearity: str = "tanh", device: Device | None = None,
                 dtype: str = "float32", batch_first: bool = False):
        super().__init__("RNN", input_size, hidden_size, num_layers, bias, batch_first)
        if nonlinearity not in _ACTIVATIONS:
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', "
                             f"found {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        self.rnn_cells = []
        for k in range(self.num_layers):  # built (and drawn) layer by layer
            n_in = self.input_size if k == 0 else self.hidden_size
            self.rnn_cells.append(RNNCell(n_in, self.hidden_size, bias, nonlinearity,
                                          device=device, dtype=dtype))

    def forward(self, X: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """X (T, B, input_size), h0 (L, B, H) or None for zeros -> output (T, B, H) of the
        last layer and h_n (L, B, H), the last state of every layer; with batch_first X is
        (B, T, input_size) and the output (B, T, H)."""
        X = self._time_major(X, {"h0": h0})
        h_n = []
        for k, cell in enumerate(self.rnn_cells):
            h = None if h0 is None else h0[k]
            outputs = []
            for xw in _layer_inputs(cell, X):
                h = cell.step(xw, h)
                outputs.append(h)
            h_n.append(h)
            X = outputs
        return self._output(X), ops.stack(h_n, 0)

    def extra_repr(self) -> str:
        act = "" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity}"
        return super().extra_repr() + act


class LSTM(_Stack):
    """A stack of LSTMCells over a sequence: X (T, B, input_size), or (B, T, input_size)
    with batch_first -> (output, (h_n, c_n))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, device: Device | None = None, dtype: str = "float32",
                 batch_first: bool = False):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first)
        self.lstm_cells = []
        for k in range(self.num_layers):  # built (and drawn) layer by layer
            n_in = self.input_size if k == 0 else self.hidden_size
            self.lstm_cells.append(LSTMCell(n_in, self.hidden_size, bias, device=device,
                                            dtype=dtype))

    def forward(self, X: Tensor, h: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """X (T, B, input_size), h None (zeros) or (h0, c0) each (L, B, H) -> output
        (T, B, H) of the last layer and (h_n, c_n), each (L, B, H); with batch_first X is
        (B, T, input_size) and the output (B, T, H)."""
        h0, c0 = (None, None) if h is None else _unpack_pair("LSTM", h)
        X = self._time_major(X, {"h0": h0, "c0": c0})
        h_n, c_n = [], []
        for k, cell in enumerate(self.lstm_cells):
            hk = None if h0 is None else h0[k]
            ck = None if c0 is None else c0[k]
            outputs = []
            for xw in _layer_inputs(cell, X):
                hk, ck = cell.step(xw, hk, ck)
                outputs.append(hk)
            h_n.append(hk)
            c_n.append(ck)
            X = outputs
        return self._output(X), (ops.stack(h_n, 0), ops.stack(c_n, 0))
