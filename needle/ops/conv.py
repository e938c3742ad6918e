"""Convolution (NHWC or NCHW input, (K, K, C_in, C_out) weights).

`conv` is one op: the input's K×K windows gathered into columns ("im2col", im2col.py) and
contracted with the weights in one matmul. Its adjoints are two more ops, each also linear in
both of its inputs, so that the three differentiate into each other and every order works:

    d a = ConvInputGrad(g, weight) = col2im(g @ weight^T)
    d weight = ConvWeightGrad(a, g) = im2col(a)^T @ g

`ConvGrads` computes both (and the bias's, `BiasGrad`) in one op where a layer's backward
needs them all. Each computes through a kernel (CONV, CONV_INPUT_GRAD, CONV_WEIGHT_GRAD,
CONV_GRADS) whose reference is the im2col formulation; torch and jax run their own
convolution (cuDNN on a GPU).
"""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor, TensorOp
from ..autograd.tensor_tuple import TensorTupleOp
from ..backends import namespace
from ..kernels import ADD_TO_FRESH, SUM, Kernel
from .axes import int_at_least
from .dtypes import PromotingOp, check_not_bool, is_bool
from .im2col import COL2IM, _kernel, _out_size, im2col_array
from .linalg import MATMUL
from .movement import broadcast_to, reshape

#: the two layouts of a convolution's input and output: NHWC (ops.conv's, the course's) and
#: NCHW (nn.Conv's, which then needs no permute nodes around the op); weights are (K, K, C_in,
#: C_out) in both
LAYOUTS = ("NHWC", "NCHW")


def _nhwc(xp, a, layout: str):
    """`a` as an NHWC array (an NCHW one: a permuted view, no copy)."""
    return a if layout == "NHWC" else xp.permute_dims(a, (0, 2, 3, 1))


def _from_nhwc(xp, a, layout: str):
    """An NHWC array `a` in `layout` (NCHW: a permuted view)."""
    return a if layout == "NHWC" else xp.permute_dims(a, (0, 3, 1, 2))


def _nhwc_shape(shape: tuple, layout: str) -> tuple:
    """A 4-D shape in `layout` as the NHWC shape of the same array."""
    return tuple(shape) if layout == "NHWC" else (shape[0], shape[2], shape[3], shape[1])


def conv_portable(a: Any, b: Any, bias: Any, stride: int, padding: int,
                  layout: str = "NHWC") -> tuple[Any, Any]:
    """(out, windows): `a` (NHWC, or NCHW with `layout`) cross-correlated with (K, K, C_in,
    C_out) `b`, plus `bias` (C_out,) or None, as im2col and one matmul, out in a's layout;
    the windows (of the NHWC input) are what the weight's gradient reads again (a fast
    version that gathers none returns None for them)."""
    xp = namespace(a)
    kh, kw, c_in, c_out = b.shape
    cols = im2col_array(_nhwc(xp, a, layout), (kh, kw), stride, padding)
    n, ho, wo, depth = cols.shape
    out = MATMUL(xp.reshape(cols, (n * ho * wo, depth)), xp.reshape(b, (depth, c_out)))
    if bias is not None:  # into the product's fresh array (in place where allowed)
        out = ADD_TO_FRESH(out, bias)
    return _from_nhwc(xp, xp.reshape(out, (n, ho, wo, c_out)), layout), cols


def conv_input_grad_portable(g: Any, b: Any, shape: tuple, stride: int, padding: int,
                             layout: str = "NHWC") -> Any:
    """conv's adjoint in its input, an array of `shape` in `layout`, for the output's adjoint
    `g` (in that layout): one batched matmul straight into tap-major windows,
    g (1, M, C_out) @ b[t]^T, which the COL2IM kernel adds back (each tap one contiguous
    block)."""
    xp = namespace(g)
    kh, kw, c_in, c_out = b.shape
    g = _nhwc(xp, g, layout)
    n, ho, wo, _ = g.shape
    taps = MATMUL(xp.reshape(g, (1, n * ho * wo, c_out)),
                  xp.matrix_transpose(xp.reshape(b, (kh * kw, c_in, c_out))))
    return _from_nhwc(xp, COL2IM(xp.reshape(taps, (kh * kw, n, ho, wo, c_in)),
                                 _nhwc_shape(shape, layout), (kh, kw), stride, padding), layout)


