"""The PyTorch twins of needle's benchmark models, built once for every benchmark that races
them (conv.py, devices.py, gpu.py, host_overhead.py, mlp_resnet.py): the same layers in the
same order, so one `torch.manual_seed(k)` before a call gives one set of weights everywhere."""

from __future__ import annotations

from typing import Any


def _residual(nn: Any) -> type:
    class Residual(nn.Module):
        """fn(x) + x."""

        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x) + x

    return Residual


def mlp_resnet(hidden: int, in_dim: int = 784, classes: int = 10) -> Any:
    """needle.apps.mlp_resnet.MLPResNet(in_dim, hidden) in PyTorch: three residual blocks of
    Linear, BatchNorm1d, ReLU, Dropout(0.1), Linear, BatchNorm1d, each then a ReLU."""
    from torch import nn

    residual = _residual(nn)

    def block(dim, h):
        return nn.Sequential(
            residual(nn.Sequential(nn.Linear(dim, h), nn.BatchNorm1d(h), nn.ReLU(),
                                   nn.Dropout(0.1), nn.Linear(h, dim), nn.BatchNorm1d(dim))),
            nn.ReLU())

    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(),
                         *[block(hidden, hidden // 2) for _ in range(3)],
                         nn.Linear(hidden, classes))


def resnet9() -> Any:
    """needle.apps.models.ResNet9 in PyTorch: ConvBN blocks (Conv2d, BatchNorm2d, ReLU), two
    residual pairs, then Linear 128 -> 128 -> 10, for 3 x 32 x 32 images."""
    from torch import nn

    residual = _residual(nn)

    def conv_bn(a, b, k, s):
        return nn.Sequential(nn.Conv2d(a, b, k, s, k // 2), nn.BatchNorm2d(b), nn.ReLU())

    return nn.Sequential(
        conv_bn(3, 16, 7, 4), conv_bn(16, 32, 3, 2),
        residual(nn.Sequential(conv_bn(32, 32, 3, 1), conv_bn(32, 32, 3, 1))),
        conv_bn(32, 64, 3, 2), conv_bn(64, 128, 3, 2),
        residual(nn.Sequential(conv_bn(128, 128, 3, 1), conv_bn(128, 128, 3, 1))),
        nn.Flatten(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
