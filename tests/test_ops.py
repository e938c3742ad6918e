"""Every op: forward against numpy (float64) and backward against finite differences."""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import needle as ndl
from needle import autograd
from needle.ops.embedding import index_tensor
from needle.testing import check_gradients


@dataclass
class Case:
    id: str
    fn: Callable  # on needle Tensors
    ref: Callable  # the same on numpy arrays
    shapes: list
    positive: bool = False  # draw inputs from [0.5, 2) instead of N(0, 1)
    exact: bool = False  # the forward equals numpy's to the bit (pure data movement)
    kwargs: dict = field(default_factory=dict)

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        if self.positive:
            return [rng.uniform(0.5, 2.0, size=s) for s in self.shapes]
        # keep away from 0 so relu/max/abs kinks are far from the finite-difference probes
        out = []
        for s in self.shapes:
            x = rng.standard_normal(size=s)
            out.append(np.where(np.abs(x) < 0.1, x + np.sign(x) * 0.2 + 0.1, x))
        return out


def np_logsumexp(a, axis=None):
    m = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m, axis=axis)


def np_dilate(a, axes, d):
    for ax in axes:
        shape = list(a.shape)
        shape[ax] *= d + 1
        out = np.zeros(shape)
        idx = [slice(None)] * a.ndim
        idx[ax] = slice(None, None, d + 1)
        out[tuple(idx)] = a
        a = out
    return a


