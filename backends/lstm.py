"""The LSTM cell on cuda, one elementwise kernel each (fast versions of needle.ops.lstm's
LSTM_STATE, LSTM_OUTPUT, LSTM_STATE_GRAD and LSTM_OUTPUT_GRAD).

One thread per (row b, unit j) of the (B, H) state reads the gates z (B, 4H) at b*4H + k*H + j.
The portable versions slice, compute a sigmoid as (tanh(x / 2) + 1) / 2, multiply and
concatenate with 5 to 15 small kernels per time step; these do the same roundings in the same
order (compiled without contracted multiply-adds), so the numbers are the same to the bit.
Packed adjoints are (B, 5H): [dz | dc].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of
from .dtype_names import dtype_name

_HEAD = """
const ptrdiff_t b = i / H, j = i - b * H;
const ptrdiff_t r = b * 4 * H + j;
"""
_SIGMOID = "(tanh({x} * (T)0.5) + (T)1) * (T)0.5"

#: name -> (in params, out params, body)
_KERNELS = {
    "lstm_state": ("raw T z, T c, int64 H", "T res", _HEAD + f"""
T si = {_SIGMOID.format(x="z[r]")};
T sf = {_SIGMOID.format(x="z[r + H]")};
T ig = si * tanh(z[r + 2 * H]);
T fc = sf * c;
res = fc + ig;
"""),
    "lstm_state_no_c": ("raw T z, int64 H", "T res", _HEAD + f"""
T si = {_SIGMOID.format(x="z[r]")};
res = si * tanh(z[r + 2 * H]);
"""),
    "lstm_output": ("raw T z, T c, int64 H", "T res", _HEAD + f"""
T so = {_SIGMOID.format(x="z[r + 3 * H]")};
res = so * tanh(c);
"""),
    "lstm_state_grad": ("raw T z, T c, T g, int64 H, bool has_c", "raw T res", _HEAD + f"""
const ptrdiff_t w = b * 5 * H + j;
T si = {_SIGMOID.format(x="z[r]")};
T sf = {_SIGMOID.format(x="z[r + H]")};
T t = tanh(z[r + 2 * H]);
res[w] = g * t * si * ((T)1 - si);
res[w + H] = has_c ? g * c * sf * ((T)1 - sf) : (T)0;
res[w + 2 * H] = g * si * ((T)1 - t * t);
res[w + 3 * H] = (T)0;
res[w + 4 * H] = g * sf;
"""),
    "lstm_output_grad": ("raw T z, T c, T g, int64 H", "raw T res", _HEAD + f"""
const ptrdiff_t w = b * 5 * H + j;
T so = {_SIGMOID.format(x="z[r + 3 * H]")};
T t = tanh(c);
res[w] = (T)0;
res[w + H] = (T)0;
res[w + 2 * H] = (T)0;
res[w + 3 * H] = g * t * so * ((T)1 - so);
res[w + 4 * H] = g * so * ((T)1 - t * t);
"""),
}


def _kernel(gpu: Any, name: str) -> Any:
    return gpu.elementwise_kernel(name, *_KERNELS[name], exact=True)


def _fits(z: Any, *others: Any) -> bool:
    """float32 or float64 arrays of one dtype, z (B, 4H) and the others (B, H)."""
    if z.ndim != 2 or dtype_name(z.dtype) not in ("float32", "float64") or z.shape[1] % 4:
        return False
    shape = (z.shape[0], z.shape[1] // 4)
    return all(o.dtype == z.dtype and tuple(o.shape) == shape for o in others)


def lstm_state_cuda(z: Any, c: Any) -> Any:
    """f * c + i * g (or i * g without c) in one kernel."""
    if not _fits(z, *(() if c is None else (c,))):
        return NotImplemented
    gpu = device_of(z)
    cp = gpu.cupy
    hidden = np.int64(z.shape[1] // 4)
    with gpu.current:
        z = cp.ascontiguousarray(z)
        if c is None:
            out = cp.empty((z.shape[0], z.shape[1] // 4), dtype=z.dtype)
            return _kernel(gpu, "lstm_state_no_c")(z, hidden, out)
        return _kernel(gpu, "lstm_state")(z, c, hidden)


def lstm_output_cuda(z: Any, c: Any) -> Any:
    """o * tanh(c) in one kernel."""
    if not _fits(z, c):
        return NotImplemented
    gpu = device_of(z)
    with gpu.current:
        return _kernel(gpu, "lstm_output")(gpu.cupy.ascontiguousarray(z), c,
                                           np.int64(z.shape[1] // 4))


def _packed(name: str, z: Any, *args: Any) -> Any:
    """The (B, 5H) packed [dz | dc] that kernel `name` writes from z and `args`."""
    gpu = device_of(z)
    cp = gpu.cupy
    with gpu.current:
        z = cp.ascontiguousarray(z)
        out = cp.empty((z.shape[0], z.shape[1] // 4 * 5), dtype=z.dtype)
        _kernel(gpu, name)(z, *args, out)
        return out


def lstm_state_grad_cuda(z: Any, c: Any, g: Any) -> Any:
    """The packed [dz | dc] of lstm_cell_state in one kernel."""
    if not _fits(z, g, *(() if c is None else (c,))):
        return NotImplemented
    return _packed("lstm_state_grad", z, g if c is None else c, g, np.int64(z.shape[1] // 4),
                   np.bool_(c is not None))


def lstm_output_grad_cuda(z: Any, c: Any, g: Any) -> Any:
    """The packed [dz | dc] of lstm_cell_output in one kernel."""
    if not _fits(z, c, g):
        return NotImplemented
    return _packed("lstm_output_grad", z, c, g, np.int64(z.shape[1] // 4))
