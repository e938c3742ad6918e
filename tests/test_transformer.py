"""Attention and the Transformer: MultiHeadAttention, AttentionLayer, TransformerLayer and
Transformer against PyTorch (weights copied in) and a numpy reference, the course's draw
order, dropout masks drawn in forward order, the causal mask, errors and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.nn import Embedding, LayerNorm1d, Linear
from needle.nn.transformer import (
    AttentionLayer,
    MultiHeadAttention,
    Transformer,
    TransformerLayer,
)
from needle.testing import check_gradients

NEG_MAX = -np.finfo(np.float32).max
TOL = dict(rtol=1e-5, atol=1e-5)
# the small sizes: batch, time, embedding, heads, head dimension, hidden
B, T, E, H, D, HIDDEN = 2, 5, 8, 2, 4, 16


def tensor(a, device, dtype="float32", requires_grad=False):
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=requires_grad)


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def backward(out, c, device):
    """Backpropagate sum(out * c)."""
    ops.summation(out * tensor(c, device)).backward()


def projections(layer):
    return [layer.q_projection, layer.k_projection, layer.v_projection, layer.out_projection]


# ----- numpy reference (float64; `drop` applies a dropout mask, drawn from numpy) -------------
def no_drop(a):
    return a


def dropper(p, device):
    """The course's dropout on numpy arrays: one draw of the device's training generator per
    call (np.random.rand on cpu and strict)."""
    return lambda a: a * (device.to_numpy(device.random(a.shape)) <= 1 - p) / (1 - p)


def np_softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_mha(q, k, v, causal, drop=no_drop):
    z = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        z = z + NEG_MAX * np.triu(np.ones(z.shape[-2:]), 1)
    probs = drop(np_softmax(z))
    return probs @ v, probs


def np_layer_norm(x, norm):
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + norm.eps)
    return x * norm.weight.numpy() + norm.bias.numpy()


def np_attention(layer, q, k, v, drop=no_drop):
    def heads(x, norm, proj):
        y = np_layer_norm(x, norm) @ proj.weight.numpy()
        return y.reshape(x.shape[:2] + (layer.num_head, -1)).transpose(0, 2, 1, 3)
    out, _ = np_mha(heads(q, layer.prenorm_q, layer.q_projection),
                    heads(k, layer.prenorm_k, layer.k_projection),
                    heads(v, layer.prenorm_v, layer.v_projection), layer.attn.causal, drop)
    out = out.transpose(0, 2, 1, 3).reshape(q.shape[:2] + (-1,))
    return out @ layer.out_projection.weight.numpy()


def np_transformer_layer(layer, x, drop=no_drop):
    x = x + drop(np_attention(layer.attn, x, x, x, drop))
    w1, b1, w2, b2 = (p.numpy() for p in (layer.linear1.weight, layer.linear1.bias,
                                          layer.linear2.weight, layer.linear2.bias))
    h = drop(np.maximum(np_layer_norm(x, layer.norm) @ w1 + b1, 0))
    return x + drop(h @ w2 + b2)


# ----- PyTorch reference (float32; the needle parameters become torch leaves) ----------------
class Mirror:
    """Torch leaf copies of needle parameters (needle Linear weights are (in, out) = W^T),
    made once each, so their gradients can be compared."""

    def __init__(self, torch):
        self.torch, self.leaves = torch, {}

    def __call__(self, p):
        if id(p) not in self.leaves:
            self.leaves[id(p)] = self.torch.tensor(p.numpy(), requires_grad=True)
        return self.leaves[id(p)]

    def grad(self, p):
        return self.leaves[id(p)].grad.numpy()


def torch_attention(F, w, layer, q, k, v):
    def heads(x, norm, proj):
        y = F.layer_norm(x, x.shape[-1:], w(norm.weight), w(norm.bias), norm.eps)
        y = y @ w(proj.weight)
        return y.reshape(x.shape[:2] + (layer.num_head, -1)).transpose(1, 2)
    out = F.scaled_dot_product_attention(heads(q, layer.prenorm_q, layer.q_projection),
                                         heads(k, layer.prenorm_k, layer.k_projection),
                                         heads(v, layer.prenorm_v, layer.v_projection),
                                         is_causal=layer.attn.causal)
    out = out.transpose(1, 2).reshape(q.shape[:2] + (-1,))
    return out @ w(layer.out_projection.weight)


def torch_transformer_layer(F, w, layer, x):
    x = x + torch_attention(F, w, layer.attn, x, x, x)
    n = layer.norm
    h = F.layer_norm(x, x.shape[-1:], w(n.weight), w(n.bias), n.eps)
    h = F.relu(h @ w(layer.linear1.weight) + w(layer.linear1.bias))
    return x + h @ w(layer.linear2.weight) + w(layer.linear2.bias)


def torch_transformer(F, w, model, x):
    x = x.transpose(0, 1) + w(model.pos_embedding.weight)[:x.shape[0]]
    for layer in model.layers:
        x = torch_transformer_layer(F, w, layer, x)
    return x.transpose(0, 1)


def compare_with_torch(torch, device, module, inputs, reference, weights):
    """Outputs and the gradients of `weights` of needle's `module(*inputs)` and
    `reference(F, mirror, *torch inputs)` agree, with the cotangent c: d sum(out * c)."""
    out = module(*[tensor(a, device) for a in inputs])
    c = data(*out.shape, seed=9)
    backward(out, c, device)
    w = Mirror(torch)
    t_out = reference(torch.nn.functional, w,
                      *[torch.tensor(a, dtype=torch.float32) for a in inputs])
    (t_out * torch.tensor(c, dtype=torch.float32)).sum().backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), **TOL)
    for p in weights:
        np.testing.assert_allclose(p.grad.numpy(), w.grad(p), **TOL)


# ----- against PyTorch --------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_matches_pytorch(causal, device):
    torch = pytest.importorskip("torch")
    T_k = T if causal else 3
    q, k, v = data(B, H, T, D, seed=1), data(B, H, T_k, D, seed=2), data(B, H, T_k, D, seed=3)
    mha = MultiHeadAttention(causal=causal, device=device)
    out, probs = mha(*[tensor(a, device) for a in (q, k, v)])
    tq, tk, tv = (torch.tensor(a, dtype=torch.float32) for a in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), **TOL)
    assert probs.shape == (B, H, T, T_k)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_layer_matches_pytorch(causal, device):
    torch = pytest.importorskip("torch")
    np.random.seed(0)
    layer = AttentionLayer(E, H, D, k_features=6, v_features=7, out_features=3,
                           causal=causal, device=device)
    T_k = T if causal else 4
    inputs = (data(B, T, E, seed=1), data(B, T_k, 6, seed=2), data(B, T_k, 7, seed=3))
    compare_with_torch(torch, device, layer, inputs,
                       lambda F, w, q, k, v: torch_attention(F, w, layer, q, k, v),
                       [p.weight for p in projections(layer)])


def test_transformer_layer_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    np.random.seed(0)
    layer = TransformerLayer(E, H, D, HIDDEN, device=device)
    compare_with_torch(torch, device, layer, (data(B, T, E, seed=1),),
                       lambda F, w, x: torch_transformer_layer(F, w, layer, x),
                       [p.weight for p in projections(layer.attn)] + [layer.linear1.weight])


def test_transformer_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    np.random.seed(0)
    model = Transformer(E, HIDDEN, 2, num_head=H, dim_head=D, device=device, sequence_len=7)
    weights = [p.weight for layer in model.layers for p in projections(layer.attn)]
    compare_with_torch(torch, device, lambda x: model(x)[0], (data(T, B, E, seed=1),),
                       lambda F, w, x: torch_transformer(F, w, model, x),
                       weights + [model.pos_embedding.weight])


# ----- against numpy (runs without torch) -----------------------------------------------------
@pytest.mark.parametrize("causal, T_k, p", [(False, 3, 0.0), (True, T, 0.0), (True, T, 0.5)])
def test_multi_head_attention_matches_numpy(causal, T_k, p, device):
    q, k, v = data(B, H, T, D, seed=1), data(B, H, T_k, D, seed=2), data(B, H, T_k, D, seed=3)
    mha = MultiHeadAttention(dropout=p, causal=causal, device=device)
    ndl.manual_seed(4)
    out, probs = mha(*[tensor(a, device) for a in (q, k, v)])
    ndl.manual_seed(4)
    expected, expected_probs = np_mha(q, k, v, causal, dropper(p, device) if p else no_drop)
    np.testing.assert_allclose(probs.numpy(), expected_probs, **TOL)  # probs after dropout
    np.testing.assert_allclose(out.numpy(), expected, **TOL)


def test_dropout_masks_in_forward_order(device, monkeypatch):
    """Training with p > 0: the masks of the probs, the attention output, the ReLU and the
    second Linear, in that order, each one draw of the device's generator; eval draws none."""
    np.random.seed(0)
    layer = TransformerLayer(E, H, D, HIDDEN, dropout=0.5, device=device)
    x = data(B, T, E, seed=1)
    ndl.manual_seed(5)
    out = layer(tensor(x, device))
    ndl.manual_seed(5)
    np.testing.assert_allclose(out.numpy(), np_transformer_layer(layer, x, dropper(0.5, device)),
                               **TOL)

    calls, real = [], device.random
    monkeypatch.setattr(device, "random", lambda shape: calls.append(tuple(shape)) or real(shape))
    layer(tensor(x, device))
    assert calls == [(B, H, T, T), (B, T, E), (B, T, HIDDEN), (B, T, E)]
    calls.clear()
    out = layer.eval()(tensor(x, device))
    assert calls == []
    np.testing.assert_allclose(out.numpy(), np_transformer_layer(layer, x), **TOL)


