"""Attention and the Transformer (the course's hw4_extra API): MultiHeadAttention,
AttentionLayer, TransformerLayer, Transformer.

Attention tensors are (B, H, T, D): batch, heads, time, head dimension. The heads are batch
dimensions of one batched matmul, so no Python loop runs over the batch or the heads.
Parameters are drawn in the course's order (listed in each constructor), so a seeded numpy
state gives the course's weights; dropout masks are drawn in forward order.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from .. import init, ops
from ..arguments import flag
from ..autograd import Tensor
from ..autograd.graph import array_function
from ..backends import Device
from ..ops.affine_norm import LAYER_NORM
from ..ops.softmax import mask_value  # the course's -np.finfo(np.float32).max, within the dtype
from .embedding import Embedding
from .layers import Dropout, Linear, ReLU, Sequential
from .module import Module, check_size
from .norm import LayerNorm1d


def _check_4d(name: str, x: Tensor) -> None:
    if not isinstance(x, Tensor) or x.ndim != 4:
        found = x.shape if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"MultiHeadAttention: expected {name} of shape (B, H, T, D), "
                         f"found {found}")


def _c_order(x: Tensor) -> Tensor:
    """(B, T, E) x through a reshape to (B * T, E) and back: the same values, one copy where
    x is a transposed view (the (T, B, E) input seen as (B, T, E)), and in the backward one
    copy of a transposed adjoint (the output's), so that the layers run on arrays in C
    order: every later reshape to rows is a view (each was a copy on torch and cupy, and
    torch's layer norm copied its input)."""
    B, T, E = x.shape
    return ops.reshape(ops.reshape(x, (B * T, E)), (B, T, E))


@array_function
def _causal_mask(xp: Any, i: int, j: int, at: Any, dtype: Any) -> Any:
    """(1, 1, i, j): mask_value where a key comes after its query (the i queries being the
    last i of the j keys), 0 elsewhere (an array function: ndl.compile records it)."""
    later = xp.arange(j, device=at)[None, :] > xp.arange(j - i, j, device=at)[:, None]
    return xp.reshape(xp.astype(later, dtype) * mask_value(xp, dtype), (1, 1, i, j))


@array_function
def _arange(xp, n: int, at):
    """0, 1, ..., n - 1 as an array on the native device `at`."""
    return xp.arange(n, device=at)


class MultiHeadAttention(Module):
    """probs = Dropout(softmax(q @ k^T / sqrt(D) + mask)); result = probs @ v."""

    #: whether a subclass overrides the course's `matmul`, `softmax` or `create_causal_mask`
    #: (a padding mask, say): forward then calls them, as the course's does
    _course_steps = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._course_steps = any(getattr(cls, name) is not getattr(MultiHeadAttention, name)
                                for name in ("matmul", "softmax", "create_causal_mask"))
        # the course's create_causal_mask(i, j, device) takes no dtype
        cls._mask_takes_dtype = "dtype" in inspect.signature(cls.create_causal_mask).parameters

    def __init__(self, *, dropout: float = 0.0, causal: bool = False,
                 device: Device | None = None, dtype: str = "float32"):
        super().__init__()
        self.device, self.dtype = device, dtype  # (the course's: its forward reads them)
        self.causal = flag("MultiHeadAttention", "causal", causal)
        self.dropout = Dropout(dropout)

    def create_causal_mask(self, i: int, j: int, device: Device, dtype: Any = "float32"
                           ) -> Tensor:
        """(1, 1, i, j): -float32 max (float16: -65504) where a key comes after its query, 0
        elsewhere: the course's -max * triu(ones, j - i + 1), the i queries being the last i
        of the j keys."""
        if i > j:
            raise ValueError(f"MultiHeadAttention: a causal mask of {i} queries and {j} keys: "
                             f"the first queries would see no key (a causal mask needs "
                             f"T_q <= T_k)")
        xp = device.xp
        dtype = getattr(xp, dtype) if isinstance(dtype, str) else dtype
        return Tensor.make_const(_causal_mask(xp, i, j, device.native, dtype), device=device)

    def matmul(self, a: Tensor, b_transpose: Tensor) -> Tensor:
        """a @ b_transpose^T over the last two axes (the course's batched product)."""
        return ops.MatMul(transpose_b=True)(a, b_transpose)

    def softmax(self, logit: Tensor) -> Tensor:
        """Softmax over the last axis, exp(logit - max) / sum: finite for rows that are all
        -float32 max."""
        return ops.softmax(logit)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """q (B, H, T, D), k and v (B, H, T_k, D) -> (result (B, H, T, D),
        probs (B, H, T, T_k)), probs after dropout."""
        for name, x in (("q", q), ("k", k), ("v", v)):
            _check_4d(name, x)
        B, H, T, D = q.shape
        T_k = k.shape[2]
        if k.shape != (B, H, T_k, D) or v.shape != k.shape:
            raise ValueError(f"MultiHeadAttention: expected k and v of shape (B, H, T_k, D) = "
                             f"({B}, {H}, T_k, {D}), found q {q.shape}, k {k.shape}, "
                             f"v {v.shape}")
        if self.causal and T > T_k > 0:
            raise ValueError(f"MultiHeadAttention: causal attention needs at least as many "
                             f"keys as queries (the first queries would see none), found "
                             f"q {q.shape}, k {k.shape}")
        if self._course_steps:  # the course's steps, each a method a subclass may override
            logits = self.matmul(q, k) / math.sqrt(D)
            if self.causal:
                mask = (self.create_causal_mask(T, T_k, q.device, dtype=q.dtype.name)
                        if self._mask_takes_dtype else
                        self.create_causal_mask(T, T_k, q.device))  # (the course's signature)
                if not isinstance(mask, Tensor):  # the course's NDArray, or an array
                    mask = Tensor(mask, device=q.device, dtype=q.dtype, requires_grad=False)
                logits = logits + ops.broadcast_to(mask, logits.shape)
            probs = self.dropout(self.softmax(logits))
            return self.matmul(probs, ops.transpose(v)), probs
        # softmax(q kᵀ / sqrt(D) + mask) as one node: the scaling and the causal mask
        # (create_causal_mask's, applied in place of its add) are fused into the softmax
        logits = ops.MatMul(transpose_b=True)(q, k)
        probs = self.dropout(ops.softmax(logits, temperature=math.sqrt(D), causal=self.causal))
        return probs @ v, probs

    def extra_repr(self) -> str:
        return f"dropout={self.dropout.p}, causal={self.causal}"


class AttentionLayer(Module):
    """Pre-norm multi-head attention: LayerNorm1d on q, k, v, bias-free projections to
    H * D features, attention over (B, H, T, D) heads, and an output projection."""

    def __init__(self, q_features: int, num_head: int, dim_head: int, *,
                 k_features: int | None = None, v_features: int | None = None,
                 out_features: int | None = None, dropout: float = 0.0, causal: bool = True,
                 device: Device | None = None, dtype: str = "float32"):
        super().__init__()
        self.device, self.dtype = device, dtype  # (the course's: its forward reads them)
        self.q_features = q_features = check_size("AttentionLayer", "q_features", q_features)
        k_features = q_features if k_features is None else k_features
        v_features = q_features if v_features is None else v_features
        out_features = q_features if out_features is None else out_features
        self.k_features = check_size("AttentionLayer", "k_features", k_features)
        self.v_features = check_size("AttentionLayer", "v_features", v_features)
        self.out_features = check_size("AttentionLayer", "out_features", out_features)
        self.num_head = check_size("AttentionLayer", "num_head", num_head)
        self.dim_head = check_size("AttentionLayer", "dim_head", dim_head)
        inner = self.num_head * self.dim_head
        kw = dict(device=device, dtype=dtype)
        # the course's order: the norms (no draws), then q, k, v and out projections
        self.prenorm_q = LayerNorm1d(q_features, **kw)
        self.prenorm_k = LayerNorm1d(self.k_features, **kw)
        self.prenorm_v = LayerNorm1d(self.v_features, **kw)
        self.q_projection = Linear(q_features, inner, bias=False, **kw)
        self.k_projection = Linear(self.k_features, inner, bias=False, **kw)
        self.v_projection = Linear(self.v_features, inner, bias=False, **kw)
        self.attn = MultiHeadAttention(dropout=dropout, causal=causal, **kw)
        self.out_projection = Linear(inner, self.out_features, bias=False, **kw)

    def _prenorms(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """prenorm_q(q), prenorm_k(k), prenorm_v(v). In self-attention (k and v are q) the
        three LayerNorms differ only in weight and bias, so q is normalised once and shared
        (the same numbers, a third of the statistics and of their gradient), unless the
        device has a fused layer norm (torch: PyTorch's; cuda: one kernel each way)."""
        for name, x, features in (("q", q, self.q_features), ("k", k, self.k_features),
                                  ("v", v, self.v_features)):
            if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[2] != features:
                found = x.shape if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"AttentionLayer: expected {name} of shape (B, T, "
                                 f"{name}_features={features}), found {found}")
        norms = (self.prenorm_q, self.prenorm_k, self.prenorm_v)
        if (k is q and v is q and q.shape[-1] == self.q_features
                and all(type(n) is LayerNorm1d and n.eps == norms[0].eps for n in norms)
                and LAYER_NORM.implementation(q.device.kind) is LAYER_NORM.reference):
            # (where a fused layer norm runs, on torch and cuda, three of its ops each way
            # are fewer launches than a shared normalisation and three scale-and-shifts: on
            # torch 32 of the transformer's 412 ops a step, on cuda about 30 of 218 kernels)
            shared = ops.normalize(q, (2,), norms[0].eps)
            return tuple(n.scale_shift(shared) for n in norms)
        return self.prenorm_q(q), self.prenorm_k(k), self.prenorm_v(v)

    def _heads(self, x: Tensor, projection: Linear) -> Tensor:
        """(B, T, F) normalised -> projected and split into heads: (B, H, T, D)."""
        B, T, _ = x.shape
        y = projection(x)
        return ops.permute(ops.reshape(y, (B, T, self.num_head, self.dim_head)), (0, 2, 1, 3))

    def forward(self, q: Tensor, k: Tensor | None = None, v: Tensor | None = None) -> Tensor:
        """q (B, T, q_features), k and v (B, T_k, k/v_features), default q ->
        (B, T, out_features)."""
        k = q if k is None else k
        v = q if v is None else v
        qn, kn, vn = self._prenorms(q, k, v)
        qh = self._heads(qn, self.q_projection)
        kh = self._heads(kn, self.k_projection)
        vh = self._heads(vn, self.v_projection)
        x, _ = self.attn(qh, kh, vh)
        B, H, T, D = x.shape
        x = ops.reshape(ops.permute(x, (0, 2, 1, 3)), (B, T, H * D))
        return self.out_projection(x)

    def extra_repr(self) -> str:
        return f"{self.q_features}, num_head={self.num_head}, dim_head={self.dim_head}"


class TransformerLayer(Module):
    """x + Dropout(Attention(x)), then x + Dropout(Linear2(Dropout(ReLU(Linear1(LN(x))))))."""

    def __init__(self, q_features: int, num_head: int, dim_head: int, hidden_size: int, *,
                 dropout: float = 0.0, causal: bool = True, device: Device | None = None,
                 dtype: str = "float32"):
        super().__init__()
        self.device, self.dtype = device, dtype  # (the course's: its forward reads them)
        kw = dict(device=device, dtype=dtype)
        # the course's order: attention, then the two feed-forward Linears (weight, bias each)
        self.attn = AttentionLayer(q_features, num_head, dim_head, dropout=dropout,
                                   causal=causal, **kw)
        self.linear1 = Linear(q_features, hidden_size, **kw)
        self.linear2 = Linear(hidden_size, q_features, **kw)
        self.norm = LayerNorm1d(q_features, **kw)
        self.relu = ReLU()
        self.dropout = Dropout(dropout)  # one module, applied three times: three masks

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, q_features) -> the same shape."""
        features = self.attn.q_features
        if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[2] != features:
            found = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"TransformerLayer: expected x of shape (B, T, q_features="
                             f"{features}), found {found}")
        x = x + self.dropout(self.attn(x))
        hidden = self.dropout(self.relu(self.linear1(self.norm(x))))
        return x + self.dropout(self.linear2(hidden))


class Transformer(Module):
    """A learned positional embedding, then `num_layers` TransformerLayers; a drop-in for
    an RNN in LanguageModel: forward returns (output, zeros)."""

    def __init__(self, embedding_size: int, hidden_size: int, num_layers: int, *,
                 num_head: int = 8, dim_head: int = 32, dropout: float = 0.0,
                 causal: bool = True, device: Device | None = None, dtype: str = "float32",
                 batch_first: bool = False, sequence_len: int = 2048):
        super().__init__()
        self.device, self.dtype = device, dtype  # (the course's: its forward reads them)
        self.embedding_size = check_size("Transformer", "embedding_size", embedding_size)
        self.hidden_size = check_size("Transformer", "hidden_size", hidden_size)
        self.num_layers = check_size("Transformer", "num_layers", num_layers)
        self.sequence_len = check_size("Transformer", "sequence_len", sequence_len)
        self.batch_first = flag("Transformer", "batch_first", batch_first)
        kw = dict(device=device, dtype=dtype)
        # the course's order: the positional table first, then the layers
        self.pos_embedding = Embedding(self.sequence_len, self.embedding_size, **kw)
        self.layers = Sequential(*[
            TransformerLayer(self.embedding_size, num_head, dim_head, self.hidden_size,
                             dropout=dropout, causal=causal, **kw)
            for _ in range(self.num_layers)])

    def forward(self, x: Tensor, h=None) -> tuple[Tensor, Tensor]:
        """x (T, B, E), or (B, T, E) when batch_first -> (output in x's layout, zeros);
        `h` is ignored (the RNN signature)."""
        if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[2] != self.embedding_size:
            layout = "(B, T, E)" if self.batch_first else "(T, B, E)"
            found = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"Transformer: expected x of shape {layout} with E="
                             f"{self.embedding_size}, found {found}")
        at = getattr(self.pos_embedding, "weight", None)
        if isinstance(at, Tensor) and x.device != at.device:  # (each library fails its way)
            raise ValueError(f"Transformer: x is on {x.device}, the model on {at.device}; "
                             f"move one of them with .to()")
        if not self.batch_first:
            x = _c_order(ops.transpose(x, (0, 1)))
        T = x.shape[1]
        if T > self.sequence_len:
            raise ValueError(f"Transformer: the sequence length {T} exceeds sequence_len="
                             f"{self.sequence_len}")
        positions = _arange(x.device.xp, T, x.device.native)  # made on the device
        x = x + self._position_rows(positions, x.device)  # (T, E) broadcast over the batch
        x = self.layers(x)
        if not self.batch_first:
            x = ops.transpose(_c_order(x), (0, 1))
        return x, init.zeros_like(x)

    def _position_rows(self, positions: Any, device: Device) -> Tensor:
        """pos_embedding(positions). The ids 0 .. T - 1 are made here, below sequence_len
        (checked), so an Embedding's rows are looked up without its check of the ids' values
        (on a GPU five or six launches a step); another module is called with them as a
        Tensor (it got the raw array)."""
        embedding = self.pos_embedding
        if type(embedding) is not Embedding:
            return embedding(Tensor.make_const(positions, device=device))
        ids = Tensor.make_const(positions, device=embedding.weight.device)
        return ops.EmbeddingLookup()(embedding.weight, ids)

    def extra_repr(self) -> str:
        return (f"{self.embedding_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}, sequence_len={self.sequence_len}")
