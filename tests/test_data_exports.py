"""ndl.data exports every transform at the top, as the course's `needle.data` does."""

from __future__ import annotations

import inspect

import numpy as np

import needle as ndl
from needle.data import transforms


def test_every_transform_is_exported_at_ndl_data():
    classes = {name for name, obj in vars(transforms).items()
               if inspect.isclass(obj) and issubclass(obj, transforms.Transform)}
    assert classes >= {"Transform", "RandomFlipHorizontal", "RandomCrop"}
    for name in classes:
        assert getattr(ndl.data, name) is getattr(transforms, name)
        assert name in ndl.data.__all__


def test_course_style_use_of_the_exported_transforms():
    np.random.seed(0)
    img = np.arange(2 * 3 * 1, dtype=np.float32).reshape(2, 3, 1)
    flipped = ndl.data.RandomFlipHorizontal(p=1.0)(img)
    np.testing.assert_array_equal(flipped, img[:, ::-1, :])
    np.testing.assert_array_equal(ndl.data.RandomCrop(padding=0)(img), img)
    assert isinstance(ndl.data.RandomCrop(), ndl.data.Transform)