def test_transformer_draw_order(device):
    """The positional table first, then per layer the q, k, v, out projections (no bias) and
    the two feed-forward Linears (weight, bias); the LayerNorms draw nothing."""
    np.random.seed(3)
    model = Transformer(E, HIDDEN, 2, num_head=H, dim_head=D, sequence_len=6, device=device)
    after = np.random.rand()
    np.random.seed(3)
    expected = [Embedding(6, E, device=device).weight]
    for _ in range(2):
        expected += [Linear(E, H * D, bias=False, device=device).weight for _ in range(3)]
        expected += [Linear(H * D, E, bias=False, device=device).weight]
        for n_in, n_out in ((E, HIDDEN), (HIDDEN, E)):
            lin = Linear(n_in, n_out, device=device)
            expected += [lin.weight, lin.bias]
    assert np.random.rand() == after
    named = list(model.named_parameters())
    drawn = [p for name, p in named if "norm" not in name]
    assert len(drawn) == len(expected)
    for got, want in zip(drawn, expected):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    norms = [p.numpy() for name, p in named if "norm" in name]
    assert len(norms) == 2 * 4 * 2  # q, k, v and feed-forward norms, weight and bias
    assert all(np.all(a == 1) or np.all(a == 0) for a in norms)


def test_attention_layer_draw_order_and_features(device):
    np.random.seed(1)
    layer = AttentionLayer(6, 2, 3, k_features=4, v_features=5, out_features=7, device=device)
    np.random.seed(1)
    expected = [Linear(n, 6, bias=False, device=device).weight for n in (6, 4, 5)]
    expected += [Linear(6, 7, bias=False, device=device).weight]
    for got, want in zip(projections(layer), expected):
        np.testing.assert_array_equal(got.weight.numpy(), want.numpy())
    assert [n.dim for n in (layer.prenorm_q, layer.prenorm_k, layer.prenorm_v)] == [6, 4, 5]
    q, k, v = (tensor(data(2, t, n), device) for t, n in ((3, 6), (3, 4), (3, 5)))
    assert layer.attn.causal and layer(q, k, v).shape == (2, 3, 7)
    assert isinstance(layer.prenorm_q, LayerNorm1d)


