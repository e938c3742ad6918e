"""The kernel registry: every fast kernel against its portable reference on every device it is
registered for; fast versions resolved lazily, the reference wherever a kind has none."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import needle as ndl
from needle import backends, kernels
from needle.kernels import REGISTRY, Kernel, reference_only
from needle.ops.norm import normalize_portable
from needle.ops.reduce import softmax_xent_portable

# Each case maker takes a device and a seeded generator and returns variants
# (args, kwargs, rtol): rtol 0 means bit-equal (the fast version computes in the reference's
# order); a case is made twice, once for each version, since in-place kernels write over
# their inputs.


def im2col_cases(device, rng):
    host = rng.standard_normal((2, 7, 6, 3))
    nchw = device.asarray(np.ascontiguousarray(host.transpose(0, 3, 1, 2)))
    view = device.xp.permute_dims(nchw, (0, 2, 3, 1))  # not contiguous, as nn.Conv hands over
    return [((a, kernel, stride, padding), {}, 0) for a in (device.asarray(host), view)
            for kernel, stride, padding in [((3, 3), 1, 1), ((2, 3), 2, 0), ((5, 5), 3, 2)]]


def index_add_cases(device, rng):
    idx = device.asarray(rng.integers(0, 7, size=40), dtype="int64")
    whole = rng.integers(-8, 8, size=(40, 3)).astype(np.float32)  # sums exact in any order
    real = rng.standard_normal((40, 2, 3))
    none = device.asarray(np.zeros(0, dtype=np.int64))
    return [((idx, device.asarray(whole), 7), {}, 0),
            ((none, device.asarray(np.zeros((0, 4), np.float32)), 5), {}, 0),
            # float64 sums in another order (sorted runs, atomic adds, a scatter): 1e-12
            ((idx, device.asarray(real), 9), {}, 1e-12)]


def logits(device, rng, dtype, dead_row=False):
    z = rng.standard_normal((6, 5)) * 3
    z[2] = [1e4, -1e4, 3.0, 1e4, 0.0]  # huge logits: shifted by the row max first
    if dead_row:
        z[4] = -np.inf  # an all -inf row: shifted by 0 (and the loss NaN)
    return device.asarray(z, dtype=dtype), device.asarray(rng.integers(0, 5, 6), dtype="int64")


def softmax_xent_cases(device, rng):
    empty = device.asarray(np.zeros(0, dtype=np.int64))
    # cuda's row sums are a block's, in another order than cupy's sum: a few ulps
    rtol = 1e-6 if device.kind == "cuda" else 0
    return [(logits(device, rng, dtype), {}, rtol) for dtype in ("float32", "float64")] + [
        (logits(device, rng, "float32", dead_row=True), {}, rtol),
        ((device.asarray(np.zeros((0, 5))), empty), {}, 0),  # no rows: NaN
        ((device.asarray(np.zeros((0, 0))), empty), {}, 0)]  # no rows, no classes


def softmax_xent_grad_cases(device, rng):
    cases = []
    for dtype, dead_row in (("float32", False), ("float64", False), ("float32", True)):
        z, labels = logits(device, rng, dtype, dead_row)
        _, e, sums = softmax_xent_portable(z, labels)
        g = device.asarray(np.array(1.7), dtype=dtype)
        cases.append(((e, sums, labels, g), {}, 0))
        # e given up (a graph not retained): a fast version may write the result over it
        cases.append(((device.xp.asarray(e, copy=True), sums, labels, g, True), {}, 0))
    return cases


def add_to_fresh_cases(device, rng):
    def arrays(*shapes, dtype="float32"):
        return [device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]

    return [(tuple(arrays((4, 3), (3,))), {}, 0), (tuple(arrays((4, 3), (4, 3))), {}, 0),
            (tuple(arrays((4, 3), (1, 3), dtype="float64")), {}, 0),
            ((*arrays((4, 3)), *arrays((3,), dtype="float64")), {}, 0),  # promoted: out + b
            (tuple(arrays((3,), (4, 3))), {}, 0)]  # a result bigger than out: out + b


def add_n_cases(device, rng):
    def arrays(*shapes, dtype="float32"):
        return tuple(device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes)

    return [(arrays(*[(4, 3)] * 6), {}, 0), (arrays((4, 3), (3,), (1, 3), (4, 1)), {}, 0),
            (arrays((3,), (4, 3), (4, 3)), {}, 0),  # the first sum grows past a0
            (arrays((4, 3), (4, 3), (2, 4, 3)), {}, 0),  # a later one grows the sum
            (arrays((4, 3), (4, 3)) + arrays((4, 3), dtype="float64"), {}, 0),  # promoted
            (arrays((), (), ()), {}, 0), (arrays((), ()), {}, 0),  # 0-d: numpy scalars
            (arrays((4, 3)), {}, 0)]  # one array: itself


# 150000 elements: two whole chunks of the cpu kernels and part of a third
BIG = (300, 500)


def adam_cases(device, rng):
    cases = []
    for dtype in ("float32", "float64"):
        for wd, state in ((0.0, False), (0.05, True)):
            p, g, m, v = (rng.standard_normal(BIG) for _ in range(4))
            m, v = (device.asarray(a, dtype=dtype) if state else None for a in (m, np.abs(v)))
            hyper = {"lr_t": 0.01, "beta1": 0.8, "beta2": 0.95, "eps_t": 1e-6,
                     "weight_decay": wd}
            cases.append(((device.asarray(p, dtype=dtype), device.asarray(g, dtype=dtype), m,
                           v), hyper, 0))
    return cases


def sgd_cases(device, rng):
    cases = []
    for dtype in ("float32", "float64"):
        for momentum, wd, state in ((0.0, 0.0, False), (0.9, 0.01, False), (0.5, 0.01, True)):
            p, g, u = (device.asarray(rng.standard_normal(BIG), dtype=dtype) for _ in range(3))
            hyper = {"lr": 0.1, "momentum": momentum, "weight_decay": wd}
            cases.append(((p, g, u if state else None), hyper, 0))
    return cases


def _lists(device, rng, dtype, count):
    """`count` lists of three arrays each, of three shapes (the big one first)."""
    lists = [[] for _ in range(count)]
    for shape in (BIG, (7, 5), (13,)):
        for items in lists:
            items.append(device.asarray(np.abs(rng.standard_normal(shape)), dtype=dtype))
    return lists


def adam_many_cases(device, rng):
    """Three tensors at once (float32, float64; without and with state): rtol 0."""
    cases = []
    for dtype in ("float32", "float64"):
        for wd, state in ((0.0, False), (0.05, True)):
            ps, gs, ms, vs = _lists(device, rng, dtype, 4)
            if not state:
                ms = vs = [None] * 3
            hyper = {"lr_t": 0.01, "beta1": 0.8, "beta2": 0.95, "eps_t": 1e-6,
                     "weight_decay": wd}
            cases.append(((ps, gs, ms, vs), hyper, 0))
    return cases


def sgd_many_cases(device, rng):
    """Three tensors at once, with and without momentum and its state, and with the state of
    some only (which a fast version may leave to the reference): rtol 0."""
    cases = []
    for dtype in ("float32", "float64"):
        for momentum, wd, state in ((0.0, 0.0, False), (0.9, 0.01, False), (0.5, 0.01, True),
                                    (0.5, 0.0, "some")):
            ps, gs, us = _lists(device, rng, dtype, 3)
            us = (us if state is True else [None] * 3 if not state else [us[0], None, us[2]])
            hyper = {"lr": 0.1, "momentum": momentum, "weight_decay": wd}
            cases.append(((ps, gs, us), hyper, 0))
    return cases


def flat_concat_cases(device, rng):
    """An optimizer's small gradients: 1-d and 4-d arrays, more than a launch's 32 slots, a
    transposed view, an empty one, and a mix of dtypes (the reference's): a copy, rtol 0."""
    cases = []
    for dtype, count in (("float32", 30), ("float64", 70)):
        shapes = [tuple(int(k) for k in rng.integers(1, 6, size=int(rng.integers(1, 5))))
                  for _ in range(count)]
        arrays = [device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]
        arrays[3] = device.xp.permute_dims(device.asarray(rng.standard_normal((3, 5)),
                                                          dtype=dtype), (1, 0))
        arrays[5] = device.asarray(np.zeros((0, 4)), dtype=dtype)
        cases.append(((arrays,), {}, 0))
    mixed = [device.asarray(rng.standard_normal(4), dtype=d) for d in ("float32", "float64")]
    return cases + [((mixed,), {}, 0)]


# (shape, axes): rows (the last axes), columns (the first), and a layout the fast versions
# hand to the reference; sizes that leave a block's threads idle and need several blocks
NORM_LAYOUTS = [((6, 5), (1,)), ((6, 5), (0,)), ((3, 4, 37), (2,)), ((300, 70), (0,)),
                ((2, 3, 4), (1, 2)), ((2, 3, 4), (0, 1)), ((2, 3, 4), (0, 2)), ((5, 600), (1,)),
                ((6, 5), ()),  # no axes: nothing reduced (handed to the reference)
                ((4, 3, 5, 6), (0, 2, 3)), ((40, 3, 2, 2), (0, 2, 3)),  # BatchNorm2d's NCHW
                # many rows of few columns: cuda's column statistics in parts
                ((9000, 5), (0,)), ((2, 3, 70, 70), (0, 2, 3))]


def long_sum(shape: tuple, axes: tuple, rtol: float) -> float:
    """`rtol` for sums over fewer than 4,096 terms, ten times it for longer ones (the
    rounding errors of a sum grow with its terms, and a sum can cancel to below them)."""
    terms = math.prod(shape[a] for a in axes)
    return rtol if terms < 4096 else 10 * rtol


def norm_inputs(device, rng):
    """(x, axes, rtol) per layout and dtype: float32 sums in another order agree to a few
    ulps (1e-5 relative, of values about 1), float64 ones to 1e-12, sums of thousands of terms
    to ten times that (`long_sum`); plus a transposed view."""
    out = []
    for dtype, rtol in (("float32", 1e-5), ("float64", 1e-12)):
        for shape, axes in NORM_LAYOUTS:
            x = rng.standard_normal(shape) * 3 + 1
            out.append((device.asarray(x, dtype=dtype), axes, long_sum(shape, axes, rtol)))
    view = device.xp.permute_dims(device.asarray(rng.standard_normal((7, 40)), dtype="float32"),
                                  (1, 0))
    channels_last = device.xp.permute_dims(  # a convolution's NCHW output, NHWC in memory
        device.asarray(rng.standard_normal((4, 5, 6, 3)), dtype="float32"), (0, 3, 1, 2))
    return out + [(view, (1,), 1e-5), (view, (0,), 1e-5), (channels_last, (0, 2, 3), 1e-5)]


def normalize_cases(device, rng):
    return [((x, axes, 1e-5), {}, rtol) for x, axes, rtol in norm_inputs(device, rng)]


def normalize_grad_cases(device, rng):
    cases = []
    for x, axes, rtol in norm_inputs(device, rng):
        y, s, _, _ = normalize_portable(x, axes, 1e-5)
        g = device.asarray(rng.standard_normal(tuple(x.shape)), dtype=x.dtype)
        cases.append(((g, y, s, axes), {}, rtol))
    return cases


def batch_inputs(device, rng):
    """(x, w, b, rtol): BatchNorm1d's (N, C) and BatchNorm2d's NCHW (contiguous, and a
    convolution's channels-last output) in float32 and float64 (PyTorch's batch norm sums in
    its own order: a few ulps)."""
    out = []
    for dtype, rtol in (("float32", 1e-5), ("float64", 1e-12)):
        for shape in [(6, 5), (300, 70), (4, 3, 5, 6), (9000, 5)]:  # (the last: in parts)
            x, w, b = (device.asarray(rng.standard_normal(s) * 3 + 1, dtype=dtype)
                       for s in [shape, shape[1:2], shape[1:2]])
            out.append((x, w, b, long_sum(shape, (0, *range(2, len(shape))), rtol)))
    x = device.xp.permute_dims(device.asarray(rng.standard_normal((4, 5, 6, 3)),
                                              dtype="float32"), (0, 3, 1, 2))
    w, b = (device.asarray(rng.standard_normal(3), dtype="float32") for _ in range(2))
    return out + [(x, w, b, 1e-5)]


def batch_norm_cases(device, rng):
    return [((x, w, b, 1e-5), {}, rtol) for x, w, b, rtol in batch_inputs(device, rng)]


def batch_norm_grad_cases(device, rng):
    """With the forward's y, and without (a fast forward keeps none)."""
    from needle.ops.affine_norm import batch_norm_portable

    cases = []
    for x, w, b, rtol in batch_inputs(device, rng):
        _, y, s, mean, _ = batch_norm_portable(x, w, b, 1e-5)
        g = device.asarray(rng.standard_normal(tuple(x.shape)), dtype=x.dtype)
        cases += [((g, x, w, y, s, mean), {}, rtol), ((g, x, w, None, s, mean), {}, rtol)]
    return cases


def layer_norm_cases(device, rng):
    """LayerNorm's (..., C) over the last axis: 2-d, 3-d and a transposed view."""
    cases = []
    for dtype, rtol in (("float32", 1e-5), ("float64", 1e-12)):
        for shape in [(6, 5), (3, 4, 37), (5, 600)]:
            x, w, b = (device.asarray(rng.standard_normal(s) * 3 + 1, dtype=dtype)
                       for s in [shape, shape[-1:], shape[-1:]])
            cases.append(((x, w, b, 1e-5), {}, rtol))
    view = device.xp.permute_dims(device.asarray(rng.standard_normal((7, 40)), dtype="float32"),
                                  (1, 0))
    w, b = (device.asarray(rng.standard_normal(7), dtype="float32") for _ in range(2))
    return cases + [((view, w, b, 1e-5), {}, 1e-5)]


def layer_norm_grad_cases(device, rng):
    """With the forward's y, and without (a fast forward keeps none)."""
    from needle.ops.affine_norm import layer_norm_portable

    cases = []
    for (x, w, b, eps), _, rtol in layer_norm_cases(device, rng):
        _, y, s, mean = layer_norm_portable(x, w, b, eps)
        g = device.asarray(rng.standard_normal(tuple(x.shape)), dtype=x.dtype)
        cases += [((g, x, w, y, s, mean), {}, rtol), ((g, x, w, None, s, mean), {}, rtol)]
    return cases


def dropout_cases(device, rng):
    """float32 and float64 x against float32 draws (a GPU's generator) and float64 ones
    (numpy's), with draws equal to keep (kept) and x holding -0, inf and NaN: rtol 0."""
    cases = []
    for xdt, udt in (("float32", "float32"), ("float32", "float64"), ("float64", "float32")):
        x = rng.standard_normal((33, 65)) * 4
        x[0, :3] = [-0.0, np.inf, np.nan]
        u = rng.random((33, 65))
        u[0, :6] = 0.7
        cases.append(((device.asarray(x, dtype=xdt), device.asarray(u, dtype=udt), 0.7), {}, 0))
    return cases


def relu_grad_cases(device, rng):
    """float32 and float64; g holding -0, inf and NaN where a > 0 and where not, a holding
    0, -0 and NaN (masked); and mixed dtypes a fast version leaves to the reference: rtol 0."""
    cases = []
    for gdt, adt in (("float32", "float32"), ("float64", "float64"), ("float32", "float64")):
        g, a = rng.standard_normal((2, 33, 65)) * 4
        g[0, :6], a[0, :6] = [-0.0, np.inf, np.nan] * 2, [1, 1, 1, -1, -1, -1]
        a[1, :3] = [0.0, -0.0, np.nan]
        cases.append(((device.asarray(g, dtype=gdt), device.asarray(a, dtype=adt)), {}, 0))
    xp = device.xp
    g, a = (device.asarray(rng.standard_normal((4, 5, 6, 3)), dtype="float32")
            for _ in range(2))
    nchw = (0, 3, 1, 2)  # both a convolution's channels-last output; then layouts that differ
    cases.append(((xp.permute_dims(g, nchw), xp.permute_dims(a, nchw)), {}, 0))
    other = xp.permute_dims(device.asarray(rng.standard_normal((4, 6, 5, 3)), dtype="float32"),
                            (0, 2, 1, 3))  # (4, 5, 6, 3), laid out otherwise than g
    cases.append(((g, other), {}, 0))
    cases.append(((g[:, ::2], a[:, ::2]), {}, 0))  # alike, but not dense
    return cases


def relu_cases(device, rng):
    """float32 and float64 with 0, -0, inf, -inf and NaN; a channels-last NCHW view, a
    strided slice and an int64 array (the last two: the reference's on cuda): rtol 0."""
    cases = []
    for dtype in ("float32", "float64"):
        a = rng.standard_normal((3, 41, 7)) * 4
        a[0, 0, :6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan]
        cases.append(((device.asarray(a, dtype=dtype),), {}, 0))
    xp = device.xp
    nhwc = device.asarray(rng.standard_normal((4, 5, 6, 3)), dtype="float32")
    cases.append(((xp.permute_dims(nhwc, (0, 3, 1, 2)),), {}, 0))
    cases.append(((nhwc[:, ::2],), {}, 0))
    cases.append(((device.asarray(rng.integers(-5, 5, (4, 6)), dtype="int64"),), {}, 0))
    return cases


def checked_indices_cases(device, rng):
    """int64 indices all good, some bad (negative, n and above), a transposed view, one
    index, and an int32 array a fast version leaves to the reference: rtol 0."""
    ids = rng.integers(-3, 12, (7, 40))
    cases = [((device.asarray(a, dtype="int64"), 10), {}, 0)
             for a in (np.clip(ids, 0, 9), ids, np.array([4]))]
    view = device.xp.permute_dims(device.asarray(ids, dtype="int64"), (1, 0))
    return cases + [((view, 10), {}, 0), ((device.asarray(ids, dtype="int32"), 10), {}, 0)]


def moving_average_cases(device, rng):
    def arrays(*shapes, dtype="float32"):
        return [device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]

    return [((*arrays((70,), (1, 70)), 0.1), {}, 0),
            ((*arrays((5,), (1, 5), dtype="float64"), 0.3), {}, 0),
            ((*arrays((5,)), *arrays((1, 5), dtype="float64"), 0.1), {}, 0)]  # promoted


def moving_averages_cases(device, rng):
    """Both statistics at once (float32, float64), and the mixed dtypes a fast version leaves
    to the reference: rtol 0."""
    def arrays(*shapes, dtype="float32"):
        return [device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]

    return [((*arrays((70,), (70,), (1, 70), (1, 70)), 0.1), {}, 0),
            ((*arrays((5,), (5,), (1, 5), (1, 5), dtype="float64"), 0.3), {}, 0),
            ((*arrays((5,), (5,)), *arrays((1, 5), (1, 5), dtype="float64"), 0.1), {}, 0)]


def matmul_cases(device, rng):
    """2-d products, a transposed view, float64, batched products: one with a broadcast side
    (a convolution's input adjoint) and one of transposed views (attention's). On cuda every
    one is a direct cuBLAS call, against the reference's cupy.matmul at rtol 0 (the same
    bits on an H100)."""
    def arrays(*shapes, dtype="float32"):
        return [device.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]

    a, b = arrays((300, 70), (130, 70))
    g, w = arrays((1, 96, 8), (9, 5, 8))
    q, k = arrays((6, 4, 16), (6, 4, 16))
    return [(tuple(arrays((5, 4), (4, 3))), {}, 0),
            ((a, device.xp.permute_dims(b, (1, 0))), {}, 0),
            (tuple(arrays((64, 33), (33, 17), dtype="float64")), {}, 0),
            (tuple(arrays((2, 5, 4), (2, 4, 3))), {}, 0),
            ((g, device.xp.matrix_transpose(w)), {}, 0),
            ((device.xp.permute_dims(q, (1, 0, 2)), device.xp.permute_dims(k, (1, 2, 0))), {}, 0)]


def lstm_arrays(device, rng, dtype, shapes):
    return [device.asarray(rng.standard_normal(s) * 2, dtype=dtype) for s in shapes]


def lstm_state_cases(device, rng):
    """z (B, 4H), c (B, H) or None; float32 and float64; a gates view of a wider array."""
    cases = []
    for dtype in ("float32", "float64"):
        z, c = lstm_arrays(device, rng, dtype, [(5, 12), (5, 3)])
        cases += [((z, c), {}, 0), ((z, None), {}, 0)]
    wide = lstm_arrays(device, rng, "float32", [(5, 20)])[0]
    return cases + [((wide[:, 4:16], lstm_arrays(device, rng, "float32", [(5, 3)])[0]), {}, 0)]


def lstm_output_cases(device, rng):
    return [(tuple(lstm_arrays(device, rng, dtype, [(5, 12), (5, 3)])), {}, 0)
            for dtype in ("float32", "float64")]


def lstm_state_grad_cases(device, rng):
    cases = []
    for dtype in ("float32", "float64"):
        z, c, g = lstm_arrays(device, rng, dtype, [(5, 12), (5, 3), (5, 3)])
        cases += [((z, c, g), {}, 0), ((z, None, g), {}, 0)]
    return cases


def lstm_output_grad_cases(device, rng):
    return [(tuple(lstm_arrays(device, rng, dtype, [(5, 12), (5, 3), (5, 3)])), {}, 0)
            for dtype in ("float32", "float64")]


def col2im_cases(device, rng):
    """Overlapping windows (sums in tap order from zero: bit-equal), padded ones, disjoint
    ones (stride above the kernel: some pixels read by no window), float32 and float64."""
    cases = []
    for (n, h, w, c), kernel, stride, padding, dtype in [
            ((2, 7, 6, 3), (3, 3), 1, 1, "float32"), ((2, 7, 6, 3), (2, 3), 2, 0, "float64"),
            ((1, 9, 8, 2), (5, 5), 3, 2, "float32"), ((2, 8, 8, 4), (2, 2), 3, 0, "float32")]:
        ho = (h + 2 * padding - kernel[0]) // stride + 1
        wo = (w + 2 * padding - kernel[1]) // stride + 1
        taps = rng.standard_normal((kernel[0] * kernel[1], n, ho, wo, c))
        cases.append(((device.asarray(taps, dtype=dtype), (n, h, w, c), kernel, stride,
                       padding), {}, 0))
    return cases


# (input NHWC, kernel, stride, padding, bias): overlapping windows, a stride that leaves the
# last rows unread, a 1x1 kernel, wide padding; float32 and float64
CONV_LAYOUTS = [((2, 7, 6, 3), (3, 3), 1, 1, True), ((2, 7, 6, 2), (3, 2), 2, 0, False),
                ((3, 5, 5, 4), (1, 1), 1, 0, True), ((1, 9, 8, 2), (5, 5), 3, 2, False)]


def conv_inputs(device, rng):
    """(a, b, bias, stride, padding, g, rtol) per layout and dtype: torch's convolution sums
    in another order than im2col and a matmul: 1e-5 (float32) and 1e-12 (float64) relative,
    as absolute error too, on sums of about ten terms of about 1."""
    out = []
    for dtype, rtol in (("float32", 1e-5), ("float64", 1e-12)):
        for shape, (kh, kw), stride, padding, bias in CONV_LAYOUTS:
            n, h, w, c_in = shape
            ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
            a, b, c, g = (device.asarray(rng.standard_normal(s), dtype=dtype) for s in
                          [shape, (kh, kw, c_in, 3), (3,), (n, ho, wo, 3)])
            out.append((a, b, c if bias else None, stride, padding, g, rtol))
    return out


def _nchw(device, a):
    """The NHWC array `a` as a contiguous NCHW one (what a caller of layout "NCHW" holds)."""
    xp = device.xp
    return xp.asarray(xp.permute_dims(a, (0, 3, 1, 2)), copy=True)


def conv_cases(device, rng):
    """A view of an NCHW array, as the course's nn.Conv handed over, for the first layout
    too; and every layout as contiguous NCHW arrays, layout "NCHW" (nn.Conv's now)."""
    cases = [((a, b, bias, stride, padding), {}, rtol)
             for a, b, bias, stride, padding, _, rtol in conv_inputs(device, rng)]
    (a, b, bias, stride, padding), _, rtol = cases[0]
    nchw = _nchw(device, a)
    return cases + [((device.xp.permute_dims(nchw, (0, 2, 3, 1)), b, bias, stride, padding),
                     {}, rtol)] + [
        ((_nchw(device, a), b, bias, stride, padding, "NCHW"), {}, rtol)
        for a, b, bias, stride, padding, _, rtol in conv_inputs(device, rng)]


def conv_input_grad_cases(device, rng):
    """NHWC, and NCHW (layout "NCHW": the input's shape given in that layout)."""
    cases = []
    for a, b, _, stride, padding, g, rtol in conv_inputs(device, rng):
        n, h, w, c = a.shape
        cases += [((g, b, tuple(a.shape), stride, padding), {}, rtol),
                  ((_nchw(device, g), b, (n, c, h, w), stride, padding, "NCHW"), {}, rtol)]
    return cases


def conv_weight_grad_cases(device, rng):
    """Without the forward's windows, and (the reference's own call) with them; NHWC, and
    NCHW (layout "NCHW": the windows are still the NHWC input's)."""
    from needle.ops.im2col import im2col_portable

    cases = []
    for a, b, _, stride, padding, g, rtol in conv_inputs(device, rng):
        kernel = tuple(b.shape[:2])
        cols = im2col_portable(a, kernel, stride, padding)
        a_t, g_t = _nchw(device, a), _nchw(device, g)
        cases += [((a, g, kernel, stride, padding), {}, rtol),
                  ((a, g, kernel, stride, padding, cols), {}, rtol),
                  ((a_t, g_t, kernel, stride, padding, None, "NCHW"), {}, rtol),
                  ((a_t, g_t, kernel, stride, padding, cols, "NCHW"), {}, rtol)]
    return cases


def conv_grads_cases(device, rng):
    """NHWC without the bias and with the forward's windows; NCHW with the bias's adjoint."""
    from needle.ops.im2col import im2col_portable

    cases = []
    for a, b, _, stride, padding, g, rtol in conv_inputs(device, rng):
        cols = im2col_portable(a, tuple(b.shape[:2]), stride, padding)
        cases += [((g, a, b, stride, padding), {}, rtol),
                  ((g, a, b, stride, padding, cols), {}, rtol),
                  ((_nchw(device, g), _nchw(device, a), b, stride, padding, None, "NCHW", True),
                   {}, rtol)]
    return cases


def softmax_inputs(device, rng):
    """Attention-like logits (B, H, T, T) in float32 and float64, a row of -inf and one of
    huge values, a transposed view, a 2-d array and a causal mask wider than it is tall."""
    out = []
    for dtype in ("float32", "float64"):
        z = rng.standard_normal((2, 3, 5, 5)) * 4
        z[0, 0, 1] = -np.inf  # an all -inf row: shifted by 0, NaN after the division
        z[1, 2, 3] = 1e30
        if dtype == "float64":  # a row the mask's size shows in: 3e38 + NEG_MAX < 0
            z[1, 1, 2] = 3e38
        out.append(device.asarray(z, dtype=dtype))
    view = device.xp.permute_dims(device.asarray(rng.standard_normal((6, 4)),
                                                 dtype="float32"), (1, 0))
    return out + [view, device.asarray(rng.standard_normal((3, 7)), dtype="float32")]


def softmax_rtol(device) -> float:
    """cpu makes the reference's passes (rtol 0); cuda's block and PyTorch's softmax sum
    each row in another order: a few ulps."""
    return 1e-6 if device.kind in ("cuda", "torch") else 0


def softmax_cases(device, rng):
    """Every input with temperature 1 and 3, causal or not."""
    return [((z, temperature, causal), {}, softmax_rtol(device))
            for z in softmax_inputs(device, rng)
            for temperature in (1.0, 3.0) for causal in (False, True)]


def softmax_grad_cases(device, rng):
    from needle.ops.softmax import softmax_portable

    cases = []
    for z in softmax_inputs(device, rng):
        y = softmax_portable(z, 1.0, True)
        g = device.asarray(rng.standard_normal(tuple(z.shape)), dtype=z.dtype)
        cases += [((y, g, temperature), {}, softmax_rtol(device)) for temperature in (1.0, 3.0)]
    return cases


def sum_cases(device, rng):
    """Rows, columns, keepdims or not, all axes, float64, a view, a long sum over few
    columns (cuda: in parts of 1,024 rows, then the parts) and layouts the cuda version
    leaves to cupy (interior axes; few long rows): float32 sums in another order agree to a
    few ulps (1e-5 relative, 1e-5 absolute on terms of about 1)."""
    cases = []
    for shape, axes, keepdims, dtype in [
            ((6, 5), (1,), True, "float32"), ((6, 5), (0,), False, "float32"),
            ((300, 70), (0,), True, "float32"), ((3, 4, 37), (2,), False, "float64"),
            ((2, 3, 4), (1, 2), True, "float32"), ((2, 3, 4), (0, 1), False, "float32"),
            ((2, 3, 4), (0, 2), False, "float32"), ((5, 600), None, False, "float32"),
            ((2, 50000), (1,), False, "float32"), ((70000, 3), (0,), True, "float32")]:
        a = device.asarray(rng.standard_normal(shape), dtype=dtype)
        cases.append(((a, axes, keepdims), {}, 1e-5 if dtype == "float32" else 1e-12))
    view = device.xp.permute_dims(device.asarray(rng.standard_normal((7, 40)), dtype="float32"),
                                  (1, 0))
    channels_last = device.xp.permute_dims(  # an NCHW bias adjoint, NHWC in memory
        device.asarray(rng.standard_normal((4, 5, 6, 3)), dtype="float32"), (0, 3, 1, 2))
    return cases + [((view, (1,), True), {}, 1e-5), ((channels_last, (0, 2, 3), False), {}, 1e-5),
                    ((channels_last, (0, 2, 3), True), {}, 1e-5)]


CASES = {"im2col": im2col_cases, "index_add": index_add_cases,
         "softmax_xent": softmax_xent_cases, "softmax_xent_grad": softmax_xent_grad_cases,
         "add_to_fresh": add_to_fresh_cases, "add_n": add_n_cases, "adam": adam_cases,
         "sgd": sgd_cases, "adam_many": adam_many_cases, "sgd_many": sgd_many_cases,
         "flat_concat": flat_concat_cases,
         "normalize": normalize_cases, "normalize_grad": normalize_grad_cases,
         "batch_norm": batch_norm_cases, "batch_norm_grad": batch_norm_grad_cases,
         "layer_norm": layer_norm_cases, "layer_norm_grad": layer_norm_grad_cases,
         "dropout": dropout_cases, "relu_grad": relu_grad_cases, "relu": relu_cases,
         "checked_indices": checked_indices_cases,
         "moving_average": moving_average_cases, "moving_averages": moving_averages_cases,
         "matmul": matmul_cases, "lstm_state": lstm_state_cases,
         "lstm_output": lstm_output_cases, "lstm_state_grad": lstm_state_grad_cases,
         "lstm_output_grad": lstm_output_grad_cases, "col2im": col2im_cases,
         "sum": sum_cases, "conv": conv_cases, "conv_input_grad": conv_input_grad_cases,
         "conv_weight_grad": conv_weight_grad_cases, "conv_grads": conv_grads_cases,
         "softmax": softmax_cases, "softmax_grad": softmax_grad_cases}
#: kernels with an output only the reference fills, as a cache for a later kernel (conv's
#: windows, batch norm's y: None where the fast version keeps none): compared are the others
COMPARED = {"conv": lambda result: result[0],
            "batch_norm": lambda result: result[:1] + result[2:],  # y: a fast one keeps none
            "layer_norm": lambda result: result[:1] + result[2:]}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def on_host(device, result):
    """The result's arrays as numpy arrays, a tuple (nested tuples and lists: flattened)."""
    if isinstance(result, (tuple, list)):
        return tuple(a for r in result for a in _as_tuple(on_host(device, r)))
    return None if result is None else device.to_numpy(device.asarray(result))


def test_every_registered_kernel_has_a_case_and_names_known_kinds():
    assert set(REGISTRY) == set(CASES)
    for kernel in REGISTRY.values():
        assert set(kernel.fast) <= set(backends.DEVICES), kernel


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_fast_version_takes_its_references_calls(name):
    """The same parameters, kinds and defaults as the reference (a fast version missing a
    default broke every two-argument call of SUM on the GPU, where no cpu test could see it)."""
    import inspect

    def params(fn):  # (name, default) per parameter; positional-only ones (operator.add's)
        return [(None if p.kind is p.POSITIONAL_ONLY else p.name, p.default)  # by place
                for p in inspect.signature(fn).parameters.values()]

    kernel = REGISTRY[name]
    expected = params(kernel.reference)
    for kind in kernel.fast:
        got = params(kernel.implementation(kind))
        assert [g if e[0] else (None, g[1]) for g, e in zip(got, expected)] == expected and (
            len(got) == len(expected)), f"{name} on {kind}: {got} for {expected}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_fast_path_names_a_function(name):
    kernel = REGISTRY[name]
    for kind, path in kernel.fast.items():  # imports numpy-side modules only, never cupy
        assert callable(kernel.implementation(kind)), path
        assert kernel.implementation(kind) is not kernel.reference


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.filterwarnings("ignore:divide by zero encountered in log")  # the -inf row's
@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")
@pytest.mark.filterwarnings("ignore:divide by zero encountered in divide")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # softmax's -inf row
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")
def test_fast_kernel_gives_the_references_numbers(name, device):
    kernel = REGISTRY[name]
    if device.kind not in kernel.fast:
        pytest.skip(f"{name} has no fast version on {device.kind}: the reference is what runs")
    fast = kernel.implementation(device.kind)
    got = CASES[name](device, np.random.default_rng(5))
    expected = CASES[name](device, np.random.default_rng(5))
    for (args, kwargs, rtol), (ref_args, ref_kwargs, _) in zip(got, expected):
        assert kernel.on(args[0]) is fast  # what a call of the kernel runs on this device
        pick = COMPARED.get(name, lambda r: r)
        result = on_host(device, pick(kernel(*args, **kwargs)))  # NotImplemented: reference
        reference = on_host(device, pick(kernel.reference(*ref_args, **ref_kwargs)))
        results = result if isinstance(result, tuple) else (result,)
        references = reference if isinstance(reference, tuple) else (reference,)
        assert len(results) == len(references)
        for a, b in zip(results, references):
            if b is None:
                assert a is None
                continue
            assert a.dtype == b.dtype and a.shape == b.shape
            if rtol:
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
            else:
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["adam_many", "sgd_many"])
def test_the_foreach_updates_give_the_references_numbers_on_the_cpu(name):
    """adam_foreach and sgd_foreach, which the kernels run on a GPU only (on the cpu a fresh
    array costs more than a launch, and the lists go to the reference), on torch's cpu: the
    reference's numbers to the bit (the sgd case of mixed momentum state: NotImplemented)."""
    device = ndl.backends.torch("cpu")
    if not device.enabled():
        pytest.skip(device.unavailable_reason())
    from needle.backends import optimizer_updates_torch as updates

    kernel = REGISTRY[name]
    args, kwargs, _ = CASES[name](device, np.random.default_rng(5))[0]
    assert kernel.implementation("torch")(*args, **kwargs) is NotImplemented  # (the cpu's)
    foreach = getattr(updates, name.replace("_many", "_foreach"))
    cases = zip(CASES[name](device, np.random.default_rng(5)),
                CASES[name](device, np.random.default_rng(5)))
    for (args, kwargs, _), (ref_args, ref_kwargs, _) in cases:
        result = foreach(*args, **kwargs)
        if result is NotImplemented:
            assert name == "sgd_many" and len({u is None for u in args[2]}) == 2
            continue
        got, expected = on_host(device, result), on_host(device, kernel.reference(
            *ref_args, **ref_kwargs))
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert (a is None) == (b is None)
            if b is not None:
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


