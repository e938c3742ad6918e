"""needle: the Deep Learning Systems course framework, written once against the array API."""

from . import autograd, backends, data, init, nn, ops, optim, viz
from . import distributed  # mpi4py is imported by distributed.init() only
from .autograd import (
    Op,
    Tensor,
    TensorOp,
    TensorTuple,
    TensorTupleOp,
    Value,
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .backend_ndarray import course_getattr as _course_getattr
from .backends import DEVICES, Device, all_devices, cpu_numpy, default_device, manual_seed
from .serialization import load, load_safetensors, save, save_safetensors
from .compiled import CompileError, compile
from .interop import from_dlpack
from .init import ones, ones_like, zeros, zeros_like
from .ops import *  # noqa: F403

__version__ = "0.1.0"

__all__ = [
    "autograd", "backends", "data", "distributed", "init", "nn", "ops", "optim", "viz",
    "Op", "Tensor", "TensorOp", "TensorTuple", "TensorTupleOp", "Value", "is_grad_enabled",
    "no_grad", "enable_grad", "set_grad_enabled",
    "Device", "all_devices", "cpu_numpy", "default_device", *DEVICES, "manual_seed",
    "load", "save", "load_safetensors", "save_safetensors", "from_dlpack", "compile",
    "CompileError",
    "ones", "ones_like", "zeros", "zeros_like",
]
__all__ += ops.__all__

# a seed set inside a step that ndl.compile records is set again at each replay (the draws
# after it repeat, as they do eagerly)
manual_seed = autograd.graph.replayed(manual_seed)

# ndl.cpu(), ndl.cuda(), ndl.strict(), ndl.torch(), ndl.jax(): the factory of every row of
# the device table (backends.DEVICES)
globals().update({name: kind.factory for name, kind in DEVICES.items()})

# the course's `array_api` and `NDArray`, resolved on first use (see needle/backend_ndarray.py)
__getattr__ = _course_getattr(__name__)