def test_causal_mask(device):
    mha = MultiHeadAttention(causal=True, device=device)
    mask = mha.create_causal_mask(3, 3, device, device.xp.float32).numpy()
    np.testing.assert_array_equal(mask, [[[[0, NEG_MAX, NEG_MAX], [0, 0, NEG_MAX], [0, 0, 0]]]])
    # the course's triu(ones, j - i + 1): 2 queries are the last 2 of 3 keys (a decoder
    # reading its cache), where PyTorch's is_causal aligns them with the first 2
    mask = mha.create_causal_mask(2, 3, device, device.xp.float32).numpy()
    np.testing.assert_array_equal(mask, [[[[0, 0, NEG_MAX], [0, 0, 0]]]])
    # more queries than keys: the first would see no key (its row all masked, attending to
    # every key alike), so the mask is refused, as attention and the causal softmax refuse it
    with pytest.raises(ValueError, match="a causal mask of 3 queries and 2 keys"):
        mha.create_causal_mask(3, 2, device, device.xp.float32)
    q = data(1, 2, 4, 3)
    _, probs = mha(*[tensor(q * 10, device)] * 3)
    probs = probs.numpy()
    assert np.all(probs[..., np.triu(np.ones((4, 4), bool), 1)] == 0)
    np.testing.assert_allclose(probs.sum(-1), 1, **TOL)