def test_the_segment_sum_is_deterministic(device):
    """Repeated ids summed in a fixed order (cpu: a stable sort and reduceat; cuda: a stable
    sort and a kernel summing each run), not by atomic adds in whatever order a GPU runs
    them: the same bits at every call. The two orders differ (float32: 1e-5 here)."""
    from needle.backends.index_add import index_add_cpu

    if device.kind not in ("cpu", "cuda"):
        pytest.skip(f"{device.kind}'s scatter-add is its library's")
    rng = np.random.default_rng(9)
    ids, values = rng.integers(0, 6, 3000), rng.standard_normal((3000, 2, 5)).astype(np.float32)
    runs = [device.to_numpy(REGISTRY["index_add"](device.asarray(ids, dtype="int64"),
                                                  device.asarray(values), 8)) for _ in range(3)]
    for again in runs[1:]:
        np.testing.assert_array_equal(again, runs[0])
    np.testing.assert_allclose(runs[0], index_add_cpu(ids, values, 8), rtol=1e-4, atol=1e-4)


def test_an_in_place_kernel_returns_the_arrays_it_updated():
    param, grad = np.zeros((3, 2)), np.ones((3, 2))
    m, v = np.zeros((3, 2)), np.zeros((3, 2))
    out = REGISTRY["adam"](param, grad, m, v, lr_t=0.1, beta1=0.9, beta2=0.99, eps_t=1e-8,
                           weight_decay=0.0)
    assert out[0] is param and out[1] is m and out[2] is v and (param != 0).all()
    strict = ndl.strict()  # no fast version: the reference returns new arrays
    param = strict.asarray(np.zeros((3, 2)))
    out = REGISTRY["adam"](param, strict.asarray(np.ones((3, 2))), None, None, lr_t=0.1,
                           beta1=0.9, beta2=0.99, eps_t=1e-8, weight_decay=0.0)
    assert out[0] is not param and (strict.to_numpy(param) == 0).all()


