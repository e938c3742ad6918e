"""Convolution layer: NCHW in and out, weights (K, K, C_in, C_out) as in the course."""

from __future__ import annotations

import math

from .. import init, ops
from ..arguments import flag, integer
from ..autograd import Tensor
from ..backends import Device
from .module import Module, Parameter, check_size


def conv_padding(padding: int | str | tuple[int, int] | None, k: int, stride: int) -> int:
    """Conv's `padding` as the zeros added on each side: None the course's k // 2, an int
    >= 0 (or an equal pair), "valid" 0, "same" k // 2 (odd k and stride 1, as PyTorch's)."""
    if padding is None:
        return k // 2
    if isinstance(padding, str):
        if padding == "valid":
            return 0
        if padding != "same":
            raise ValueError(f"Conv: padding must be None, an integer >= 0, 'same' or "
                             f"'valid', found {padding!r}")
        if k % 2 == 0:  # (PyTorch pads an even kernel unevenly; needle's op pads evenly)
            raise ValueError(f"Conv: padding='same' needs an odd kernel_size, found {k}")
        if stride != 1:
            raise ValueError(f"Conv: padding='same' needs stride=1 (as in PyTorch), "
                             f"found stride={stride}")
        return k // 2
    if isinstance(padding, tuple):
        if len(padding) != 2 or padding[0] != padding[1]:
            raise ValueError(f"Conv: only equal padding on both axes is supported, "
                             f"found padding={padding}")
        padding = padding[0]
    return integer("Conv", "padding", padding, 0)


class Conv(Module):
    """2-D convolution on NCHW input, padded kernel_size // 2 ('same' for odd kernels)
    unless `padding` says otherwise."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 bias: bool = True, device: Device | None = None, dtype: str = "float32",
                 padding: int | str | tuple[int, int] | None = None):
        super().__init__()
        if isinstance(kernel_size, tuple):
            if len(kernel_size) != 2 or kernel_size[0] != kernel_size[1]:
                raise ValueError(f"Conv: only square kernels are supported, got {kernel_size}")
            kernel_size = kernel_size[0]
        self.in_channels = c_in = check_size("Conv", "in_channels", in_channels)
        self.out_channels = c_out = check_size("Conv", "out_channels", out_channels)
        self.kernel_size = k = check_size("Conv", "kernel_size", kernel_size)
        self.stride = check_size("Conv", "stride", stride)
        self.padding = conv_padding(padding, k, self.stride)
        bias = flag("Conv", "bias", bias)  # (bias="no" is true to Python)
        # the course's draw order: weight first, then bias; the weights laid out in memory
        # as the device's convolution reads them (the course's values and shape)
        weight = init.kaiming_uniform(c_in * k * k, c_out * k * k, shape=(k, k, c_in, c_out),
                                      device=device, dtype=dtype)
        self.weight = Parameter.make_const(weight.device.conv_weights(weight._realize()),
                                           requires_grad=True, device=weight.device)
        if bias:
            bound = 1.0 / math.sqrt(c_in * k * k)
            self.bias = Parameter(init.rand(c_out, low=-bound, high=bound, device=device,
                                            dtype=dtype))
        else:
            self.bias = None

    def _placed(self) -> None:
        """After `to()`: the weights laid out as the new device's convolution reads them."""
        w = self.weight
        w._array = w.device.conv_weights(w._realize())

    def forward(self, x: Tensor) -> Tensor:
        """conv (+ bias) of NCHW x, one node: the op reads the NCHW layout itself (the
        course's permutes to NHWC and back, each a node each way, are not made)."""
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"Conv: expected input of shape (N, {self.in_channels}, H, W), "
                             f"found {x.shape}")
        bias = self.bias
        if bias is None:
            return ops.Conv(self.stride, self.padding, "NCHW")(x, self.weight)
        if bias.shape == (self.out_channels,):  # added inside the node
            return ops.Conv(self.stride, self.padding, "NCHW")(x, self.weight, bias)
        # a bias of another shape broadcasts over N, H, W of the NHWC result, as the course's
        out = ops.conv(ops.permute(x, (0, 2, 3, 1)), self.weight, self.stride, self.padding)
        return ops.permute(out + bias, (0, 3, 1, 2))

    def extra_repr(self) -> str:
        pad = "" if self.padding == self.kernel_size // 2 else f", padding={self.padding}"
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}{pad}, bias={self.bias is not None}")