def test_causal_attention_of_fewer_queries_than_keys_uses_the_courses_mask(device):
    """2 queries against 5 keys: the fused softmax masks as create_causal_mask's addend does
    (the course's alignment: the queries are the last 2 positions), so query 0 sees keys 0-3
    (it saw keys 0-0 before) and query 1 all 5."""
    mha = MultiHeadAttention(causal=True, device=device)
    q, k = data(1, 2, 2, 3, seed=3), data(1, 2, 5, 3, seed=4)
    _, probs = mha(tensor(q, device), tensor(k, device), tensor(k, device))
    mask = mha.create_causal_mask(2, 5, device, device.xp.float32).numpy()
    z = q @ np.swapaxes(k, -1, -2) / np.sqrt(3) + mask
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(probs.numpy(), e / e.sum(-1, keepdims=True), **TOL)
    assert np.all(probs.numpy()[..., 0, 4] == 0) and np.all(probs.numpy()[..., 0, :4] > 0)


def test_the_courses_three_argument_mask_and_matmul(device):
    """create_causal_mask(i, j, device) as the course calls it (float32), and the course's
    batched `matmul(a, b_transpose)` helper."""
    mha = MultiHeadAttention(causal=True, device=device)
    mask = mha.create_causal_mask(2, 2, device)
    assert mask.dtype == "float32"
    np.testing.assert_array_equal(mask.numpy(), [[[[0, NEG_MAX], [0, 0]]]])
    a, b = data(2, 3, 4, 5, seed=1), data(2, 3, 6, 5, seed=2)
    out = mha.matmul(tensor(a, device), tensor(b, device))
    np.testing.assert_allclose(out.numpy(), a @ np.swapaxes(b, -1, -2), **TOL)


def test_fully_masked_rows_stay_finite(device):
    mha = MultiHeadAttention(causal=True, device=device)
    logits = tensor(np.full((1, 1, 2, 3), NEG_MAX), device)
    np.testing.assert_allclose(mha.softmax(logits).numpy(), np.full((1, 1, 2, 3), 1 / 3), **TOL)
    # huge scores on top of the mask: still finite probabilities
    q = data(1, 1, 3, 2) * 1e15
    out, probs = mha(*[tensor(q, device)] * 3)
    assert np.all(np.isfinite(probs.numpy())) and np.all(np.isfinite(out.numpy()))