def np_conv(a, b, stride=1, padding=0):
    """NHWC cross-correlation, one einsum per kernel offset (independent of needle's im2col)."""
    a = np.pad(a, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    k0, k1 = b.shape[:2]
    ho = (a.shape[1] - k0) // stride + 1
    wo = (a.shape[2] - k1) // stride + 1
    out = np.zeros((a.shape[0], ho, wo, b.shape[3]))
    for i in range(k0):
        for j in range(k1):
            window = a[:, i:i + stride * ho:stride, j:j + stride * wo:stride, :]
            out += np.einsum("nhwc,co->nhwo", window[:, :ho, :wo], b[i, j])
    return out


def np_im2col(a, k, stride, padding):
    a = np.pad(a, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    ho = (a.shape[1] - k) // stride + 1
    wo = (a.shape[2] - k) // stride + 1
    out = np.zeros((a.shape[0], ho, wo, k, k, a.shape[3]))
    for y in range(ho):
        for x in range(wo):
            out[:, y, x] = a[:, y * stride:y * stride + k, x * stride:x * stride + k, :]
    return out.reshape(a.shape[0], ho, wo, -1)


def np_col2im(cols, shape, k, stride, padding):
    n, h, w, c = shape
    out = np.zeros((n, h + 2 * padding, w + 2 * padding, c))
    cols = cols.reshape(cols.shape[:3] + (k, k, c))
    for y in range(cols.shape[1]):
        for x in range(cols.shape[2]):
            out[:, y * stride:y * stride + k, x * stride:x * stride + k, :] += cols[:, y, x]
    return out[:, padding:padding + h, padding:padding + w, :]


def np_unfold2d(a, k, s):
    v = np.lib.stride_tricks.sliding_window_view(a, (k, k), axis=(-2, -1))[..., ::s, ::s, :, :]
    return np.moveaxis(v, (-2, -1), (0, 1)).reshape((k * k,) + v.shape[:-2])


def np_fold2d(t, k, s, size):
    out = np.zeros(t.shape[1:-2] + tuple(size))
    ho, wo = t.shape[-2:]
    for p in range(k * k):
        i, j = divmod(p, k)
        out[..., i:i + s * (ho - 1) + 1:s, j:j + s * (wo - 1) + 1:s] += t[p]
    return out


DRAWS = np.random.default_rng(1).random((3, 4))  # Dropout's uniform draws, some above 0.7
LABELS = np.array([2, 0, 3])


def labels_on(t):
    return t.device.asarray(LABELS, dtype="int64")


def np_softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_softmax_last(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_causal_softmax(a, temperature):
    """Softmax of a / temperature over the last axis, keys after their query masked out: the
    course's triu(ones(i, j), j - i + 1), its i queries being the last i of the j keys."""
    i, j = a.shape[-2:]
    return np_softmax_last(a / temperature - np.triu(np.full((i, j), np.inf), j - i + 1))


def np_add_at(index, values, n):
    """Rows of `values` summed into n rows at `index` (numpy's unbuffered scatter-add)."""
    out = np.zeros((n,) + values.shape[np.ndim(index):])
    np.add.at(out, index, values)
    return out


SEGMENTS = [[1, 1], [0, 3]]


def np_scatter(a, index, shape):
    out = np.zeros(shape)
    out[index] = a
    return out


def np_normalize(a, axes, eps=1e-5):
    c = a - a.mean(axis=axes, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=axes, keepdims=True) + eps)


def np_conv_grads(g, a, b):
    """(da, db, dbias) of a stride-2, padding-1 conv of NHWC a (2, 7, 6, 2) with b (3, 3, 2,
    3) for the output's adjoint g (2, 4, 3, 3), as the conv_input_grad and conv_weight_grad
    cases compute them."""
    da = np_col2im(g @ b.reshape(-1, 3).T, a.shape, 3, 2, 1)
    db = (np_im2col(a, 3, 2, 1).reshape(-1, 18).T @ g.reshape(-1, 3)).reshape(3, 3, 2, 3)
    return da, db, g.sum((0, 1, 2))


def np_batch_norm(x, w, b):
    """x standardised over every axis but 1, times w plus b along axis 1."""
    along = (-1,) + (1,) * (x.ndim - 2)
    return np_normalize(x, (0, *range(2, x.ndim))) * w.reshape(along) + b.reshape(along)


def np_batch_norm_grad(x, w, g):
    """(dx, dw, db) of np_batch_norm for the output's adjoint g, combined as in the case:
    dx + 3 dw + db (a 2-d x: the (C,) vectors broadcast along its rows)."""
    axes = (0,)
    dx = np_normalize_grad(x, g * w, axes, 1e-5)
    return dx + 3.0 * (g * np_normalize(x, axes)).sum(0) + g.sum(0)


def np_layer_norm_grad(x, w, g):
    """(dx, dw, db) of LayerNorm over the last axis of a 2-d x, combined as dx + 3 dw + db."""
    dx = np_normalize_grad(x, g * w, (1,), 1e-5)
    return dx + 3.0 * (g * np_normalize(x, (1,))).sum(0) + g.sum(0)


def np_normalize_grad(x, g, axes, eps):
    """The vector-Jacobian product of np_normalize, by the chain rule written out by hand."""
    n = np.prod([x.shape[a] for a in axes])
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    # y = (x - mu) inv: through (x - mu) directly, through mu, and through var
    d_var = np.sum(g * (x - mu), axis=axes, keepdims=True) * -0.5 * inv**3
    d_mu = -np.sum(g * inv, axis=axes, keepdims=True)
    return g * inv + d_var * 2 * (x - mu) / n + d_mu / n


def np_sig(a):
    return 1 / (1 + np.exp(-a))


def np_lstm_state(z, c=None):
    i, f, g = np_sig(z[:, :2]), np_sig(z[:, 2:4]), np.tanh(z[:, 4:6])
    return i * g if c is None else f * c + i * g


def np_lstm_state_grad(z, c, g):
    """[dz | dc] of np_lstm_state for the output adjoint g (H = 2): c None for zeros."""
    i, f, t = np_sig(z[:, :2]), np_sig(z[:, 2:4]), np.tanh(z[:, 4:6])
    df = 0 * g if c is None else g * c * f * (1 - f)
    return np.concatenate([g * t * i * (1 - i), df, g * i * (1 - t * t), 0 * g, g * f], 1)


def np_lstm_output_grad(z, c, g):
    o, t = np_sig(z[:, 6:]), np.tanh(c)
    zero = 0 * g
    return np.concatenate([zero, zero, zero, g * t * o * (1 - o), g * o * (1 - t * t)], 1)


CASES = [
    # elementwise, with tensors and with scalars
    Case("add", lambda a, b: a + b, np.add, [(3, 4), (3, 4)]),
    Case("add_bcast_row", lambda a, b: a + b, np.add, [(3, 4), (4,)]),
    Case("add_bcast_both", ndl.add, np.add, [(2, 1, 4), (3, 1)]),
    Case("add_scalar", lambda a: a + 2.5, lambda a: a + 2.5, [(3, 4)]),
    Case("radd_scalar", lambda a: 2.5 + a, lambda a: 2.5 + a, [(3, 4)]),
    Case("sub", lambda a, b: a - b, np.subtract, [(3, 4), (3, 1)]),
    Case("rsub_scalar", lambda a: 1.5 - a, lambda a: 1.5 - a, [(3, 4)]),
    Case("multiply", ndl.multiply, np.multiply, [(3, 4), (3, 4)]),
    Case("multiply_bcast", lambda a, b: a * b, np.multiply, [(2, 3, 4), (1, 4)]),
    Case("mul_scalar", lambda a: a * -3.0, lambda a: a * -3.0, [(3, 4)]),
    Case("divide", ndl.divide, np.divide, [(3, 4), (3, 4)], positive=True),
    Case("divide_bcast", lambda a, b: a / b, np.divide, [(3, 4), (4,)], positive=True),
    Case("divide_bcast_left", lambda a, b: a / b, np.divide, [(4,), (3, 1)], positive=True),
    Case("divide_scalar", lambda a: a / 4.0, lambda a: a / 4.0, [(3, 4)]),
    Case("rdiv_scalar", lambda a: 2.0 / a, lambda a: 2.0 / a, [(3, 4)], positive=True),
    Case("power", ndl.power, np.power, [(3, 4), (3, 4)], positive=True),
    Case("power_bcast", lambda a, b: a**b, np.power, [(3, 4), (4,)], positive=True),
    Case("power_bcast_left", ndl.power, np.power, [(4,), (3, 4)], positive=True),
    Case("power_scalar", lambda a: a**3, lambda a: a**3, [(3, 4)]),
    Case("power_scalar_neg", lambda a: ndl.power_scalar(a, -2), lambda a: a**-2.0, [(3, 4)],
         positive=True),
    Case("power_scalar_frac", lambda a: a**0.5, np.sqrt, [(3, 4)], positive=True),
    Case("rpow_scalar", lambda a: 2.0**a, lambda a: 2.0**a, [(3, 4)]),
    Case("rpower_scalar", lambda a: ndl.rpower_scalar(a, 3.0), lambda a: 3.0**a, [(3, 4)]),
    Case("negate", ndl.negate, np.negative, [(3, 4)]),
    Case("log", ndl.log, np.log, [(3, 4)], positive=True),
    Case("exp", ndl.exp, np.exp, [(3, 4)]),
    Case("sqrt", ndl.ops.sqrt, np.sqrt, [(3, 4)], positive=True),
    Case("relu", ndl.relu, lambda a: np.maximum(a, 0), [(3, 4)]),
    Case("tanh", ndl.tanh, np.tanh, [(3, 4)]),
    Case("sigmoid", ndl.sigmoid, lambda a: 1 / (1 + np.exp(-a)), [(3, 4)]),
    # movement
    Case("reshape", lambda a: ndl.reshape(a, (2, 6)), lambda a: a.reshape(2, 6), [(3, 4)]),
    Case("reshape_infer", lambda a: a.reshape((-1, 3)), lambda a: a.reshape(-1, 3),
         [(2, 3, 2)]),
    Case("broadcast_to", lambda a: ndl.broadcast_to(a, (2, 3, 4)),
         lambda a: np.broadcast_to(a, (2, 3, 4)), [(3, 1)]),
    Case("broadcast_to_row", lambda a: a.broadcast_to((3, 4)),
         lambda a: np.broadcast_to(a, (3, 4)), [(4,)]),
    Case("transpose", ndl.transpose, lambda a: np.swapaxes(a, -1, -2), [(2, 3, 4)]),
    Case("transpose_axes", lambda a: ndl.transpose(a, (0, 2)),
         lambda a: np.swapaxes(a, 0, 2), [(2, 3, 4)]),
    Case("transpose_neg_axes", lambda a: a.transpose((-1, -3)),
         lambda a: np.swapaxes(a, -1, -3), [(2, 3, 4)]),
    Case("permute", lambda a: ndl.permute(a, (2, 0, 1)),
         lambda a: np.transpose(a, (2, 0, 1)), [(2, 3, 4)]),
    Case("flip", lambda a: ndl.flip(a, (0, 2)), lambda a: np.flip(a, (0, 2)), [(2, 3, 4)]),
    Case("dilate", lambda a: ndl.dilate(a, (0, 2), 2), lambda a: np_dilate(a, (0, 2), 2),
         [(2, 3, 2)]),
    Case("undilate", lambda a: ndl.undilate(a, (1,), 1), lambda a: a[:, ::2], [(2, 6)]),
    Case("undilate_ragged", lambda a: ndl.undilate(a, (0, 1), 2), lambda a: a[::3, ::3],
         [(5, 4)], exact=True),  # lengths that are no multiple of the step
    Case("getitem_int", lambda a: a[1], lambda a: a[1], [(3, 4)]),
    Case("getitem_slices", lambda a: a[1:, ::2], lambda a: a[1:, ::2], [(3, 5)]),
    Case("getitem_mixed", lambda a: a[-1, ..., 1:3], lambda a: a[-1, ..., 1:3],
         [(2, 3, 4)]),
    Case("getitem_out_of_range", lambda a: a[1:100, -9:2], lambda a: a[1:100, -9:2],
         [(3, 4)], exact=True),
    Case("getitem_neg_step", lambda a: a[::-2, 1, 3:0:-2], lambda a: a[::-2, 1, 3:0:-2],
         [(5, 3, 4)]),
    Case("scatter_item", lambda a: ndl.ScatterItem((1, slice(None, None, -2)), (3, 5))(a),
         lambda a: np_scatter(a, (1, slice(None, None, -2)), (3, 5)), [(3,)]),
    # reductions
    Case("sum_all", ndl.summation, np.sum, [(3, 4)]),
    Case("sum_axis", lambda a: ndl.summation(a, 1), lambda a: np.sum(a, 1), [(3, 4)]),
    Case("sum_neg_axis", lambda a: a.sum(-1), lambda a: np.sum(a, -1), [(2, 3, 4)]),
    Case("sum_tuple", lambda a: a.sum((0, 2)), lambda a: np.sum(a, (0, 2)), [(2, 3, 4)]),
    Case("sum_list", lambda a: a.sum([-1, 0]), lambda a: np.sum(a, (0, 2)), [(2, 3, 4)]),
    Case("sum_to_shape", lambda a: ndl.sum_to_shape(a, (3, 1)),
         lambda a: a.sum(0).sum(-1, keepdims=True), [(2, 3, 4)]),
    Case("max_all", ndl.max, np.max, [(3, 4)]),
    Case("max_axis", lambda a: ndl.max(a, 1), lambda a: np.max(a, 1), [(3, 4)]),
    Case("max_tuple_keepdims", lambda a: ndl.max(a, (0, 2), keepdims=True),
         lambda a: np.max(a, (0, 2), keepdims=True), [(2, 3, 4)]),
    Case("logsumexp_all", ndl.logsumexp, np_logsumexp, [(3, 4)]),
    Case("logsumexp_axis", lambda a: ndl.logsumexp(a, 1), lambda a: np_logsumexp(a, 1),
         [(3, 4)]),
    Case("logsumexp_tuple", lambda a: ndl.logsumexp(a, (0, 2)),
         lambda a: np_logsumexp(a, (0, 2)), [(2, 3, 4)]),
    Case("logsumexp_neg", lambda a: ndl.logsumexp(a, (-1,)), lambda a: np_logsumexp(a, -1),
         [(2, 3, 4)]),
    Case("logsoftmax", ndl.logsoftmax,
         lambda a: a - np_logsumexp(a, -1)[..., None], [(3, 5)]),
    Case("logsoftmax_axes", lambda a: ndl.logsoftmax(a, (0, 2)),
         lambda a: a - np_logsumexp(a, (0, 2))[None, :, None], [(2, 3, 4)]),
    # standardisation (the fused core of batch and layer norm) and its fused adjoint
    Case("normalize_batch", lambda a: ndl.normalize(a, (0,)), lambda a: np_normalize(a, (0,)),
         [(6, 3)]),
    Case("normalize_last", lambda a: ndl.normalize(a, -1, eps=0.1),
         lambda a: np_normalize(a, (-1,), 0.1), [(2, 3, 5)]),
    Case("normalize_tuple", lambda a: ndl.normalize(a, (0, 2)),
         lambda a: np_normalize(a, (0, 2)), [(3, 2, 4)]),
    Case("normalize_channels", lambda a: ndl.normalize(a, (0, 2, 3)),  # BatchNorm2d's, as rows
         lambda a: np_normalize(a, (0, 2, 3)), [(3, 2, 2, 3)]),
    Case("normalize_grad_channels", lambda x, g: ndl.NormalizeGrad((0, 2, 3), 1e-5)(x, g),
         lambda x, g: np_normalize_grad(x, g, (0, 2, 3), 1e-5), [(2, 3, 2, 2), (2, 3, 2, 2)]),
    Case("batch_norm", ndl.ops.batch_norm, np_batch_norm, [(6, 3), (3,), (3,)]),
    Case("batch_norm_nchw", ndl.ops.batch_norm, np_batch_norm, [(3, 2, 2, 3), (2,), (2,)]),
    Case("batch_norm_grad",  # its three adjoints, whose gradients are BatchNorm's second order
         lambda x, w, g: (lambda t: t[0] + t[1] * 3.0 + t[2])(
             ndl.ops.BatchNormGrad(1e-5)(x, w, g)), np_batch_norm_grad, [(5, 3), (3,), (5, 3)]),
    Case("layer_norm", ndl.ops.layer_norm, lambda x, w, b: np_normalize(x, (-1,)) * w + b,
         [(2, 3, 4), (4,), (4,)]),
    Case("layer_norm_grad",
         lambda x, w, g: (lambda t: t[0] + t[1] * 3.0 + t[2])(
             ndl.ops.LayerNormGrad(1e-5)(x, w, g)), np_layer_norm_grad, [(5, 3), (3,), (5, 3)]),
    Case("normalize_grad", lambda x, g: ndl.NormalizeGrad((0,), 1e-5)(x, g),
         lambda x, g: np_normalize_grad(x, g, (0,), 1e-5), [(5, 3), (5, 3)]),
    Case("normalize_grad_last", lambda x, g: ndl.NormalizeGrad((1,), 0.5)(x, g),
         lambda x, g: np_normalize_grad(x, g, (1,), 0.5), [(3, 4), (3, 4)]),
    # matmul, batched with broadcasting
    Case("matmul", ndl.matmul, np.matmul, [(5, 4), (4, 3)]),
    Case("matmul_batch_left", lambda a, b: a @ b, np.matmul, [(6, 6, 5, 4), (4, 3)]),
    Case("matmul_batch_right", lambda a, b: a @ b, np.matmul, [(5, 4), (6, 6, 4, 3)]),
    Case("matmul_batch_both", lambda a, b: a @ b, np.matmul, [(3, 3, 2), (3, 2, 3)]),
    Case("matmul_batch_bcast", lambda a, b: a @ b, np.matmul, [(2, 1, 3, 2), (4, 2, 3)]),
    Case("matmul_batch_4d", lambda a, b: a @ b, np.matmul, [(2, 3, 4, 5), (2, 3, 5, 2)]),
    Case("matmul_heads",  # attention's heads: permuted (B, H, T, D) views of (B, T, H, D)
         lambda a, b: ndl.permute(a, (0, 2, 1, 3)) @ ndl.permute(b, (0, 2, 3, 1)),
         lambda a, b: a.transpose(0, 2, 1, 3) @ b.transpose(0, 2, 3, 1),
         [(2, 4, 3, 5), (2, 6, 3, 5)]),
    Case("matmul_t_a", lambda a, b: ndl.MatMul(True, False)(a, b),
         lambda a, b: np.swapaxes(a, -1, -2) @ b, [(2, 4, 5), (4, 3)]),
    Case("matmul_t_b", lambda a, b: ndl.MatMul(False, True)(a, b),
         lambda a, b: a @ np.swapaxes(b, -1, -2), [(5, 4), (2, 3, 4)]),
    Case("matmul_t_both", lambda a, b: ndl.MatMul(True, True)(a, b),
         lambda a, b: np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2), [(4, 5), (3, 4)]),
    Case("matmul_rows_t_b", lambda a, b: ndl.MatMul(False, True)(a, b),
         lambda a, b: a @ b.T, [(2, 3, 4), (5, 4)]),
    Case("matmul_vec", lambda a, b: a @ b, np.matmul, [(4,), (4, 3)]),
    Case("matmul_matvec", lambda a, b: a.matmul(b), np.matmul, [(3, 4), (4,)]),
    # tuples
    Case("stack", lambda a, b, c: ndl.stack([a, b, c], 1), lambda *x: np.stack(x, 1),
         [(3, 4)] * 3),
    Case("split", lambda a: ndl.split(a, 1)[2] * ndl.split(a, 1)[0],
         lambda a: a[:, 2] * a[:, 0], [(3, 4, 2)]),
    Case("split_reused", lambda a: (lambda t: t[2] * t[0] + t[0])(ndl.split(a, 1)),
         lambda a: a[:, 2] * a[:, 0] + a[:, 0], [(3, 4, 2)]),
    Case("split_stack", lambda a: ndl.stack(list(ndl.split(a, 0))[::-1], 2),
         lambda a: np.stack(list(a)[::-1], 2), [(3, 2, 2)]),
    Case("add_n", lambda a, b, c: ndl.add_n(a, b, c), lambda a, b, c: a + b + c,
         [(3, 4)] * 3),
    Case("add_n_bcast", lambda a, b, c: ndl.add_n(a, b, c), lambda a, b, c: a + b + c,
         [(3, 4), (4,), (3, 1)]),
    Case("fused_add_scalars", lambda a: ndl.fused_add_scalars(a, 1.0, 2.0)[0]
         * ndl.fused_add_scalars(a, 1.0, 2.0)[1], lambda a: (a + 1) * (a + 2), [(3, 4)]),
    Case("conv", lambda a, b: ndl.conv(a, b, 1, 1), lambda a, b: np_conv(a, b, 1, 1),
         [(2, 5, 6, 3), (3, 3, 3, 2)]),
    Case("conv_bias", lambda a, b, c: ndl.conv(a, b, 1, 1, bias=c),
         lambda a, b, c: np_conv(a, b, 1, 1) + c, [(2, 5, 6, 3), (3, 3, 3, 2), (2,)]),
    Case("conv_stride2_pad0", lambda a, b: ndl.conv(a, b, 2, 0),
         lambda a, b: np_conv(a, b, 2, 0), [(2, 7, 6, 2), (3, 3, 2, 3)]),
    Case("conv_k1", lambda a, b: ndl.conv(a, b, 1, 0), lambda a, b: np_conv(a, b, 1, 0),
         [(1, 3, 4, 3), (1, 1, 3, 2)]),
    # conv's adjoints as ops of their own (each one's gradient is made of the other two)
    Case("conv_input_grad", lambda g, b: ndl.ops.ConvInputGrad((2, 7, 6, 2), 2, 1)(g, b),
         lambda g, b: np_col2im(g @ b.reshape(-1, 3).T, (2, 7, 6, 2), 3, 2, 1),
         [(2, 4, 3, 3), (3, 3, 2, 3)]),
    Case("conv_weight_grad", lambda a, g: ndl.ops.ConvWeightGrad((3, 3), 2, 1)(a, g),
         lambda a, g: (np_im2col(a, 3, 2, 1).reshape(-1, 18).T @ g.reshape(-1, 3)).reshape(
             3, 3, 2, 3), [(2, 7, 6, 2), (2, 4, 3, 3)]),
    # all of them in one op (nn.Conv's backward), and the bias's alone
    Case("conv_grads", lambda g, a, b: (lambda t: t[0].sum() + (t[1] ** 2).sum())(
        ndl.ops.ConvGrads(2, 1)(g, a, b)),
         lambda g, a, b: np_conv_grads(g, a, b)[0].sum() + (np_conv_grads(g, a, b)[1] ** 2).sum(),
         [(2, 4, 3, 3), (2, 7, 6, 2), (3, 3, 2, 3)]),
    Case("conv_grads_bias_nchw", lambda g, a, b: (
        lambda t: (t[0] ** 2).sum() + t[1].sum() + (t[2] ** 3).sum())(
        ndl.ops.ConvGrads(2, 1, "NCHW", bias=True)(g, a, b)),
         lambda g, a, b: (lambda da, db, dc: (da ** 2).sum() + db.sum() + (dc ** 3).sum())(
             *np_conv_grads(g.transpose(0, 2, 3, 1), a.transpose(0, 2, 3, 1), b)),
         [(2, 3, 4, 3), (2, 2, 7, 6), (3, 3, 2, 3)]),
    Case("bias_grad", lambda g: ndl.ops.BiasGrad()(g), lambda g: g.sum((0, 1, 2)),
         [(2, 4, 3, 3)]),
    Case("bias_grad_nchw", lambda g: ndl.ops.BiasGrad("NCHW")(g), lambda g: g.sum((0, 2, 3)),
         [(2, 3, 4, 5)]),
    Case("pad", lambda a: ndl.pad(a, ((0, 0), (1, 2), (0, 3))),
         lambda a: np.pad(a, ((0, 0), (1, 2), (0, 3))), [(2, 3, 2)]),
    Case("pad_2d", lambda a: ndl.pad(a, ((1, 0), (2, 1))), lambda a: np.pad(a, ((1, 0), (2, 1))),
         [(2, 3)], exact=True),
    Case("pad_every_axis", lambda a: ndl.pad(a, ((0, 2), (1, 1), (3, 0))),
         lambda a: np.pad(a, ((0, 2), (1, 1), (3, 0))), [(2, 3, 2)], exact=True),
    Case("im2col", lambda a: ndl.im2col(a, 3, stride=2, padding=1),
         lambda a: np_im2col(a, 3, 2, 1), [(2, 5, 4, 2)]),
    Case("col2im", lambda a: ndl.ops.Col2Im((2, 5, 4, 2), (3, 3), 2, 1)(a),
         lambda a: np_col2im(np.moveaxis(a, 0, 3).reshape(2, 3, 2, 18), (2, 5, 4, 2), 3, 2, 1),
         [(9, 2, 3, 2, 2)]),
    Case("taps", lambda a: ndl.ops.Taps((3, 3), 2, 1)(a),
         lambda a: np.moveaxis(np_im2col(a, 3, 2, 1).reshape(2, 3, 2, 9, 2), 3, 0),
         [(2, 5, 4, 2)]),
    Case("max_pool2d", lambda a: ndl.max_pool2d(a, 3, 2),
         lambda a: np_unfold2d(a, 3, 2).max(0), [(1, 2, 5, 6)]),
    Case("max_pool2d_disjoint", lambda a: ndl.max_pool2d(a, 2),
         lambda a: np_unfold2d(a, 2, 2).max(0), [(1, 2, 5, 4)]),
    Case("max_pool2d_disjoint_cropped", lambda a: ndl.max_pool2d(a, 2),
         lambda a: np_unfold2d(a, 2, 2).max(0), [(1, 2, 5, 6)]),
    Case("avg_pool2d", lambda a: ndl.avg_pool2d(a, 3, 1),
         lambda a: np_unfold2d(a, 3, 1).mean(0), [(1, 2, 4, 5)]),
    Case("avg_pool2d_k3s2", lambda a: ndl.avg_pool2d(a, 3, 2),
         lambda a: np_unfold2d(a, 3, 2).mean(0), [(1, 2, 5, 6)]),
    Case("avg_pool2d_disjoint_cropped", lambda a: ndl.avg_pool2d(a, 2),
         lambda a: np_unfold2d(a, 2, 2).mean(0), [(1, 2, 5, 6)]),
    Case("unfold2d", lambda a: ndl.unfold2d(a, 2, 1), lambda a: np_unfold2d(a, 2, 1),
         [(2, 3, 4)]),
    Case("unfold2d_k3s2", lambda a: ndl.unfold2d(a, 3, 2), lambda a: np_unfold2d(a, 3, 2),
         [(2, 5, 6)]),
    Case("fold2d", lambda a: ndl.fold2d(a, 3, 2, (5, 6)),
         lambda a: np_fold2d(a, 3, 2, (5, 6)), [(9, 2, 2, 2)]),
    Case("fold2d_k2s2", lambda a: ndl.fold2d(a, 2, 2, (5, 4)),
         lambda a: np_fold2d(a, 2, 2, (5, 4)), [(4, 1, 2, 2)]),
    Case("embedding", lambda w: ndl.embedding(w, [[0, 2], [2, 3], [0, 0]]),
         lambda w: w[np.array([[0, 2], [2, 3], [0, 0]])], [(4, 3)]),
    Case("segment_sum", lambda v: ndl.ops.SegmentSum(4)(
        v, ndl.Tensor(np.array([1, 3, 1]), device=v.device, requires_grad=False)),
         lambda v: np.stack([np.zeros(2), v[0] + v[2], np.zeros(2), v[1]]), [(3, 2)]),
    Case("segment_sum_2d_index",
         lambda v: ndl.ops.SegmentSum(4)(v, index_tensor(SEGMENTS, 4, "test", v.device)),
         lambda v: np_add_at(np.array(SEGMENTS), v, 4), [(2, 2, 3)]),
    Case("dropout_mask", lambda a: ndl.ops.dropout_mask(
        a, ndl.Tensor(DRAWS, device=a.device, requires_grad=False), 0.7),
         lambda a: a * (DRAWS <= 0.7) / 0.7, [(3, 4)]),
    Case("softmax_cross_entropy", lambda a: ndl.softmax_cross_entropy(a, labels_on(a)),
         lambda a: np.mean(np_logsumexp(a, 1) - a[np.arange(3), LABELS]), [(3, 4)]),
    Case("softmax_cross_entropy_grad",
         lambda a, g: ndl.ops.SoftmaxCrossEntropyGrad(labels_on(a))(a, g),
         lambda a, g: g * (np_softmax(a) - np.eye(4)[LABELS]) / 3, [(3, 4), ()]),
    Case("softmax_causal", lambda a: ndl.ops.softmax(a, 2.0, causal=True),
         lambda a: np_softmax_last(a / 2.0 - np.triu(np.full((3, 3), np.inf), 1)), [(2, 3, 3)]),
    Case("softmax", ndl.ops.softmax, np_softmax_last, [(2, 4, 3)]),
    Case("softmax_causal_more_keys", lambda a: ndl.ops.softmax(a, 2.5, causal=True),
         lambda a: np_causal_softmax(a, 2.5), [(2, 3, 5)]),
    Case("softmax_grad", lambda y, g: ndl.ops.SoftmaxGrad(2.0)(y, g),
         lambda y, g: y * (g - (g * y).sum(-1, keepdims=True)) / 2.0, [(3, 4), (3, 4)]),
    Case("affine", ndl.ops.affine, lambda x, w, b: x @ w + b, [(3, 4), (4, 2), (1, 2)]),
    Case("affine_3d", ndl.ops.affine, lambda x, w, b: x @ w + b, [(2, 3, 4), (4, 2), (2,)]),
    Case("affine_wider_bias", ndl.ops.affine, lambda x, w, b: x @ w + b,
         [(3, 4), (4, 2), (2, 1, 2)]),
    Case("scale_shift", ndl.ops.scale_shift, lambda x, w, b: x * w + b, [(3, 4), (4,), (1, 4)]),
    Case("scale_shift_bcast", ndl.ops.scale_shift, lambda x, w, b: x * w + b,
         [(3, 1), (2, 1, 4), (4,)]),
    Case("scale_shift_axis", lambda x, w, b: ndl.ops.scale_shift(x, w, b, axis=1),
         lambda x, w, b: x * w[:, None, None] + b[:, None, None], [(2, 3, 4, 2), (3,), (3,)]),
    Case("lstm_cell_state", ndl.ops.lstm_cell_state, np_lstm_state, [(3, 8), (3, 2)]),
    Case("lstm_cell_state_zero", ndl.ops.lstm_cell_state, np_lstm_state, [(3, 8)]),
    Case("lstm_cell_output", ndl.ops.lstm_cell_output,
         lambda z, c: np_sig(z[:, 6:]) * np.tanh(c), [(3, 8), (3, 2)]),
    # their fused adjoints, whose own gradients (the cell's second order) are checked here
    Case("lstm_cell_state_grad", lambda z, c, g: ndl.ops.LSTMCellStateGrad()(z, c, g),
         np_lstm_state_grad, [(3, 8), (3, 2), (3, 2)]),
    Case("lstm_cell_state_grad_zero", lambda z, g: ndl.ops.LSTMCellStateGrad()(z, g),
         lambda z, g: np_lstm_state_grad(z, None, g), [(3, 8), (3, 2)]),
    Case("lstm_cell_output_grad", lambda z, c, g: ndl.ops.LSTMCellOutputGrad()(z, c, g),
         np_lstm_output_grad, [(3, 8), (3, 2), (3, 2)]),
    Case("one_hot_tuple",
         lambda a: (lambda t: t[1] + t[0] * 2.0 + t[2])(
             ndl.ops.OneHotTuple(1, ((a.shape, a._array.dtype),) * 3)(a)),
         lambda a: a + 0.0, [(3, 4)]),
    Case("make_tuple", lambda a, b: ndl.make_tuple(a, b)[1] - ndl.make_tuple(a, b)[0],
         lambda a, b: b - a, [(3, 4), (3, 4)]),
    Case("astype", lambda a: ndl.astype(a, "float64") * 2.0, lambda a: a * 2.0, [(3, 4)]),
]


def rtol_for(device) -> float:
    return 1e-7 if device.kind != "cuda" else 1e-6


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_matches_numpy(case: Case, device):
    xs = case.inputs()
    out = case.fn(*[ndl.Tensor(x, device=device, dtype="float64") for x in xs])
    assert out.device == device
    if case.exact:
        np.testing.assert_array_equal(out.numpy(), case.ref(*xs))
    else:
        np.testing.assert_allclose(out.numpy(), case.ref(*xs), rtol=rtol_for(device),
                                   atol=1e-12)
    assert out.shape == np.shape(case.ref(*xs))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case: Case, device):
    check_gradients(case.fn, *case.inputs(), device=device)


