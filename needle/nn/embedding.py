"""Embedding: a learned table of vectors, one row per token id."""

from __future__ import annotations

from typing import Any

from .. import init
from ..autograd import Tensor
from ..backends import Device
from ..ops.embedding import EmbeddingLookup, index_tensor
from .module import Module, Parameter, check_size


class Embedding(Module):
    """(T, B) token ids -> (T, B, embedding_dim) rows of `weight` (num_embeddings, dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device: Device | None = None,
                 dtype: str = "float32"):
        super().__init__()
        self.num_embeddings = check_size("Embedding", "num_embeddings", num_embeddings)
        self.embedding_dim = check_size("Embedding", "embedding_dim", embedding_dim)
        # the course's draw: standard normal entries
        self.weight = Parameter(init.randn(self.num_embeddings, self.embedding_dim,
                                           device=device, dtype=dtype))

    def forward(self, x: Any) -> Tensor:
        """The rows of weight picked by `x` (integers, or floats holding whole numbers).

        The gradient adds rows into the table at the ids (no one-hot of the table's size on
        devices with a scatter-add kernel).
        """
        ids = index_tensor(x, self.num_embeddings, "Embedding", self.weight.device)
        return EmbeddingLookup()(self.weight, ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