def test_batch_first_and_state(device):
    x = data(T, B, E, seed=1)
    outs = []
    for batch_first in (False, True):
        np.random.seed(0)
        model = Transformer(E, HIDDEN, 1, num_head=H, dim_head=D, sequence_len=T,
                            batch_first=batch_first, device=device)
        out, h = model(tensor(x.transpose(1, 0, 2) if batch_first else x, device))
        assert out.shape == h.shape and np.all(h.numpy() == 0)
        outs.append(out.numpy())
    np.testing.assert_allclose(outs[1], outs[0].transpose(1, 0, 2), **TOL)
    assert (model.embedding_size, model.hidden_size, model.num_layers, model.sequence_len,
            model.batch_first) == (E, HIDDEN, 1, T, True)


def test_errors(device):
    model = Transformer(E, HIDDEN, 1, num_head=H, dim_head=D, sequence_len=4, device=device)
    with pytest.raises(ValueError, match=r"length 5 .*sequence_len=4"):
        model(tensor(data(5, B, E), device))
    with pytest.raises(ValueError, match="Transformer: expected x"):
        model(tensor(data(5, B, E + 1), device))
    mha = MultiHeadAttention(device=device)
    q = tensor(data(1, 2, 3, 4), device)
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        mha(q, tensor(data(1, 2, 3, 5), device), q)


@pytest.mark.parametrize("causal, T_k", [(False, 4), (True, 3)])
def test_multi_head_attention_gradients(causal, T_k, device):
    mha = MultiHeadAttention(causal=causal, device=device)
    check_gradients(lambda q, k, v: mha(q, k, v)[0], data(1, 2, 3, 2, seed=1),
                    data(1, 2, T_k, 2, seed=2), data(1, 2, T_k, 2, seed=3), device=device)


def test_self_attention_shares_one_normalisation(device):
    """k = v = q: one Normalize node feeds the three pre-norms, each with its own weight and
    bias (three ScaleShift nodes); output and every gradient equal those of passing k and v
    as separate tensors (three LayerNorm nodes). Where the device runs the library's own
    layer norm (torch) nothing is shared: three LayerNorm nodes either way."""
    from needle.ops.affine_norm import LAYER_NORM

    shares = LAYER_NORM.implementation(device.kind) is LAYER_NORM.reference
    np.random.seed(0)
    layer = AttentionLayer(E, H, D, device=device)
    rng = np.random.default_rng(7)
    for norm in (layer.prenorm_q, layer.prenorm_k, layer.prenorm_v):
        norm.weight.data = tensor(rng.standard_normal(E), device)
        norm.bias.data = tensor(rng.standard_normal(E), device)
    x, c = data(B, T, E, seed=1), data(B, T, E, seed=2)
    results = []
    for shared in (True, False):
        args = [tensor(x, device, requires_grad=True) for _ in range(1 if shared else 3)]
        out = layer(*args)
        nodes = [type(n.op).__name__ for n in ndl.autograd.find_topo_sort([out])
                 if n.op is not None]
        one = shared and shares
        assert (nodes.count("Normalize"), nodes.count("ScaleShift"), nodes.count("LayerNorm")
                ) == ((1, 3, 0) if one else (0, 0, 3)), nodes
        for p in layer.parameters():
            p.grad = None
        backward(out, c, device)
        x_grad = sum(a.grad.numpy() for a in args)  # q's, k's and v's parts
        results.append([out.numpy(), x_grad] + [p.grad.numpy() for p in layer.parameters()])
    np.testing.assert_allclose(results[0][0], np_attention(layer, x, x, x), **TOL)
    for got, expected in zip(results[0], results[1]):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# ----- a float32 golden: the course's order of float32 operations --------------------------
# The course's code on 2-d rows, one float32 rounding per operation, in its order: Linear
# x @ W + b; LayerNorm1d mean = sum / n, var = sum((x - mean)^2) / n, w * ((x - mean) /
# (var + eps)^(1/2)) + b; attention (q kᵀ) / sqrt(D) (+ mask), softmax exp(z - max) / sum;
# Dropout x * mask / (1 - p) with mask = rand <= 1 - p (numpy's float64 draws). Every
# product is numpy's matmul: the course's attention sums q * k products with its backend's
# reduction instead, whose rounding differs between its own backends (numpy's pairwise sum
# and a sequential one differ by 2.1e-5 on the golden below), so no BLAS product repeats it.
def course_drop(x, p):
    if p == 0:  # needle draws nothing at p = 0 (as PyTorch); the course's mask is all ones
        return x
    mask = (np.random.rand(*x.shape) <= 1 - p).astype(x.dtype)
    return x * mask / x.dtype.type(1 - p)