def test_logsumexp_is_exact_for_huge_inputs(device):
    x = np.array([[1e10, 1e10 - 1.0, -1e10], [-1e10, -1e10 + 2.0, -1e10]])
    out = ndl.logsumexp(ndl.Tensor(x, device=device), axes=1).numpy()
    expected = [1e10 + np.log1p(np.exp(-1.0)), -1e10 + 2.0 + np.log1p(2 * np.exp(-2.0))]
    np.testing.assert_allclose(out, expected, rtol=1e-15)
    assert np.all(np.isfinite(out))


# numpy's log(0) warns as numpy's does for any -inf it makes; the value is the right one
@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")
def test_logsumexp_of_all_minus_inf_is_minus_inf(device):
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    out = ndl.logsumexp(ndl.Tensor(x, device=device), axes=(1,)).numpy()
    assert out[0] == -np.inf and not np.isnan(out[0])
    assert out[1] == 0.0


def test_max_gradient_shared_by_ties(device):
    x = ndl.Tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], device=device)
    ndl.max(x, axes=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


def test_dilate_inserts_zeros_after_every_element(device):
    x = ndl.Tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    np.testing.assert_array_equal(
        ndl.dilate(x, (1,), 1).numpy(), [[1, 0, 2, 0], [3, 0, 4, 0]]
    )
    np.testing.assert_array_equal(ndl.undilate(ndl.dilate(x, (0, 1), 2), (0, 1), 2).numpy(),
                                  x.numpy())


def test_fused_add_scalars_returns_a_tuple(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    out = ndl.fused_add_scalars(x, 1.0, 10.0)
    assert isinstance(out, ndl.TensorTuple) and len(out) == 2
    np.testing.assert_array_equal(out[0].numpy(), [2, 3])
    np.testing.assert_array_equal(out[1].numpy(), [11, 12])


def test_sigmoid_does_not_overflow(device):
    x = ndl.Tensor([-1000.0, 0.0, 1000.0], device=device, dtype="float32")
    np.testing.assert_allclose(ndl.sigmoid(x).numpy(), [0.0, 0.5, 1.0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sigmoid_keeps_its_relative_accuracy_in_the_negative_tail(dtype, device):
    """(1 + tanh(x/2)) / 2 gave 0 for x < -17 in float32 (and x < -37 in float64), and so
    log(sigmoid(x)) = -inf and a zero gradient; PyTorch keeps the tail."""
    x = np.array([-100.0, -40.0, -20.0, -10.0, -1.0, 0.0, 1.0, 10.0, 30.0])
    a = ndl.Tensor(x, device=device, dtype=dtype)
    y = ndl.sigmoid(a)
    y.sum().backward()
    want = 1 / (1 + np.exp(-x))  # float64 on the host
    keep = want > np.finfo(dtype).tiny  # (float32 flushes sigmoid(-100) = 3.7e-44 to 0)
    rtol = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(y.numpy()[keep], want[keep], rtol=rtol)
    tail = keep & (x <= 1)  # s (1 - s) from the output, as PyTorch: 1 - s rounds for x >> 0
    np.testing.assert_allclose(a.grad.numpy()[tail], (want * (1 - want))[tail], rtol=rtol)


def test_float32_stays_float32(device):
    x = ndl.Tensor(np.ones((2, 3)), device=device, dtype="float32")
    for y in (x + 1.5, x * 2, x / 3, x**2, -x, ndl.exp(x), x.sum(), ndl.logsumexp(x, 1),
              x @ ndl.transpose(x), ndl.relu(x), ndl.sigmoid(x)):
        assert y.dtype == "float32", y.op


# ----- the cpu device's sum (behind summation, BatchNorm2d and the bias adjoints) -----------
@pytest.mark.parametrize("shape,axis,keepdims", [
    ((300, 14, 16), (0, 1), False), ((300, 14, 16), (0, 1), True), ((5000, 8), 0, False),
    ((5000, 8), (0,), True), ((40, 60, 3), (1, 0), False), ((40, 60, 3), (-3, -2), False),
    ((40, 60, 3), (1, 2), False), ((40, 60, 3), None, False), ((4000, 3), 1, False),
])
def test_cpu_sum_over_leading_axes_matches_numpy(shape, axis, keepdims):
    # the cpu device sums many short rows with a matrix-vector product: same results
    from needle.backends.cpu import _sum

    x = np.random.default_rng(8).random(shape).astype(np.float32)
    for array in (x, x.astype(np.float64), np.asfortranarray(x)):
        got = _sum(array, axis=axis, keepdims=keepdims)
        ref = np.sum(array.astype(np.float64), axis=axis, keepdims=keepdims)
        assert got.shape == ref.shape and got.dtype == array.dtype
        np.testing.assert_allclose(got, ref, rtol=1e-5)


# ----- the gradient contract: every op's own gradient returns input-shaped adjoints --------
def shapes(value):
    """A Tensor's shape, or the tuple of a TensorTuple's shapes."""
    if isinstance(value, ndl.TensorTuple):
        return tuple(tuple(a.shape) for a in value._realize())
    return value.shape


def ones_like(value, device):
    """An adjoint of ones for a Tensor or a TensorTuple."""
    if isinstance(value, ndl.TensorTuple):
        return ndl.make_tuple(*[ones_like(t, device) for t in value.tuple()])
    return ndl.Tensor(np.ones(value.shape), device=device, dtype="float64", requires_grad=False)


def graph_of(case: Case, device):
    xs = [ndl.Tensor(x, device=device, dtype="float64") for x in case.inputs()]
    return autograd.find_topo_sort([case.fn(*xs)])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_returns_adjoints_shaped_like_the_inputs(case: Case, device):
    # called directly, without the engine (which would sum broadcast adjoints back itself)
    for node in graph_of(case, device):
        if node.op is None:
            continue
        adjoints = node.op.gradient_as_tuple(ones_like(node, device), node)
        assert len(adjoints) == len(node.inputs), node.op
        for i, (x, adjoint) in enumerate(zip(node.inputs, adjoints)):
            if adjoint is None:
                assert not x.requires_grad, f"{node.op}: no adjoint for input {i}"
            else:
                assert shapes(adjoint) == shapes(x), f"{node.op}: adjoint of input {i}"


def test_op_table_covers_every_op():
    seen = {type(node.op) for case in CASES for node in graph_of(case, ndl.cpu())}
    exported = {getattr(ndl.ops, name) for name in ndl.ops.__all__}
    ops = {op for op in exported if isinstance(op, type) and issubclass(op, ndl.Op)}
    assert not ops - seen, f"ops missing from CASES: {sorted(op.__name__ for op in ops - seen)}"


def test_matmul_adjoint_of_a_broadcast_operand_is_summed_over_the_batch(device):
    a = ndl.Tensor(np.ones((6, 6, 5, 4)), device=device)
    b = ndl.Tensor(np.ones((4, 3)), device=device)
    out = a @ b
    grad_a, grad_b = out.op.gradient_as_tuple(ndl.Tensor(np.ones(out.shape), device=device),
                                              out)
    assert grad_a.shape == (6, 6, 5, 4) and grad_b.shape == (4, 3)
    np.testing.assert_allclose(grad_b.numpy(), np.full((4, 3), 6 * 6 * 5.0))


def test_equal_shapes_add_no_unbroadcast_nodes(device):
    a, b = (ndl.Tensor(np.ones((2, 3)), device=device) for _ in range(2))
    out = a * b
    grad_a, grad_b = out.op.gradient_as_tuple(out, out)
    assert isinstance(grad_a.op, ndl.EWiseMul) and isinstance(grad_b.op, ndl.EWiseMul)


# ----- power at 0 and scalar bases: PyTorch's values ---------------------------------------
def test_power_gradient_at_zero_base_is_not_nan(device):
    a = ndl.Tensor([0.0, 0.0, 2.0, 0.0], device=device)
    e = ndl.Tensor([2.0, 0.0, 1.5, -1.0], device=device)
    with np.errstate(divide="ignore"):  # 0 ** -1
        (a**e).sum().backward()
    # torch.pow's gradients at these points
    np.testing.assert_allclose(a.grad.numpy(), [0, 0, 1.5 * 2**0.5, -np.inf])
    np.testing.assert_allclose(e.grad.numpy(), [0, 0, 2**1.5 * np.log(2), -np.inf])


@pytest.mark.parametrize("base, value, grad", [
    (0.0, [0, 1, np.inf], [0, 0, -np.inf]),
    (-2.0, [4, 1, -0.5], [np.nan] * 3),
    (2.0, [4, 1, 0.5], [4 * np.log(2), np.log(2), 0.5 * np.log(2)]),
])
def test_scalar_base_power_matches_pytorch(base, value, grad, device):
    for power in (lambda t: ndl.rpower_scalar(t, base), lambda t: base**t):
        t = ndl.Tensor([2.0, 0.0, -1.0], device=device)
        with np.errstate(divide="ignore"):  # 0 ** -1
            out = power(t)
            out.sum().backward()
        np.testing.assert_allclose(out.numpy(), value)
        np.testing.assert_allclose(t.grad.numpy(), grad)


# ----- scalar operands: numbers, numpy scalars and one-element arrays ---------------------
@pytest.mark.parametrize("scalar", [np.array([2.0]), np.array([[2.0]]), np.float64(2.0),
                                    np.array(2), np.int64(2)])
def test_scalar_ops_accept_one_element_arrays(scalar, device):
    x = ndl.Tensor([1.0, 4.0], device=device, dtype="float32")
    for out, expected in ((x * scalar, [2, 8]), (scalar * x, [2, 8]), (x + scalar, [3, 6]),
                          (x - scalar, [-1, 2]), (scalar - x, [1, -2]), (x / scalar, [0.5, 2]),
                          (scalar / x, [2, 0.5]), (x**scalar, [1, 16]),
                          (ndl.divide_scalar(x, scalar=scalar), [0.5, 2])):
        assert out.dtype == "float32" and out.shape == (2,)  # x's dtype and shape
        np.testing.assert_allclose(out.numpy(), expected)


def test_as_scalar_reads_any_namespace(device):
    assert ndl.as_scalar(device.asarray([[3.5]])) == 3.5
    assert ndl.as_scalar(device.asarray([3], dtype="int32")) == 3


def test_scalar_ops_reject_bigger_arrays(device):
    x = ndl.Tensor([1.0, 4.0], device=device)
    with pytest.raises(TypeError, match=r"mul_scalar: .*shape \(2,\); use a Tensor"):
        ndl.mul_scalar(x, np.array([1.0, 2.0]))
    # (the operators take such an array as a constant Tensor: test_autograd.py)
    np.testing.assert_array_equal((x * np.array([1.0, 2.0])).numpy(), [1.0, 8.0])
    with pytest.raises(TypeError, match=r"divide_scalar: .*shape \(0,\)"):
        ndl.divide_scalar(x, np.array([]))
    with pytest.raises(TypeError, match="add_scalar: expected a number, got a Tensor"):
        ndl.add_scalar(x, x)


# ----- bad arguments name the op and the value ---------------------------------------------
def test_stack_of_nothing_or_of_non_tensors_is_refused(device):
    x = ndl.Tensor([1.0], device=device)
    with pytest.raises(ValueError, match=r"stack: needs at least one tensor, got \[\]"):
        ndl.stack([], 0)
    with pytest.raises(TypeError, match="stack: expected Tensors, got float at position 1"):
        ndl.stack([x, 1.0], 0)


def test_matmul_of_empty_stacks(device):
    a, b = (ndl.Tensor(np.ones(s), device=device) for s in [(2, 0, 3, 4), (2, 0, 4, 5)])
    out = a @ b
    assert out.shape == (2, 0, 3, 5) and out.numpy().size == 0


def test_matmul_batch_dimensions_that_do_not_broadcast(device):
    a = ndl.Tensor(np.ones((2, 3, 4, 5)), device=device)
    b = ndl.Tensor(np.ones((4, 5, 2)), device=device)
    with pytest.raises(ValueError, match=r"matmul: the batch dimensions of shapes "
                                         r"\(2, 3, 4, 5\) and \(4, 5, 2\) do not broadcast"):
        a @ b


@pytest.mark.parametrize("op", [ndl.dilate, ndl.undilate])
def test_negative_or_fractional_dilation_is_refused(op, device):
    x = ndl.Tensor(np.ones((2, 2)), device=device)
    name = op.__name__
    with pytest.raises(ValueError, match=f"{name}: dilation must be >= 0, got -1"):
        op(x, (0,), -1)
    with pytest.raises(TypeError, match=f"{name}: dilation must be an int, got 1.5"):
        op(x, (0,), 1.5)


# ----- tuples and indexing -----------------------------------------------------------------
def test_tuple_get_item_of_make_tuple_adds_no_node(device):
    a, b = (ndl.Tensor([1.0], device=device) for _ in range(2))
    assert ndl.make_tuple(a, b)[1] is b
    with pytest.raises(TypeError):
        ndl.TupleGetItem(0)(ndl.make_tuple(a, b), False)  # no fold_const parameter


OUT_OF_RANGE_SLICES = [slice(1, 100), slice(-5, None), slice(None, -10), slice(5, 10),
                       slice(2, 1), slice(-100, 100, 2), slice(100, -100, -1),
                       slice(-100, 1, -1), slice(1, -100, -2), slice(10, 2, -1)]


@pytest.mark.parametrize("index", OUT_OF_RANGE_SLICES, ids=str)
def test_out_of_range_slice_bounds_are_clipped_as_numpy_does(index, device):
    """numpy, torch and jax clip slice bounds to the axis; array-api-strict refuses them."""
    a = np.arange(12.0).reshape(3, 4)
    x = ndl.Tensor(a, device=device, dtype="float64")
    out = x[index]
    assert out.shape == a[index].shape
    np.testing.assert_array_equal(out.numpy(), a[index])
    cot = np.arange(1.0, a[index].size + 1).reshape(a[index].shape)
    expected = np.zeros_like(a)
    expected[index] = cot
    for create_graph in (True, False):
        x = ndl.Tensor(a, device=device, dtype="float64")
        x[index].backward(ndl.Tensor(cot, device=device, dtype="float64"),
                          create_graph=create_graph)
        np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("index", [(1, slice(None)), (slice(None, None, -1), 2),
                                   (slice(3, 0, -2), slice(1, None, 3)), (slice(2, 2), 0),
                                   (slice(None, None, 2), slice(-1, None, -3)), (-1, -2)])
def test_scatter_item_matches_numpy_assignment(index, device):
    shape = (4, 5)
    part = np.zeros(shape)[index]
    values = np.arange(1.0, part.size + 1).reshape(part.shape)
    out = ndl.ScatterItem(index, shape)(ndl.Tensor(values, device=device))
    np.testing.assert_array_equal(out.numpy(), np_scatter(values, index, shape))


def test_affine_second_order(device):
    rng = np.random.default_rng(11)
    c = rng.standard_normal((3, 4))

    def grad_dot_c(x, w, b):
        (ndl.ops.affine(x, w, b) ** 2).sum().backward()
        return (x.grad * ndl.Tensor(c, device=x.device)).sum() + (w.grad * w).sum() + (
            b.grad * b).sum()

    check_gradients(grad_dot_c, rng.standard_normal((3, 4)), rng.standard_normal((4, 2)),
                    rng.standard_normal((1, 2)), device=device)


def test_scale_shift_second_order(device):
    rng = np.random.default_rng(13)

    def grad_dot(x, w, b):
        (ndl.ops.scale_shift(x, w, b) ** 2).sum().backward()
        return (x.grad * x).sum() + (w.grad * w * w).sum() + (b.grad * x.sum(0)).sum()

    check_gradients(grad_dot, rng.standard_normal((3, 4)), rng.standard_normal(4),
                    rng.standard_normal(4), device=device)


@pytest.mark.parametrize("shape", [(50, 4), (3, 4, 5, 6)])
def test_batch_norm_gives_normalize_then_scale_shifts_numbers(shape, device):
    """BatchNorm (one node) against the two nodes it replaced, Normalize over every axis but 1
    and ScaleShift along axis 1, float32: the same numbers to the bit where the portable
    rule runs (cuda's included: the same kernels in the same order); torch's is PyTorch's own
    batch norm with the affine map: a few ulps. The statistics are the same arrays' numbers."""
    rng = np.random.default_rng(14)
    x_host, g_host = (rng.standard_normal(shape) * 2 + 1 for _ in range(2))
    w_host, b_host = rng.standard_normal((2, shape[1]))
    axes = (0, *range(2, len(shape)))
    got = []
    for fused in (True, False):
        x, w, b = (ndl.Tensor(a, device=device, dtype="float32")
                   for a in (x_host, w_host, b_host))
        if fused:
            op = ndl.ops.BatchNorm(1e-5)
            out = op(x, w, b)
        else:
            op = ndl.ops.Normalize(axes, 1e-5)
            out = ndl.ops.scale_shift(op(x), w, b, axis=1)
        out.backward(ndl.Tensor(g_host, device=device, dtype="float32"))
        got.append([out.numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()]
                   + [device.to_numpy(a) for a in op.stats])
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if device.kind == "torch" else {"rtol": 0}
    for fused, parts in zip(*got):
        np.testing.assert_allclose(fused, parts, **tolerance)


@pytest.mark.parametrize("shape", [(50, 4), (3, 5, 4)])
def test_layer_norm_gives_normalize_then_scale_shifts_numbers(shape, device):
    """LayerNorm (one node) against Normalize over the last axis and ScaleShift: the same
    numbers to the bit where the portable rule runs; torch's is PyTorch's layer norm with the
    affine map: a few ulps."""
    rng = np.random.default_rng(15)
    x_host, g_host = (rng.standard_normal(shape) * 2 + 1 for _ in range(2))
    w_host, b_host = rng.standard_normal((2, shape[-1]))
    got = []
    for fused in (True, False):
        x, w, b = (ndl.Tensor(a, device=device, dtype="float32")
                   for a in (x_host, w_host, b_host))
        out = (ndl.ops.layer_norm(x, w, b) if fused else
               ndl.ops.scale_shift(ndl.ops.normalize(x, (len(shape) - 1,)), w, b))
        out.backward(ndl.Tensor(g_host, device=device, dtype="float32"))
        got.append([out.numpy(), x.grad.numpy(), w.grad.numpy(), b.grad.numpy()])
    tolerance = {"rtol": 1e-5, "atol": 1e-5} if device.kind == "torch" else {"rtol": 0}
    for fused, parts in zip(*got):
        np.testing.assert_allclose(fused, parts, **tolerance)
    with pytest.raises(ValueError, match=r"layer_norm: expected an input of shape \(\.\.\., C\) "
                                         r".*found \(50, 4\), \(3,\) and \(4,\)"):
        ndl.ops.layer_norm(ndl.Tensor(np.ones((50, 4)), device=device),
                           ndl.Tensor(np.ones(3), device=device),
                           ndl.Tensor(np.ones(4), device=device))


def test_batch_norm_checks_its_shapes(device):
    x = ndl.Tensor(np.ones((4, 3, 2)), device=device)
    with pytest.raises(ValueError, match=r"batch_norm: .*shape \(C,\), found \(4, 3, 2\), "
                                         r"\(2,\) and \(3,\)"):
        ndl.ops.batch_norm(x, ndl.Tensor(np.ones(2), device=device),
                           ndl.Tensor(np.ones(3), device=device))


def test_scale_shift_along_an_axis_checks_its_vectors(device):
    x, v = (ndl.Tensor(np.ones(s), device=device) for s in [(2, 3, 4), (3,)])
    with pytest.raises(ValueError, match=r"the shift must have shape \(3,\) along axis 1 of an "
                                         r"input of shape \(2, 3, 4\), found \(4,\)"):
        ndl.ops.scale_shift(x, v, ndl.Tensor(np.ones(4), device=device), axis=1)
    with pytest.raises(ValueError, match=r"axis 3 is out of range .* shape \(2, 3, 4\)"):
        ndl.ops.scale_shift(x, v, v, axis=3)


def test_linear_is_one_affine_node_equal_to_matmul_plus_bias(device):
    layer = ndl.nn.Linear(4, 3, device=device)
    x = ndl.Tensor(np.random.default_rng(12).standard_normal((5, 4)), device=device,
                   dtype="float32")
    out = layer(x)
    assert type(out.op).__name__ == "Affine"
    np.testing.assert_array_equal(out.numpy(), (x @ layer.weight + layer.bias).numpy())


@contextlib.contextmanager
def deterministic(device):
    """On torch, cuDNN's deterministic algorithms while inside (restored after)."""
    if device.kind != "torch":
        yield
        return
    import torch

    before = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic = before


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_backward_without_a_graph_gives_the_same_gradients(case: Case, device):
    # backward(create_graph=False) runs the same rules on raw arrays (ops called on arrays
    # evaluate at once): the same numbers as the recorded gradients, to the bit (with cuDNN's
    # deterministic algorithms: on a GPU its float64 weight adjoint differed by an ulp
    # between two identical calls)
    with deterministic(device):
        _same_gradients_with_and_without_a_graph(case, device)


def _same_gradients_with_and_without_a_graph(case: Case, device):
    xs = case.inputs()
    grads = []
    for create_graph in (True, False):
        ts = [ndl.Tensor(x, device=device, dtype="float64") for x in xs]
        out = case.fn(*ts)
        cot = np.random.default_rng(1).standard_normal(out.shape)
        out.backward(ndl.Tensor(cot, device=device, dtype="float64"), create_graph=create_graph)
        grads.append([None if t.grad is None else t.grad.numpy() for t in ts])
        if not create_graph:
            assert all(t.grad is None or t.grad.op is None for t in ts)
    for recorded, raw in zip(*grads):
        assert (recorded is None) == (raw is None)
        if raw is not None:
            assert raw.dtype == recorded.dtype and raw.shape == recorded.shape
            np.testing.assert_array_equal(raw, recorded)


@pytest.mark.parametrize("step", [3, 4, 2**31, 2**63 - 1, 2**63, -5, -(2**63)])
def test_slice_steps_beyond_the_axis_pick_as_numpy_does(step, device):
    """t[::2**63] was empty on torch and an MLIR TypeError on jax, and gradients through
    steps of 2**31 and more an OverflowError on jax: every device now gives numpy's."""
    data = np.arange(8.0).reshape(2, 4)
    x = ndl.Tensor(data, device=device, dtype="float64", requires_grad=True)
    for index in ((slice(None), slice(1, None, step)), (1, slice(None, None, step))):
        out = x[index]
        assert out.shape == data[index].shape
        np.testing.assert_array_equal(out.numpy(), data[index])
        x.grad = None
        out.sum().backward()
        expected = np.zeros_like(data)
        expected[index] = 1
        np.testing.assert_array_equal(x.grad.numpy(), expected)