# ----- resolution ------------------------------------------------------------------------------
@pytest.fixture
def registry(monkeypatch):
    """An empty registry for kernels made by a test."""
    monkeypatch.setattr(kernels, "REGISTRY", {})
    return kernels.REGISTRY


def test_a_kind_without_a_fast_version_runs_the_reference_and_nothing_is_imported(registry):
    def scale(a, k):
        return a * k

    kernel = Kernel("scale", scale, fast={"cpu": "needle_no_such_module:scale"})
    assert registry == {"scale": kernel}
    strict = ndl.strict()
    a = strict.asarray([1.0, 2.0])
    np.testing.assert_array_equal(strict.to_numpy(kernel(a, 3.0)), [3.0, 6.0])
    assert kernel.on(a) is scale
    # cpu's fast version is looked for at its first use only, not when the kernel was made
    with pytest.raises(ModuleNotFoundError, match="needle_no_such_module"):
        kernel(np.ones(2), 3.0)
    with pytest.raises(ValueError, match="'scale' is already declared"):
        Kernel("scale", scale)


def test_a_resolved_kernel_is_one_lookup_by_array_type(registry, monkeypatch):
    kernel = Kernel("negative", lambda a: -a, fast={"cpu": "operator:neg"})
    a = np.arange(3.0)
    np.testing.assert_array_equal(kernel(a), -a)
    assert kernel.on(a).__module__ == "_operator"

    def no_lookup(array):
        raise AssertionError("the device was looked up again")

    monkeypatch.setattr(kernels, "device_of", no_lookup)
    np.testing.assert_array_equal(kernel(a), -a)


