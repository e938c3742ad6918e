"""Pooling layers on NCHW input: MaxPool2d and AvgPool2d (no padding, floor output size)."""

from __future__ import annotations

from ..autograd import Tensor
from ..ops.pool import avg_pool2d, max_pool2d
from .module import Module, check_size


class _Pool2d(Module):
    """Shared by the pooling layers: kernel and stride checks, the 4-D input check, repr."""

    def __init__(self, kernel_size: int, stride: int | None = None):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = check_size(name, "kernel_size", kernel_size)
        self.stride = self.kernel_size if stride is None else check_size(name, "stride", stride)

    def _check_input(self, x: Tensor) -> None:
        if x.ndim != 4:
            raise ValueError(f"{type(self).__name__}: expected 4-D input (N, C, H, W), "
                             f"found shape {x.shape}")

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class MaxPool2d(_Pool2d):
    """The maximum of each kernel_size x kernel_size window, moved by `stride` (default: k)."""

    def forward(self, x: Tensor) -> Tensor:
        """max_pool2d(x): (N, C, H, W) -> (N, C, (H - k) // s + 1, (W - k) // s + 1)."""
        self._check_input(x)
        return max_pool2d(x, self.kernel_size, self.stride)


class AvgPool2d(_Pool2d):
    """The mean of each kernel_size x kernel_size window, moved by `stride` (default: k)."""

    def forward(self, x: Tensor) -> Tensor:
        """avg_pool2d(x): (N, C, H, W) -> (N, C, (H - k) // s + 1, (W - k) // s + 1)."""
        self._check_input(x)
        return avg_pool2d(x, self.kernel_size, self.stride)