def conv_weight_grad_portable(a: Any, g: Any, kernel: tuple[int, int], stride: int,
                              padding: int, cols: Any = None, layout: str = "NHWC") -> Any:
    """conv's adjoint in its (K, K, C_in, C_out) weights for input `a` and the output's
    adjoint `g` (both in `layout`): im2col(a)^T @ g, reusing `cols` (the forward's windows
    of `a`) when given."""
    xp = namespace(g)
    a, g = _nhwc(xp, a, layout), _nhwc(xp, g, layout)
    if cols is None:
        cols = im2col_array(a, kernel, stride, padding)
    n, ho, wo, depth = cols.shape
    c_out = g.shape[-1]
    out = MATMUL(xp.matrix_transpose(xp.reshape(cols, (n * ho * wo, depth))),
                 xp.reshape(g, (n * ho * wo, c_out)))
    return xp.reshape(out, (kernel[0], kernel[1], a.shape[-1], c_out))


def _bias_grad(xp, g, layout: str):
    """The bias's adjoint: g summed over N, H and W (NHWC: as (N*H*W, C) rows)."""
    if layout == "NCHW":
        return SUM(g, (0, 2, 3))
    n, h, w, c = g.shape  # (no -1: it is ambiguous for no channels)
    return SUM(xp.reshape(g, (n * h * w, c)), (0,))


def conv_grads_portable(g: Any, a: Any, b: Any, stride: int, padding: int, cols: Any = None,
                        layout: str = "NHWC", bias: bool = False) -> tuple[Any, ...]:
    """(input's adjoint, weights' adjoint[, bias's adjoint]) for the output's adjoint `g`:
    CONV_INPUT_GRAD's, CONV_WEIGHT_GRAD's (reusing `cols`) and, with `bias`, g summed over N,
    H and W (the numbers of the three separate adjoints)."""
    xp = namespace(g)
    da = CONV_INPUT_GRAD(g, b, tuple(a.shape), stride, padding, layout)
    db = CONV_WEIGHT_GRAD(a, g, tuple(b.shape[:2]), stride, padding, cols, layout)
    return (da, db, _bias_grad(xp, g, layout)) if bias else (da, db)


#: the convolution and its two adjoints: on torch and jax the library's own convolution
#: (cuDNN on a GPU), which sums in another order than im2col and a matmul
CONV = Kernel("conv", conv_portable, fast={"torch": "needle.backends.conv_torch:conv_torch",
                                           "jax": "needle.backends.conv_jax:conv_jax"})
CONV_INPUT_GRAD = Kernel("conv_input_grad", conv_input_grad_portable,
                         fast={"torch": "needle.backends.conv_torch:conv_input_grad_torch",
                               "jax": "needle.backends.conv_jax:conv_input_grad_jax"})
CONV_WEIGHT_GRAD = Kernel("conv_weight_grad", conv_weight_grad_portable,
                          fast={"torch": "needle.backends.conv_torch:conv_weight_grad_torch",
                                "jax": "needle.backends.conv_jax:conv_weight_grad_jax"})
#: all of a convolution's adjoints at once: on torch one convolution backward for the input,
#: the weights and the bias (as PyTorch's own step), where the three make three calls
CONV_GRADS = Kernel("conv_grads", conv_grads_portable,
                    fast={"torch": "needle.backends.conv_torch:conv_grads_torch"})


def _layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"conv: layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