def test_a_fast_version_may_leave_a_call_to_the_reference(registry, monkeypatch):
    import operator

    kernel = Kernel("negative", lambda a: -a, fast={"cpu": "operator:neg"})
    monkeypatch.setattr(operator, "neg", lambda a: NotImplemented if a.ndim == 2 else a * 0)
    np.testing.assert_array_equal(kernel(np.ones(3)), np.zeros(3))  # the fast version's
    np.testing.assert_array_equal(kernel(np.ones((1, 3))), -np.ones((1, 3)))  # the reference's


def test_reference_only_runs_the_references_and_restores_the_fast_versions(registry):
    kernel = Kernel("negative", lambda a: -a, fast={"cpu": "operator:neg"})
    a = np.arange(3.0)
    fast = kernel.on(a)
    with reference_only(kernel):
        assert kernel.on(a) is kernel.reference
        np.testing.assert_array_equal(kernel(a), -a)
    assert kernel.on(a) is fast


def test_fast_versions_are_imported_at_their_first_use_not_at_import():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import needle as ndl

        fast = {"needle.backends." + name for name in (
            "im2col", "index_add", "cross_entropy", "add_to_fresh", "optimizer_updates")}
        assert not fast & set(sys.modules), fast & set(sys.modules)
        x = np.ones((1, 4, 4, 1))
        w = np.ones((3, 3, 1, 1))
        for device in (ndl.strict(), ndl.cpu()):
            ndl.conv(ndl.Tensor(x, device=device), ndl.Tensor(w, device=device))
            print(sorted(fast & set(sys.modules)))
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # strict has no fast gather (the reference ran); cpu's was imported when it first ran
    assert out.stdout.splitlines() == ["[]", "['needle.backends.im2col']"]