def course_layer_norm(x, norm):
    n = x.dtype.type(x.shape[1])
    mean = (x.sum(axis=1) / n).reshape(-1, 1)
    centered = x - mean
    var = ((centered ** 2).sum(axis=1) / n).reshape(-1, 1)
    std = np.sqrt(var + x.dtype.type(norm.eps))
    w, b = (p.numpy().astype(x.dtype) for p in (norm.weight, norm.bias))
    return w * (centered / std) + b


def course_linear(x, linear):
    y = x @ linear.weight.numpy().astype(x.dtype)
    return y if linear.bias is None else y + linear.bias.numpy().astype(x.dtype)


def course_attention_layer(layer, x, p):
    B, T, F = x.shape
    rows = x.reshape(B * T, F)
    heads = [course_linear(course_layer_norm(rows, norm), proj)
             .reshape(B, T, layer.num_head, layer.dim_head).transpose(0, 2, 1, 3)
             for norm, proj in ((layer.prenorm_q, layer.q_projection),
                                (layer.prenorm_k, layer.k_projection),
                                (layer.prenorm_v, layer.v_projection))]
    q, k, v = heads
    z = (q @ k.transpose(0, 1, 3, 2)) / x.dtype.type(np.sqrt(layer.dim_head))
    if layer.attn.causal:
        z = z + (NEG_MAX * np.triu(np.ones(z.shape[-2:]), 1)).astype(x.dtype)
    e = np.exp(z - z.max(axis=3, keepdims=True))
    probs = course_drop(e / e.sum(axis=3, keepdims=True), p)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(B * T, -1)
    return course_linear(out, layer.out_projection).reshape(B, T, -1)


def course_transformer(model, x, p):
    B, T, F = x.shape
    x = x + model.pos_embedding.weight.numpy()[:T].astype(x.dtype)
    for layer in model.layers:
        x = x + course_drop(course_attention_layer(layer.attn, x, p), p)
        hidden = course_linear(course_layer_norm(x.reshape(B * T, F), layer.norm), layer.linear1)
        hidden = course_drop(np.maximum(hidden, 0), p)
        x = x + course_drop(course_linear(hidden, layer.linear2), p).reshape(B, T, F)
    return x


@pytest.mark.parametrize("p, causal", [(0.1, False), (0.1, True), (0.0, False)])
def test_transformer_float32_golden_in_the_courses_order(p, causal, device, monkeypatch):
    """The course's hw4 transformer-model golden (batch 8 of 11 steps, width 27, hidden 64,
    4 layers of 8 heads of 32, batch_first, after np.random.seed(19943)): within 1e-5 of the
    course-order float32 reference where the arrays are numpy's (cpu, strict); torch's and
    jax's own kernels round sums and products differently, so there 2e-5, the float32 noise
    of this model (the reference itself is 1.1e-5 from float64)."""
    if device.kind not in ("cpu", "strict"):  # the course's masks: numpy's draws here too
        monkeypatch.setattr(device, "random",
                            lambda shape: device.asarray(np.random.rand(*shape)))
    np.random.seed(19943)
    x = np.random.randn(8, 11, 27).astype(np.float32)
    model = Transformer(27, 64, 4, num_head=8, dim_head=32, dropout=p, causal=causal,
                        device=device, batch_first=True)
    state = np.random.get_state()
    out = model(tensor(x, device))[0].numpy()
    after = np.random.get_state()[2]
    np.random.set_state(state)
    ref32 = course_transformer(model, x, p)
    assert np.random.get_state()[2] == after  # the same draws, in the same order
    np.random.set_state(state)
    ref64 = course_transformer(model, x.astype(np.float64), p)
    assert out.dtype == np.float32 and np.abs(ref32 - ref64).max() < 2e-5  # the reference
    np.testing.assert_allclose(out, ref64, rtol=0, atol=2e-5)
    numpy_kernels = device.kind in ("cpu", "strict")
    np.testing.assert_allclose(out, ref32, rtol=0, atol=1e-5 if numpy_kernels else 2e-5)