class Conv(PromotingOp):
    """2-D cross-correlation of `a` (NHWC, or NCHW with `layout`) with (K, K, C_in, C_out)
    `b`: out in a's layout.

    Conv and its two adjoints, ConvInputGrad and ConvWeightGrad, are each linear in both
    inputs, and each one's gradient is made of the other two (so every order works).
    """

    op_name = "conv"

    def __init__(self, stride: int = 1, padding: int = 0, layout: str = "NHWC"):
        self.stride = int_at_least("conv", "stride", stride, 1)
        self.padding = int_at_least("conv", "padding", padding, 0)
        self.layout = _layout(layout)

    def _check(self, a_shape: tuple, b_shape: tuple) -> None:
        layout = self.layout
        if len(a_shape) != 4 or len(b_shape) != 4:
            raise ValueError(f"conv: expected an {layout} input and (K, K, C_in, C_out) "
                             f"weights, found shapes {a_shape} and {b_shape}")
        channels = a_shape[3 if layout == "NHWC" else 1]
        if channels != b_shape[2]:
            raise ValueError(f"conv: the input has {channels} channels ({layout} shape "
                             f"{a_shape}) but the weights expect {b_shape[2]} (shape {b_shape})")
        for size, k in zip(_nhwc_shape(a_shape, layout)[1:3], b_shape[:2]):
            _out_size("conv", size, k, self.stride, self.padding, a_shape, b_shape[:2], layout)

    saves = True  # (input, its windows): the weight's gradient needs the windows again

    def compute(self, a, b, bias=None):
        return self.forward(a, b, bias)[0]

    def forward(self, a, b, bias=None):
        a_shape, b_shape = tuple(a.shape), tuple(b.shape)
        self._check(a_shape, b_shape)
        if is_bool(a):  # (numpy and jax gave bools, torch and strict refused them)
            check_not_bool("conv", a)
        if bias is not None and tuple(bias.shape) != (b_shape[3],):
            raise ValueError(f"conv: the bias must have shape ({b_shape[3]},) for weights of "
                             f"shape {b_shape}, found {tuple(bias.shape)}")
        out, cols = CONV(a, b, bias, self.stride, self.padding, self.layout)
        return out, (None if cols is None else (a, cols))

    def gradient(self, out_grad, node):
        a, b = node.inputs[:2]
        needs = node.needs_input_grad
        stride, padding, layout = self.stride, self.padding, self.layout
        if needs[0] and needs[1]:  # every adjoint a layer's backward needs, in one op
            bias = len(node.inputs) == 3 and needs[2]
            parts = ConvGrads(stride, padding, layout, node.saved, bias)(out_grad, a, b)
            return (parts[0], parts[1]) + ((parts[2],) if bias else (None,) * (
                len(node.inputs) - 2))
        grad_a = grad_b = None
        if needs[0]:
            grad_a = ConvInputGrad(a.shape, stride, padding, layout)(out_grad, b)
        if needs[1]:
            grad_b = ConvWeightGrad(b.shape[:2], stride, padding, node.saved, layout)(
                a, out_grad)
        if len(node.inputs) == 2:
            return grad_a, grad_b
        if not needs[2]:
            return grad_a, grad_b, None
        return grad_a, grad_b, BiasGrad(layout)(out_grad)


class BiasGrad(TensorOp):
    """A convolution bias's adjoint: the output's adjoint summed over N, H and W."""

    def __init__(self, layout: str = "NHWC"):
        self.layout = _layout(layout)

    def compute(self, g):
        return _bias_grad(namespace(g), g, self.layout)

    def gradient(self, out_grad, node):
        shape = tuple(node.inputs[0].shape)
        along = (1, -1, 1, 1) if self.layout == "NCHW" else (1, 1, 1, -1)
        return broadcast_to(reshape(out_grad, along), shape)


