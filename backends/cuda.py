"""The cuda device: cupy through array-api-compat, imported only when first used."""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .kernels import (
    ADAM_CUDA,
    SGD_CUDA,
    SGD_MOMENTUM_CUDA,
    SPLITMIX_UNIFORM_CUDA,
    scatter_add_rows,
    strided_im2col,
)

INSTALL_HINT = ("install the GPU extra for your CUDA version (nvidia-smi's \"CUDA Version\"): "
                "`pip install needle[cuda12]` or `pip install needle[cuda13]`")


class CUDADevice(Device):
    """Arrays in GPU memory, computed with cupy. Constructing one never touches the GPU."""

    kind = "cuda"
    defers_checks = True

    def __init__(self, index: int = 0):
        super().__init__(index)
        self._cupy: Any = None  # the cupy and cupyx modules, set by _load
        self._cupyx: Any = None

    def _probe(self) -> str:
        """Why cupy or GPU `index` is missing, or "" when both are there."""
        return _probe(self.index)

    def _load(self) -> tuple[Any, Any]:
        import array_api_compat.cupy as xp  # only after _probe found cupy and the GPU
        import cupy
        import cupyx

        self._cupy, self._cupyx = cupy, cupyx
        return xp, cupy.cuda.Device(self.index)

    def im2col(self, a: Any, kernel: tuple[int, int], stride: int, padding: int) -> Any:
        """The windows as one strided view of the padded input (cupy's), copied once."""
        with self._native:
            return strided_im2col(self._cupy.zeros, self._cupy.lib.stride_tricks.as_strided,
                                  a, kernel, stride, padding)

    def index_add(self, indices: Any, values: Any, n: int) -> Any:
        """cupy.add.at (atomic adds) into zeros (n, ...)."""
        with self._native:
            return scatter_add_rows(self._cupy.zeros, self._cupy.add.at, indices, values, n)

    def _new_generator(self, seed: int) -> list[int]:
        """[seed, offset]: a counter-based generator (kernels.splitmix_uniform), whose state
        a checkpoint holds exactly."""
        return [seed % 2**64, 0]

    def rng_state(self) -> np.ndarray:
        """(seed, offset) as uint64."""
        return np.array(self.generator(), dtype=np.uint64)

    def set_rng_state(self, state: np.ndarray) -> None:
        """Restore a state `rng_state` gave."""
        seed, offset = (int(v) for v in np.asarray(state, dtype=np.uint64))
        self.generator()[:] = [seed, offset]

    def random(self, shape: tuple[int, ...]) -> Any:
        """float32 uniform draws made on this GPU by one kernel (kernels.splitmix_uniform)."""
        generator, cp = self.generator(), self._cupy
        with self._native:
            out = cp.empty(tuple(shape), dtype=cp.float32)
            if out.size:
                _kernel(cp, "uniform")(np.uint64(generator[0]), np.uint64(generator[1]), out)
        generator[1] = (generator[1] + out.size) % 2**64
        return out

    # ----- optimizer updates: one kernel per parameter group, in place ---------------------
    in_place_updates = True

    def adam_step(self, param, grad, m, v, *, lr_t: float, beta1: float, beta2: float,
                  eps_t: float, weight_decay: float) -> bool:
        """Adam's update of `param`, `m` and `v` in one kernel (kernels.ADAM_CUDA)."""
        if not _updatable(param, m, v) or not grad.flags.c_contiguous:
            return False
        t = param.dtype.type
        with self._native:
            _kernel(self._cupy, "adam")(
                grad, t(lr_t), t(beta1), t(1 - beta1), t(beta2), t(1 - beta2), t(eps_t),
                t(weight_decay), param, m, v)
        return True

    def sgd_step(self, param, grad, u, *, lr: float, momentum: float,
                 weight_decay: float) -> bool:
        """SGD's update of `param` (and momentum `u`) in one kernel (kernels.SGD_CUDA)."""
        if not _updatable(param, u) or not grad.flags.c_contiguous:
            return False
        t = param.dtype.type
        with self._native:
            if u is None:
                _kernel(self._cupy, "sgd")(grad, t(lr), t(weight_decay), param)
            else:
                _kernel(self._cupy, "sgd_momentum")(grad, t(lr), t(momentum),
                                                    t(1 - momentum), t(weight_decay), param, u)
        return True

    def _from_dlpack(self, obj: Any) -> Any:
        """cupy's from_dlpack, with this GPU current."""
        with self._native:
            return self._cupy.from_dlpack(obj)

    def owns(self, array: Any) -> bool:
        """cupy arrays on this GPU live here."""
        if not type(array).__module__.startswith("cupy"):
            return False
        return array.device.id == self.index

    def from_numpy(self, array: np.ndarray) -> Any:
        """Copy a host array to this GPU."""
        self._require()  # RuntimeError with the install hint when cupy or the GPU is missing
        with self._native:
            return self._cupy.array(array, copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        """Copy to the host (cupy refuses implicit conversion); deferred checks first."""
        self._require()
        if self._pending:
            self.check_pending()
        return array.get()

    def empty_pinned(self, nbytes: int) -> np.ndarray:
        """`nbytes` of page-locked host memory as a uint8 numpy array (fast GPU copies);
        needle.distributed stages arrays through it for an MPI that is not CUDA-aware."""
        self._require()
        return self._cupyx.empty_pinned((nbytes,), dtype=np.uint8)


_KERNELS: dict[str, Any] = {}
# name -> (in params, out params, CUDA C, exact): exact ones are compiled with --fmad=false,
# so no multiply-add is contracted (the portable rule's roundings, to the bit)
_SOURCES = {
    "uniform": ("uint64 seed, uint64 offset", "float32 u", SPLITMIX_UNIFORM_CUDA, False),
    "adam": ("T grad, T lr_t, T b1, T omb1, T b2, T omb2, T eps_t, T wd", "T param, T m, T v",
             ADAM_CUDA, True),
    "sgd": ("T grad, T lr, T wd", "T param", SGD_CUDA, True),
    "sgd_momentum": ("T grad, T lr, T momentum, T omm, T wd", "T param, T u",
                     SGD_MOMENTUM_CUDA, True),
}


def _kernel(cp: Any, name: str) -> Any:
    """needle's own cupy kernel `name`, compiled on first use (each has a numpy reference in
    kernels.py that the tests compare it with)."""
    kernel = _KERNELS.get(name)
    if kernel is None:
        params, outs, body, exact = _SOURCES[name]
        kernel = _KERNELS[name] = cp.ElementwiseKernel(
            params, outs, body, f"needle_{name}", options=("--fmad=false",) if exact else ())
    return kernel


def _updatable(*arrays: Any) -> bool:
    """Whether every array (None: absent) is C-contiguous, so a kernel updates it in place."""
    return all(a is None or a.flags.c_contiguous for a in arrays)


def _probe(index: int) -> str:
    """An explanation of what is missing for GPU `index`, or "" when it is usable."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"cuda() is unavailable: cupy cannot be imported ({e}); {INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"cuda() is unavailable: no usable CUDA driver or GPU ({e}); {INSTALL_HINT}"
    if index >= count:
        return f"cuda({index}) is unavailable: this machine has {count} CUDA GPU(s)"
    return ""
