"""Data parallelism, ChainerMN style: `distributed_optimizer(optimizer)` averages the
gradients over ranks in step(), then runs the wrapped optimizer's update.

Why an optimizer wrapper rather than a DistributedDataParallel module: needle's autograd has
no per-parameter hooks, so nothing can start an all-reduce while backward() is still running;
step() is the first moment at which every gradient is final, and the optimizer is where
needle already groups parameters by device and dtype into flat arrays. The model stays an
ordinary Module (its state_dict keys, its checkpoints and the training loop are unchanged).
"""

from __future__ import annotations

import math
from typing import Any

from ..autograd import Tensor
from ..nn import Module
from ..optim import Optimizer
from . import comm


def broadcast_module(module: Module, root: int = 0) -> None:
    """Give every rank rank `root`'s parameters and buffers (in place)."""
    for tensor in [*module.parameters(), *module.buffers()]:
        comm.broadcast(tensor, root=root)


def average_buffers(module: Module) -> None:
    """Average the floating buffers (BatchNorm running statistics) over ranks; other buffers
    take rank 0's values. Every rank must call it (before evaluation and checkpoints)."""
    if comm.world_size() == 1:
        return
    for tensor in module.buffers():
        if comm.dtype_of(tensor.realize_cached_data()).kind in "fc":
            comm.allreduce(tensor, op="mean")
        else:
            comm.broadcast(tensor, root=0)


class _Bucket:
    """Persistent flat send and receive arrays of one (device, dtype) group of small
    gradients, and where each parameter's gradient lies in them."""

    def __init__(self, device: Any, dtype: Any, layout: tuple[tuple[int, tuple], ...]):
        self.layout = layout  # (parameter index, shape) in order
        total = sum(math.prod(shape) for _, shape in layout)
        self.send = device.empty((total,), dtype=dtype)
        self.recv = device.empty((total,), dtype=dtype)


class DistributedOptimizer:
    """`optimizer` whose step() first averages every gradient over the ranks.

    Built by `distributed_optimizer`; every other attribute (lr, state_dict, zero_grad,
    param_groups of a subclass...) is the wrapped optimizer's, read and written through.
    """

    _own = ("optimizer", "module", "_buckets", "_recv")

    def __init__(self, optimizer: Optimizer, module: Module | None = None):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"distributed_optimizer: expected a needle Optimizer, got "
                            f"{type(optimizer).__name__}")
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "_buckets", {})  # (device, dtype) -> _Bucket
        object.__setattr__(self, "_recv", {})  # big parameter index -> receive array

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.optimizer, name, value)

    def step(self) -> None:
        """Average the gradients over all ranks, then update as the wrapped optimizer does."""
        self.allreduce_gradients()
        self.optimizer.step()

    def allreduce_gradients(self) -> None:
        """Replace every parameter's grad by its mean over the ranks.

        Gradients above the optimizer's `flat_max_size` are reduced from their own arrays
        into persistent receive arrays (no packing copy: they are large messages already);
        the small ones are packed into one flat bucket per device and dtype. The big
        messages are started without waiting (Iallreduce on cpu), so the bucket is packed
        while they travel. The ranks check first, in one small collective, that they have
        the same gradients (which parameters, shapes, dtypes): otherwise a ValueError.
        """
        size = comm.world_size()
        if size == 1:
            return
        big, small, signature = self._plan()
        comm.check_agreement("distributed_optimizer.step", signature)
        requests, results = [], []
        for i, grad in big:
            recv = self._recv.get(i)
            if recv is None or recv.shape != grad.shape or recv.dtype != grad.dtype:
                recv = self._recv[i] = self.params[i].device.empty(grad.shape, grad.dtype)
            requests.append(_start_allreduce(grad, recv))
            results.append([(i, recv)])
        for (device, dtype), grads in small.items():
            bucket = self._bucket(device, dtype, grads)
            start = 0
            for (_, g), (_, shape) in zip(grads, bucket.layout):
                end = start + math.prod(shape)
                bucket.send[start:end] = device.xp.reshape(g, (-1,))
                start = end
            requests.append(_start_allreduce(bucket.send, bucket.recv))
            results.append(_views(bucket, device.xp))
        comm.wait_all(requests)
        scale = 1.0 / size
        for pairs in results:
            for i, arr in pairs:
                p = self.params[i]
                arr *= scale  # in place in the receive arrays: views see it
                p.grad = Tensor.make_const(arr, device=p.device)

    def _plan(self) -> tuple[list, dict, tuple]:
        """(big (index, grad) pairs, {(device, dtype): small pairs}, the layout signature)."""
        big, small, signature = [], {}, []
        limit = self.optimizer.flat_max_size
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            data = p.realize_cached_data()
            g = p.grad.realize_cached_data()
            if g.dtype != data.dtype:  # e.g. a float64 gradient of a float32 parameter
                g = p.device.xp.astype(g, data.dtype)
            signature.append((i, tuple(g.shape), comm.dtype_of(g).name))
            if math.prod(g.shape) > limit:
                big.append((i, g))
            else:
                small.setdefault((p.device, data.dtype), []).append((i, g))
        return big, small, tuple(signature)

    def _bucket(self, device: Any, dtype: Any, grads: list) -> _Bucket:
        """The group's persistent bucket, rebuilt when its parameters or shapes changed."""
        layout = tuple((i, tuple(g.shape)) for i, g in grads)
        bucket = self._buckets.get((device, dtype))
        if bucket is None or bucket.layout != layout:
            bucket = self._buckets[(device, dtype)] = _Bucket(device, dtype, layout)
        return bucket

    def __repr__(self) -> str:
        return f"distributed_optimizer({self.optimizer!r})"


def _views(bucket: _Bucket, xp: Any) -> list[tuple[int, Any]]:
    """(parameter index, its gradient's view of the bucket's receive array)."""
    views, start = [], 0
    for i, shape in bucket.layout:
        end = start + math.prod(shape)
        views.append((i, xp.reshape(bucket.recv[start:end], shape)))
        start = end
    return views


def _start_allreduce(send: Any, recv: Any) -> Any:
    """Start summing `send` over ranks into `recv`; a request for comm.wait_all."""
    return comm.start_allreduce(send, recv)


def distributed_optimizer(optimizer: Optimizer, module: Module | None = None
                          ) -> DistributedOptimizer:
    """Wrap `optimizer` so that step() averages the gradients over all ranks first.

    Every rank gets rank 0's parameters now (and `module`'s buffers, when given), so all
    ranks start identical whatever their seed. Call after `needle.distributed.init()`.
    """
    wrapped = DistributedOptimizer(optimizer, module)
    if module is not None:
        broadcast_module(module)
        known = {id(p) for p in module.parameters()}
        others = [p for p in optimizer.params if id(p) not in known]
    else:
        others = optimizer.params
    for p in others:
        comm.broadcast(p)
    return wrapped
