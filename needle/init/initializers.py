"""Xavier and Kaiming initialisers, built on `rand` / `randn` so numpy's seed reproduces them."""

from __future__ import annotations

import math

from ..arguments import check_range
from ..autograd import Tensor
from .basic import _floating, device_or_default, rand, randn


def _relu_gain(nonlinearity: str) -> float:
    if nonlinearity != "relu":
        raise ValueError(f"only nonlinearity='relu' is supported, got {nonlinearity!r}")
    return math.sqrt(2.0)


def _fans(owner: str, fan_in: int, fan_out: int, kwargs: dict, both: bool = False) -> float:
    """fan_in (with `both`, fan_in + fan_out: the bound or std divides by it) as a float > 0,
    the fans >= 0, and `kwargs`' dtype a floating one; a TypeError or ValueError naming them
    otherwise (a ZeroDivisionError, a NaN bound or truncated integer weights before)."""
    device = kwargs.get("device")
    _floating(owner, device_or_default(device),
              kwargs.get("dtype", "float32"))
    fans = check_range(owner, "fan_in", fan_in, 0.0)
    if both:
        fans += check_range(owner, "fan_out", fan_out, 0.0)
    if not fans > 0:
        name = "fan_in + fan_out" if both else "fan_in"
        raise ValueError(f"{owner}: {name} must be > 0, found {fan_in}" +
                         (f" + {fan_out}" if both else ""))
    return fans


def _gain(owner: str, gain: float) -> float:
    """A gain as a float >= 0 (a negative one is a negative bound or std)."""
    return check_range(owner, "gain", gain, 0.0)


def _shape(fan_in: int, fan_out: int, shape: tuple[int, ...] | None) -> tuple:
    """The drawn shape: (fan_in, fan_out) unless `shape` overrides it (conv weights)."""
    return (fan_in, fan_out) if shape is None else tuple(shape)


def xavier_uniform(fan_in: int, fan_out: int, gain: float = 1.0,
                   shape: tuple[int, ...] | None = None, **kwargs) -> Tensor:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)); `shape` overrides the shape."""
    fans = _fans("xavier_uniform", fan_in, fan_out, kwargs, both=True)
    a = _gain("xavier_uniform", gain) * math.sqrt(6.0 / fans)
    return rand(*_shape(fan_in, fan_out, shape), low=-a, high=a, **kwargs)


def xavier_normal(fan_in: int, fan_out: int, gain: float = 1.0,
                  shape: tuple[int, ...] | None = None, **kwargs) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)); `shape` overrides the shape."""
    fans = _fans("xavier_normal", fan_in, fan_out, kwargs, both=True)
    std = _gain("xavier_normal", gain) * math.sqrt(2.0 / fans)
    return randn(*_shape(fan_in, fan_out, shape), mean=0.0, std=std, **kwargs)


def kaiming_uniform(fan_in: int, fan_out: int, shape: tuple[int, ...] | None = None,
                    nonlinearity: str = "relu", **kwargs) -> Tensor:
    """U(-bound, bound) with bound = sqrt(2) * sqrt(3 / fan_in); `shape` overrides the shape."""
    fans = _fans("kaiming_uniform", fan_in, fan_out, kwargs)
    bound = _relu_gain(nonlinearity) * math.sqrt(3.0 / fans)
    return rand(*_shape(fan_in, fan_out, shape), low=-bound, high=bound, **kwargs)


def kaiming_normal(fan_in: int, fan_out: int, shape: tuple[int, ...] | None = None,
                   nonlinearity: str = "relu", **kwargs) -> Tensor:
    """N(0, std^2) with std = sqrt(2) / sqrt(fan_in); `shape` overrides the shape."""
    fans = _fans("kaiming_normal", fan_in, fan_out, kwargs)
    std = _relu_gain(nonlinearity) / math.sqrt(fans)
    return randn(*_shape(fan_in, fan_out, shape), mean=0.0, std=std, **kwargs)