def test_positions_are_looked_up_without_an_index_check(device, monkeypatch):
    """The Transformer makes its position ids itself (0 .. T - 1, below sequence_len), so an
    Embedding's rows are looked up without the check of the ids' values (on a GPU five or
    six launches a step): the same output and gradients with the check made to fail; a
    pos_embedding of another kind is called as it is."""
    import sys

    embedding_ops = sys.modules["needle.ops.embedding"]  # (ops.embedding is the function)
    np.random.seed(0)
    model = Transformer(E, HIDDEN, 1, num_head=H, dim_head=D, device=device)
    x = tensor(np.random.standard_normal((T, B, E)), device)
    want = model(x)[0]
    want.sum().backward()
    want_grad = model.pos_embedding.weight.grad.numpy()

    def no_check(*args, **kwargs):
        raise AssertionError("the position ids were checked")

    monkeypatch.setattr(embedding_ops, "as_index_array", no_check)
    model.pos_embedding.weight.grad = None
    got = model(x)[0]
    got.sum().backward()
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(model.pos_embedding.weight.grad.numpy(), want_grad)
    monkeypatch.undo()

    class Shifted(Embedding):  # another kind of module: its own forward runs
        def forward(self, ids):
            return super().forward(ids) + 1.0

    plain, model.pos_embedding = model.pos_embedding, Shifted(model.sequence_len, E,
                                                               device=device)
    model.pos_embedding.weight = plain.weight
    shifted = model(x)[0].numpy()  # x + (rows + 1)
    model.pos_embedding = plain
    np.testing.assert_allclose(shifted, model(x + 1.0)[0].numpy(), **TOL)  # (x + 1) + rows


def test_layers_run_on_c_ordered_arrays_from_a_time_first_input(device):
    """A (T, B, E) input is seen as (B, T, E) by a transpose; the layers get it in C order
    (one copy), so their reshapes to rows are views: with the transposed view they were
    copies in every product, forward and backward (on torch and cupy)."""
    np.random.seed(0)
    model = Transformer(E, HIDDEN, 1, num_head=H, dim_head=D, device=device)
    seen = []
    layers = model.layers

    class Spy(ndl.nn.Module):
        def forward(self, x):
            seen.append(x.realize_cached_data())
            return layers(x)

    model.layers = Spy()
    model(tensor(np.random.standard_normal((T, B, E)), device))
    (array,) = [getattr(a, "_array", a) for a in seen]
    assert tuple(array.shape) == (B, T, E) and device.c_contiguous(array)


