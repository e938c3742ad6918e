"""A small conv net for MNIST: needle-train's `--model cnn`.

Absolute imports only, so `from mnist_cnn import *` works with this folder on sys.path.
"""

from __future__ import annotations

import needle as ndl
import needle.nn as nn
from needle.apps.models import ConvBN

__all__ = ["MNISTConvNet"]


class MNISTConvNet(nn.Module):
    """(N, 784) or (N, 1, 28, 28) images -> (N, 10) logits.

    One block per width: ConvBN (Conv 3x3 -> BatchNorm2d -> ReLU) -> MaxPool2d(2), so 28 -> 14 -> 7
    -> 3 with the default widths (16, 32, 64); then Flatten and one Linear layer.
    """

    def __init__(self, widths: tuple[int, ...] = (16, 32, 64), num_classes: int = 10,
                 device: ndl.Device | None = None, dtype: str = "float32"):
        super().__init__()
        self.widths = tuple(widths)
        layers: list[nn.Module] = []
        channels, size = 1, 28
        for width in self.widths:
            layers += [ConvBN(channels, width, 3, 1, device=device, dtype=dtype),
                       nn.MaxPool2d(2)]
            channels, size = width, size // 2
        layers += [nn.Flatten(),
                   nn.Linear(channels * size * size, num_classes, device=device, dtype=dtype)]
        self.model = nn.Sequential(*layers)

    def forward(self, x: ndl.Tensor) -> ndl.Tensor:
        """The logits of a batch of flat (N, 784) or NCHW (N, 1, 28, 28) images."""
        if x.ndim == 2:
            x = ndl.reshape(x, (x.shape[0], 1, 28, 28))
        return self.model(x)

    def extra_repr(self) -> str:
        return f"widths={self.widths}"
