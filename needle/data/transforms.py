"""Random image augmentations on host `(H, W, C)` numpy images, drawn from np.random."""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np


class Transform:
    """A callable that maps one image to another."""

    def __call__(self, img: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class RandomFlipHorizontal(Transform):
    """Flip the width axis with probability `p` (one `np.random.rand()` draw per call)."""

    def __init__(self, p: float = 0.5):
        if not isinstance(p, numbers.Real):
            raise TypeError(f"RandomFlipHorizontal: p must be a number, got {p!r}")
        value = float(p)
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"RandomFlipHorizontal: p must lie in [0, 1], got {p!r}")
        self.p = value

    def __call__(self, img: np.ndarray) -> np.ndarray:
        """`img` (H, W, C), flipped left-right when `np.random.rand() < p`."""
        _check_image(img, "RandomFlipHorizontal")
        flip_img = np.random.rand() < self.p
        return np.flip(img, axis=1) if flip_img else img

    def __repr__(self) -> str:
        return f"RandomFlipHorizontal(p={self.p})"


class RandomCrop(Transform):
    """Zero-pad H and W by `padding`, then crop back to the original size at a random shift."""

    def __init__(self, padding: int = 3):
        try:
            value = operator.index(padding)
        except TypeError:
            raise TypeError(f"RandomCrop: padding must be an integer, got {padding!r}") from None
        if value < 0:
            raise ValueError(f"RandomCrop: padding must be >= 0, got {padding!r}")
        self.padding = value

    def __call__(self, img: np.ndarray) -> np.ndarray:
        """`img` (H, W, C) shifted by `randint(-padding, padding + 1, size=2)` with zero fill."""
        _check_image(img, "RandomCrop")
        p = self.padding
        shift_x, shift_y = np.random.randint(low=-p, high=p + 1, size=2)
        h, w, c = img.shape
        padded = np.zeros((h + 2 * p, w + 2 * p, c), dtype=img.dtype)  # np.pad, 10x faster
        padded[p : p + h, p : p + w, :] = img
        return padded[p + shift_x : p + shift_x + h, p + shift_y : p + shift_y + w, :]

    def __repr__(self) -> str:
        return f"RandomCrop(padding={self.padding})"


def _check_image(img: np.ndarray, who: str) -> None:
    shape = getattr(img, "shape", None)
    if shape is None or len(shape) != 3:
        raise ValueError(f"{who}: expected an (H, W, C) image, got shape {shape}")
