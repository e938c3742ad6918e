"""Normalisation layers: BatchNorm1d, BatchNorm2d (NCHW) and LayerNorm1d."""

from __future__ import annotations

from typing import Any

from .. import init, ops
from ..arguments import check_range
from ..autograd import Tensor, mark_modified
from ..autograd.graph import array_function
from ..backends import Device, namespace
from ..kernels import Kernel
from .module import Module, Parameter, check_size


@array_function
def _inv_std(var, eps: float):
    """(var + eps) ** -0.5: the eval-mode scale of the running variance."""
    return (var + eps) ** -0.5


def moving_average_portable(old: Any, batch: Any, m: float) -> Any:
    """old * (1 - m) + batch * m, with the (1, dim) batch statistic flattened, in old's dtype."""
    xp = namespace(old)
    new = old * (1.0 - m) + xp.reshape(batch, (-1,)) * m
    return new if new.dtype == old.dtype else xp.astype(new, old.dtype)


#: on cuda one elementwise kernel (the same three roundings) instead of four
MOVING_AVERAGE = Kernel("moving_average", moving_average_portable,
                        fast={"cuda": "needle.backends.normalize:moving_average_cuda"})


def moving_averages_portable(old_mean: Any, old_var: Any, batch_mean: Any, batch_var: Any,
                             m: float) -> tuple[Any, Any]:
    """(running mean, running var) each updated by MOVING_AVERAGE."""
    return MOVING_AVERAGE(old_mean, batch_mean, m), MOVING_AVERAGE(old_var, batch_var, m)


#: both running statistics at once: on torch two foreach products and a foreach sum (three
#: launches on a GPU, the same roundings) instead of six ops; on cuda one elementwise kernel
MOVING_AVERAGES = Kernel("moving_averages", moving_averages_portable,
                         fast={"torch": "needle.backends.normalize_torch:moving_averages_torch",
                               "cuda": "needle.backends.normalize:moving_averages_cuda"})


@array_function
def _moving_averages(old_mean, old_var, batch_mean, batch_var, m: float):
    """The running statistics' update (see moving_average_portable)."""
    return MOVING_AVERAGES(old_mean, old_var, batch_mean, batch_var, m)


def _eps(owner: str, name: str, value: Any) -> float:
    return check_range(owner, name, value, 0.0)  # (eps < 0: NaN)


class BatchNorm1d(Module):
    """Normalise each feature of (N, dim) over the batch; running statistics for eval."""

    # checked at every assignment: eps < 0 gives NaN, momentum > 1 extrapolates the running
    # statistics (eps 0 is refused in training by the BatchNorm op, as PyTorch)
    _setting_checks = {"eps": _eps, "momentum": lambda owner, name, value: check_range(
        owner, name, value, 0.0, 1.0, high_inclusive=True)}

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1,
                 device: Device | None = None, dtype: str = "float32"):
        super().__init__()
        owner = type(self).__name__
        self.dim = dim = check_size(owner, "dim", dim)
        self.eps, self.momentum = eps, momentum
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))
        # buffers: saved in state_dict and moved by to(), never optimised; the running
        # statistics are updated in place, so `bn.running_mean` stays the same Tensor
        self.register_buffer("running_mean", init.zeros(dim, device=device, dtype=dtype))
        self.register_buffer("running_var", init.ones(dim, device=device, dtype=dtype))

    #: the normalised axes of a 2-D input, and the axis of weight and bias (None: the last)
    _axes, _channel_axis = (0,), None

    def forward(self, x: Tensor) -> Tensor:
        """(x - mean) / sqrt(var + eps) * weight + bias, with batch or running statistics."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{type(self).__name__}: expected input of shape (N, {self.dim}), "
                             f"found {x.shape}")
        return self._normalize(x)

    def _normalize(self, x: Tensor) -> Tensor:
        """The normalisation of a checked input: (N, dim), or (N, dim, ...) over all axes but 1."""
        shape = x.shape
        count = 1  # values per channel
        for ax in self._axes:
            count *= shape[ax]
        if count == 0 or (self.training and count == 1):
            # one value has no variance: PyTorch refuses it too (an empty batch has no mean)
            need = "more than 1 value" if self.training else "at least 1 value"
            mode = "when training" if self.training else "in eval mode"
            raise ValueError(f"{type(self).__name__}: expected {need} per channel {mode}, "
                             f"found input of shape {shape}")
        axis = self._channel_axis
        if not self.training:
            # the running statistics are constants: fold them into one scale and one shift
            # on the (dim,) vectors, so the batch is passed over twice, as PyTorch does
            inv_std = _inv_std(self.running_var, self.eps)
            scale = self.weight * Tensor.make_const(inv_std, device=x.device)
            return ops.scale_shift(x, scale, self.bias - self.running_mean * scale, axis)
        # one fused node standardises with the batch mean and the biased batch variance,
        # then scales and shifts (Normalize and ScaleShift's numbers)
        op = ops.BatchNorm(self.eps)
        out = op(x, self.weight, self.bias)  # compute set op.stats
        self._update_running(*op.stats)
        return out

    def _update_running(self, mean, var) -> None:
        """running = (1 - m) running + m batch, on raw arrays: no graph is recorded.

        `mean` and `var` (biased, as in the course) are the batch statistics that the
        Normalize op computed, of shape (1, dim).
        """
        self.running_mean._array, self.running_var._array = _moving_averages(
            self.running_mean, self.running_var, mean, var, self.momentum)
        mark_modified(self.running_mean, self.running_var)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm2d(BatchNorm1d):
    """BatchNorm over the channels of NCHW input: statistics over N, H and W."""

    _axes, _channel_axis = (0, 2, 3), 1

    def forward(self, x: Tensor) -> Tensor:
        """BatchNorm1d's normalisation over N, H and W of NCHW x, in one node (the course's
        permute and reshape nodes around it are not made: the BatchNorm op reads the layout
        itself, with BatchNorm1d's kernels and numbers)."""
        if x.ndim != 4 or x.shape[1] != self.dim:
            raise ValueError(f"BatchNorm2d: expected input of shape (N, {self.dim}, H, W), "
                             f"found {x.shape}")
        return self._normalize(x)


class LayerNorm1d(Module):
    """Normalise over the last axis (biased variance), then scale and shift."""

    _setting_checks = {"eps": _eps}

    def __init__(self, dim: int, eps: float = 1e-5, device: Device | None = None,
                 dtype: str = "float32"):
        super().__init__()
        self.dim = dim = check_size("LayerNorm1d", "dim", dim)
        self.eps = eps
        self.weight = Parameter(init.ones(dim, device=device, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        """(x - mean) / sqrt(var + eps) * weight + bias over the last axis."""
        shape = x.shape
        if not shape or shape[-1] != self.dim:
            raise ValueError(f"LayerNorm1d: expected input of shape (..., {self.dim}), "
                             f"found {shape}")
        return ops.layer_norm(x, self.weight, self.bias, self.eps)  # one node

    def scale_shift(self, normalized: Tensor) -> Tensor:
        """normalized * weight + bias: the affine half of forward, for callers that share one
        normalisation between several LayerNorms of the same input."""
        return ops.scale_shift(normalized, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"
