"""`ndl.from_dlpack`: a Tensor over another library's array, sharing its memory (DLPack).

The other direction is `Tensor.__dlpack__`: `torch.from_dlpack(t)`, `np.from_dlpack(t)`,
`jnp.from_dlpack(t)` and `cupy.from_dlpack(t)` read a needle Tensor without a copy. Each
device's `from_dlpack` (backends/) does the library's part.
"""

from __future__ import annotations

from typing import Any

from .autograd import Tensor
from .backends import Device, dlpack_home


def from_dlpack(obj: Any, device: Device | None = None, *,
                requires_grad: bool = False) -> Tensor:
    """A Tensor on `device` sharing the memory of `obj` (a numpy, torch, jax, cupy or
    array-api-strict array, or anything with `__dlpack__`) where the library can.

    With `device=None`: a needle Tensor's device, a native array's own device (a torch.Tensor
    stays on torch), else cpu() for host memory and cuda(i) for GPU i. Memory on another
    device than `device` raises ValueError: nothing is copied across devices.
    """
    if device is None:
        device = obj.device if isinstance(obj, Tensor) else dlpack_home(obj)
    data = device.from_dlpack(obj)
    return Tensor.make_const(data, requires_grad=requires_grad, device=device)
