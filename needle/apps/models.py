"""The course's hw4 models: ResNet9 for CIFAR-10 (from ConvBN blocks) and the word-level
LanguageModel (Embedding, RNN or LSTM, Linear).

Absolute imports only, so `from models import *` works with this folder on sys.path.
"""

from __future__ import annotations

import needle as ndl
import needle.nn as nn

__all__ = ["ConvBN", "ResNet9", "LanguageModel"]


class ConvBN(nn.Module):
    """Conv(a, b, k, stride=s) -> BatchNorm2d(b) -> ReLU, on NCHW input."""

    def __init__(self, a: int, b: int, k: int, s: int, device: ndl.Device | None = None,
                 dtype: str = "float32"):
        super().__init__()
        self.conv = nn.Conv(a, b, k, stride=s, device=device, dtype=dtype)
        self.bn = nn.BatchNorm2d(b, device=device, dtype=dtype)
        self.relu = nn.ReLU()

    def forward(self, x: ndl.Tensor) -> ndl.Tensor:
        """relu(bn(conv(x)))."""
        return self.relu(self.bn(self.conv(x)))


class ResNet9(nn.Module):
    """(N, 3, 32, 32) images -> (N, 10) logits; 431,946 parameters.

    The layers are built in the course's order, so `np.random.seed(k); ResNet9()` draws the
    same weights as the course's model.
    """

    def __init__(self, device: ndl.Device | None = None, dtype: str = "float32"):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        # spatial size 32 -> 8 -> 4 -> 4 -> 2 -> 1 -> 1: the flattened features are 128
        self.model = nn.Sequential(
            ConvBN(3, 16, 7, 4, **kw),
            ConvBN(16, 32, 3, 2, **kw),
            nn.Residual(nn.Sequential(ConvBN(32, 32, 3, 1, **kw), ConvBN(32, 32, 3, 1, **kw))),
            ConvBN(32, 64, 3, 2, **kw),
            ConvBN(64, 128, 3, 2, **kw),
            nn.Residual(nn.Sequential(ConvBN(128, 128, 3, 1, **kw),
                                      ConvBN(128, 128, 3, 1, **kw))),
            nn.Flatten(),
            nn.Linear(128, 128, **kw),
            nn.ReLU(),
            nn.Linear(128, 10, **kw),
        )

    def forward(self, x: ndl.Tensor) -> ndl.Tensor:
        """The logits of a batch of NCHW images."""
        return self.model(x)


class LanguageModel(nn.Module):
    """Embedding -> RNN, LSTM or Transformer -> Linear: next-token logits for every position.

    Built in the course's order (Embedding, then the sequence model, then the Linear layer),
    so `np.random.seed(k)` draws the course's weights. `seq_len` is kept for course code.
    """

    def __init__(self, embedding_size: int, output_size: int, hidden_size: int,
                 num_layers: int = 1, seq_model: str = "rnn", seq_len: int = 40,
                 device: ndl.Device | None = None, dtype: str = "float32"):
        super().__init__()
        if seq_model not in ("rnn", "lstm", "transformer"):
            raise ValueError(f"LanguageModel: seq_model must be 'rnn', 'lstm' or "
                             f"'transformer', got {seq_model!r}")
        self.embedding_size, self.output_size = embedding_size, output_size
        self.hidden_size, self.num_layers = hidden_size, num_layers
        self.seq_len = seq_len
        self.embedding = nn.Embedding(output_size, embedding_size, device=device, dtype=dtype)
        if seq_model == "transformer":
            self.seq_model = nn.Transformer(embedding_size, hidden_size, num_layers,
                                            device=device, dtype=dtype, sequence_len=seq_len)
        else:
            seq = nn.RNN if seq_model == "rnn" else nn.LSTM
            self.seq_model = seq(embedding_size, hidden_size, num_layers, device=device,
                                 dtype=dtype)
        # (the transformer keeps the embedding width; hidden_size is its MLP's width)
        self.seq_width = embedding_size if seq_model == "transformer" else hidden_size
        self.linear = nn.Linear(self.seq_width, output_size, device=device, dtype=dtype)

    def forward(self, x: ndl.Tensor, h=None):
        """x (T, B) token ids -> (logits (T*B, output_size), the final hidden state)."""
        if x.ndim != 2:
            raise ValueError(f"LanguageModel: expected token ids of shape (T, B), found "
                             f"{x.shape}")
        seq_len, batch = x.shape
        out, h = self.seq_model(self.embedding(x), h)
        return self.linear(ndl.reshape(out, (seq_len * batch, self.seq_width))), h
