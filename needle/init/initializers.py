"""Xavier and Kaiming initialisers, built on `rand` / `randn` so numpy's seed reproduces them."""

from __future__ import annotations

import math

from ..autograd import Tensor
from .basic import rand, randn


def _relu_gain(nonlinearity: str) -> float:
    if nonlinearity != "relu":
        raise ValueError(f"only nonlinearity='relu' is supported, got {nonlinearity!r}")
    return math.sqrt(2.0)


def _shape(fan_in: int, fan_out: int, shape: tuple[int, ...] | None) -> tuple:
    """The drawn shape: (fan_in, fan_out) unless `shape` overrides it (conv weights)."""
    return (fan_in, fan_out) if shape is None else tuple(shape)


def xavier_uniform(fan_in: int, fan_out: int, gain: float = 1.0,
                   shape: tuple[int, ...] | None = None, **kwargs) -> Tensor:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)); `shape` overrides the shape."""
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return rand(*_shape(fan_in, fan_out, shape), low=-a, high=a, **kwargs)


def xavier_normal(fan_in: int, fan_out: int, gain: float = 1.0,
                  shape: tuple[int, ...] | None = None, **kwargs) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)); `shape` overrides the shape."""
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return randn(*_shape(fan_in, fan_out, shape), mean=0.0, std=std, **kwargs)


def kaiming_uniform(fan_in: int, fan_out: int, shape: tuple[int, ...] | None = None,
                    nonlinearity: str = "relu", **kwargs) -> Tensor:
    """U(-bound, bound) with bound = sqrt(2) * sqrt(3 / fan_in); `shape` overrides the shape."""
    bound = _relu_gain(nonlinearity) * math.sqrt(3.0 / fan_in)
    return rand(*_shape(fan_in, fan_out, shape), low=-bound, high=bound, **kwargs)


def kaiming_normal(fan_in: int, fan_out: int, shape: tuple[int, ...] | None = None,
                   nonlinearity: str = "relu", **kwargs) -> Tensor:
    """N(0, std^2) with std = sqrt(2) / sqrt(fan_in); `shape` overrides the shape."""
    std = _relu_gain(nonlinearity) / math.sqrt(fan_in)
    return randn(*_shape(fan_in, fan_out, shape), mean=0.0, std=std, **kwargs)