def test_a_subclass_overriding_the_course_steps_is_called(device):
    """A course-style subclass overriding create_causal_mask (a padding mask) ran without
    error while forward used the fused softmax and never called it: the masked key still
    got weight. forward now takes the course's steps (matmul, mask, softmax) for such a
    subclass; with the default methods the results are the fused path's."""
    rng = np.random.default_rng(0)
    q, k, v = (ndl.Tensor(rng.standard_normal((1, 2, 3, 2)), dtype="float32", device=device)
               for _ in range(3))

    class Padded(MultiHeadAttention):
        calls = 0

        def create_causal_mask(self, i, j, device, dtype="float32"):
            Padded.calls += 1
            mask = super().create_causal_mask(i, j, device, dtype).numpy()
            mask[..., -1] = -1e9  # and the last key is padding
            return ndl.Tensor(mask, device=device, dtype=dtype, requires_grad=False)
    _, probs = Padded(causal=True)(q, k, v)
    assert Padded.calls == 1 and not probs.numpy()[..., -1].any()

    class Course(MultiHeadAttention):
        def softmax(self, logit):
            return super().softmax(logit)
    fused = MultiHeadAttention(causal=True)(q, k, v)
    course = Course(causal=True)(q, k, v)
    for a, b in zip(fused, course):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_a_custom_position_module_gets_a_tensor(device):
    """A pos_embedding other than Embedding was called with the device's raw array of
    positions (AttributeError for a module written with needle ops on cpu, strict, jax)."""
    m = ndl.nn.Transformer(8, 16, 1, num_head=2, dim_head=4, sequence_len=10, device=device)
    seen = []

    class Zero(ndl.nn.Module):
        def forward(self, pos):
            seen.append(type(pos))
            T = pos.shape[0]
            return ops.broadcast_to(ops.reshape(ops.astype(pos, "float32"), (T, 1)), (T, 8)) * 0.0
    m.pos_embedding = Zero()
    out, _ = m(ndl.Tensor(np.random.default_rng(1).standard_normal((5, 3, 8)), dtype="float32",
                          device=device))
    assert seen == [ndl.Tensor] and out.shape == (5, 3, 8)


def test_a_course_mask_override_and_the_course_steps_compile(device):
    """The course's create_causal_mask(i, j, device) takes no dtype and returns an NDArray:
    the course-steps path called it with dtype= (a TypeError) and could not add an NDArray;
    its default mask was raw array code, which ndl.compile refused."""
    import needle.backend_ndarray as nd

    rng = np.random.default_rng(2)
    q, k, v = (ndl.Tensor(rng.standard_normal((1, 2, 3, 4)), dtype="float32", device=device)
               for _ in range(3))

    class CourseMask(MultiHeadAttention):
        def create_causal_mask(self, i, j, device):
            mask = -np.finfo(np.float32).max * np.triu(np.ones((1, 1, i, j), np.float32),
                                                        j - i + 1)
            return nd.array(mask, device=device)
    fused = MultiHeadAttention(causal=True)(q, k, v)
    for a, b in zip(fused, CourseMask(causal=True)(q, k, v)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)

    class Steps(MultiHeadAttention):
        def softmax(self, logit):
            return super().softmax(logit)
    layer = AttentionLayer(8, 2, 4, causal=True, device=device)
    layer.attn = Steps(causal=True)
    x = ndl.Tensor(rng.standard_normal((2, 3, 8)), dtype="float32", device=device)
    step = ndl.compile(lambda x: layer(x).sum())
    assert [step(x).numpy() for _ in range(3)] == [layer(x).sum().numpy()] * 3
    assert step.captures == 1


def test_the_course_attention_modules_keep_device_and_dtype(device):
    """(A course-port audit.) The hw4_extra skeletons set self.device and self.dtype, and the
    course's forward calls self.create_causal_mask(i, j, self.device): an AttributeError
    here. Module.to keeps them current."""
    from needle.nn import AttentionLayer, Transformer, TransformerLayer

    rng = np.random.default_rng(3)
    q = ndl.Tensor(rng.standard_normal((1, 2, 3, 4)), dtype="float32", device=device)

    class CourseForward(MultiHeadAttention):
        def forward(self, q, k, v):
            mask = self.create_causal_mask(q.shape[2], k.shape[2], self.device)
            logits = self.matmul(q, k) / np.sqrt(q.shape[-1])
            return self.softmax(logits + ndl.broadcast_to(mask, logits.shape))
    m = CourseForward(causal=True, device=device)
    probs = m(q, q, q).numpy()
    assert not np.triu(probs[0, 0], 1).any()
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    for module in (m, AttentionLayer(4, 2, 2, device=device),
                   TransformerLayer(4, 2, 2, 8, device=device),
                   Transformer(4, 8, 1, device=device, dtype="float32")):
        assert module.device is device and module.dtype == "float32"
    unplaced = MultiHeadAttention()
    assert unplaced.device is None
    assert unplaced.to(device).device is device
