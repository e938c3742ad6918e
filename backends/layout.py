"""What a device says about the memory layout its kernels read (a mixin of Device): the
defaults keep every array as it is; torch overrides them (backends/torch_device.py)."""

from __future__ import annotations

from typing import Any


class Layout:
    """Layout hooks: nn.Conv, Module.to, load_state_dict and the optimizers ask them."""

    #: whether the optimizers' multi-tensor updates (one launch per pass for any number of
    #: parameters) beat one flat array of the small ones: on torch's GPUs (foreach ops),
    #: where the flat array costs a concatenation and a second set of launches
    multi_tensor_updates: bool = False

    def conv_weights(self, array: Any) -> Any:
        """(K, K, C_in, C_out) convolution weights laid out in memory as this device's
        convolution reads them: the same values and shape (here `array` itself; torch
        stores them as (C_out, C_in, K, K))."""
        return array

    def laid_out_like(self, array: Any, like: Any) -> Any:
        """`array` (this device's, new) with the memory layout of `like` (of its shape): here
        `array` itself; torch copies it into a permuted layout (conv weights) once."""
        return array

    def c_contiguous(self, array: Any) -> bool:
        """Whether `array`'s elements lie in C order in memory, so that its reshape to one
        dimension is a view (True where the library shows no layout)."""
        flags = getattr(array, "flags", None)
        return True if flags is None else bool(flags.c_contiguous)