class ConvGrads(TensorTupleOp):
    """All of conv's adjoints in one op: (the output's adjoint g, input a, weights b) ->
    (the input's, the weights' and, with `bias`, the bias's adjoint), in `layout`; `saved`
    is (input, its windows) of the forward, reused for that very input.

    Their gradient: d<CIG(g, b), ha>/dg = Conv(ha, b), /db = CWG(ha, g); d<CWG(a, g), hb>/dg
    = Conv(a, hb), /da = CIG(g, hb); the bias's sum's adjoint hc adds along the channels of g
    (Conv's own bias)."""

    def __init__(self, stride: int, padding: int, layout: str = "NHWC",
                 saved: tuple | None = None, bias: bool = False):
        self.stride = int_at_least("conv", "stride", stride, 1)
        self.padding = int_at_least("conv", "padding", padding, 0)
        self.layout = _layout(layout)
        self.saved = saved
        self.bias = bool(bias)

    def compute(self, g, a, b):
        saved = self.saved
        cols = saved[1] if saved is not None and saved[0] is a else None
        return CONV_GRADS(g, a, b, self.stride, self.padding, cols, self.layout, self.bias)

    def gradient(self, out_grad, node):
        g, a, b = node.inputs
        need_g, need_a, need_b = node.needs_input_grad
        stride, padding, layout = self.stride, self.padding, self.layout
        ha, hb = out_grad[0], out_grad[1]
        grad_g = None
        if need_g:
            conv = Conv(stride, padding, layout)
            grad_g = (conv(ha, b, out_grad[2]) if self.bias else conv(ha, b)) + conv(a, hb)
        return (grad_g,
                ConvInputGrad(a.shape, stride, padding, layout)(g, hb) if need_a else None,
                ConvWeightGrad(b.shape[:2], stride, padding, None, layout)(ha, g)
                if need_b else None)


class ConvInputGrad(PromotingOp):
    """conv's adjoint in its input: (the output's adjoint g, weights b) -> an array of the
    input's `shape`, in `layout` (g's too)."""

    op_name = "conv"

    def __init__(self, shape: tuple, stride: int, padding: int, layout: str = "NHWC"):
        self.shape = tuple(shape)
        self.stride = int_at_least("conv", "stride", stride, 1)
        self.padding = int_at_least("conv", "padding", padding, 0)
        self.layout = _layout(layout)

    def compute(self, g, b):
        return CONV_INPUT_GRAD(g, b, self.shape, self.stride, self.padding, self.layout)

    def gradient(self, out_grad, node):
        g, b = node.inputs
        needs = node.needs_input_grad
        stride, padding, layout = self.stride, self.padding, self.layout
        return (Conv(stride, padding, layout)(out_grad, b) if needs[0] else None,
                ConvWeightGrad(b.shape[:2], stride, padding, None, layout)(out_grad, g)
                if needs[1] else None)


class ConvWeightGrad(PromotingOp):
    """conv's adjoint in its weights: (input a, the output's adjoint g, both in `layout`) ->
    (K, K, C_in, C_out) for the `kernel` (K, K); `saved` is (input, its windows) of the
    forward, reused for that very input."""

    op_name = "conv"

    def __init__(self, kernel: tuple[int, int], stride: int, padding: int,
                 saved: tuple | None = None, layout: str = "NHWC"):
        self.kernel = _kernel("conv", kernel)
        self.stride = int_at_least("conv", "stride", stride, 1)
        self.padding = int_at_least("conv", "padding", padding, 0)
        self.saved = saved
        self.layout = _layout(layout)

    def compute(self, a, g):
        saved = self.saved
        cols = saved[1] if saved is not None and saved[0] is a else None
        return CONV_WEIGHT_GRAD(a, g, self.kernel, self.stride, self.padding, cols, self.layout)

    def gradient(self, out_grad, node):
        a, g = node.inputs
        needs = node.needs_input_grad
        stride, padding, layout = self.stride, self.padding, self.layout
        return (ConvInputGrad(a.shape, stride, padding, layout)(g, out_grad)
                if needs[0] else None,
                Conv(stride, padding, layout)(a, out_grad) if needs[1] else None)


def conv(a: Tensor, b: Tensor, stride: int = 1, padding: int = 1,
         bias: Tensor | None = None) -> Tensor:
    """Cross-correlate NHWC `a` with (K, K, C_in, C_out) `b`, zero-padding H and W by
    `padding`, plus `bias` (C_out,) when given (in the same node)."""
    if bias is None:
        return Conv(stride, padding)(a, b)
    return Conv(stride, padding)(a, b, bias)
