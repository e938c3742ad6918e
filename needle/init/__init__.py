"""Tensor initialisation: constant, random and the Xavier / Kaiming schemes."""

from .basic import constant, one_hot, ones, ones_like, rand, randb, randn, zeros, zeros_like
from .initializers import kaiming_normal, kaiming_uniform, xavier_normal, xavier_uniform

__all__ = [
    "constant", "one_hot", "ones", "ones_like", "rand", "randb", "randn", "zeros",
    "zeros_like", "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform",
]
