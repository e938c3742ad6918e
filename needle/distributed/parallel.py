"""Data parallelism, ChainerMN style: `distributed_optimizer(optimizer)` averages the
gradients over ranks in step(), then runs the wrapped optimizer's update.

Why an optimizer wrapper rather than a DistributedDataParallel module: needle's autograd has
no per-parameter hooks, so nothing can start an all-reduce while backward() is still running;
step() is the first moment at which every gradient is final, and the optimizer is where
needle already groups parameters by device and dtype into flat arrays. The model stays an
ordinary Module (its state_dict keys, its checkpoints and the training loop are unchanged).
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from typing import Any

from ..autograd import Tensor
from ..autograd.graph import replayed
from ..nn import Module
from ..optim import Optimizer
from ..optim.flat import FLAT_CONCAT
from . import comm
from .mpi_buffers import dtype_of, may_overlap

#: the live DistributedOptimizers by creation order: clip_grad_norm_ averages their gradients
WRAPPERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
#: id(grad Tensor) -> a weak reference to it, for the gradients an averaging (or a clipping
#: after it) left: a gradient is averaged once, whichever wrapper (two may hold a parameter)
_AVERAGED: dict[int, weakref.ref] = {}


def _forget(key: int, _ref: Any) -> None:
    """A gradient in _AVERAGED was freed: its entry goes (before its id can be reused)."""
    _AVERAGED.pop(key, None)
_SERIAL = itertools.count()


def broadcast_module(module: Module, root: int = 0) -> None:
    """Give every rank rank `root`'s parameters and buffers (in place)."""
    tensors = [*module.parameters(), *module.buffers()]
    check_same_tensors("broadcast_module", tensors)
    for tensor in tensors:
        comm.broadcast(tensor, root=root)


def check_same_tensors(what: str, tensors: list) -> None:
    """A ValueError on every rank unless all ranks hold as many tensors, of the same shapes
    and dtypes (one collective: the broadcasts after it would hang on a rank with more)."""
    comm.check_agreement(what, tuple((tuple(t.shape), str(t.dtype)) for t in tensors))


def check_same_optimizer(optimizer: Optimizer) -> None:
    """A ValueError naming what differs unless every rank's optimizer has the same kind,
    hyperparameters, t, per-parameter counts and parameters with state."""
    counts = optimizer._counts
    comm.check_agreement("distributed_optimizer", {
        "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
        **{name: getattr(optimizer, name) for name in optimizer.hyperparameters},
        "t": optimizer.t,
        "steps": None if counts is None else {i: n for i, n in enumerate(counts) if n},
        "parameters with state": sorted(optimizer.state),
    })


def average_buffers(module: Module) -> None:
    """Average the floating buffers (BatchNorm running statistics) over ranks; other buffers
    take rank 0's values. Every rank must call it (before evaluation and checkpoints)."""
    if comm.world_size() == 1:
        return
    buffers = module.buffers()
    check_same_tensors("average_buffers", buffers)  # one more on a rank would hang it
    for tensor in buffers:
        if dtype_of(tensor._realize()).kind in "fc":
            comm.allreduce(tensor, op="mean")
        else:
            comm.broadcast(tensor, root=0)


class DistributedOptimizer:
    """`optimizer` whose step() first averages every gradient over the ranks.

    Built by `distributed_optimizer`; every other attribute (lr, state_dict, zero_grad,
    param_groups of a subclass...) is the wrapped optimizer's, read and written through.
    """

    _own = ("optimizer", "module")

    def __init__(self, optimizer: Optimizer, module: Module | None = None):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"distributed_optimizer: expected a needle Optimizer, got "
                            f"{type(optimizer).__name__}")
        object.__setattr__(self, "optimizer", optimizer)
        object.__setattr__(self, "module", module)
        WRAPPERS[next(_SERIAL)] = self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._own:
            object.__setattr__(self, name, value)
        else:
            setattr(self.optimizer, name, value)

    step = Optimizer.step  # (closure, then this wrapper's _replayed_step)

    @replayed  # ndl.compile replays the whole of it: the averaging too
    def _replayed_step(self) -> None:
        """Average the gradients over all ranks (unless allreduce_gradients or clip_grad_norm_
        did since they were computed), then update as the wrapped optimizer does."""
        if comm.world_size() > 1:
            if self.averaged():  # the ranks must all skip it: a check instead of the averaging
                comm.check_agreement("distributed_optimizer.step", ("averaged before step()",))
            else:
                self.allreduce_gradients()
        self.optimizer.step()

    def averaged(self) -> bool:
        """True while every grad is one an averaging (or a clipping after it) left."""
        grads = [p.grad for p in self.params if p.grad is not None]
        return bool(grads) and all(
            (ref := _AVERAGED.get(id(g))) is not None and ref() is g for g in grads)

    def mark_averaged(self) -> None:
        """Record the current grads as averaged (step() then does not average them again)."""
        for p in self.params:
            g = p.grad
            if g is not None:
                _AVERAGED[id(g)] = weakref.ref(g, functools.partial(_forget, id(g)))

    def allreduce_gradients(self) -> None:
        """Replace every parameter's grad by its mean over the ranks.

        Gradients above the optimizer's `flat_max_size` are reduced in place in their own
        arrays (no packing copy: they are large messages already; an array two parameters
        share is reduced once, one that overlaps another is copied first); the small ones
        are concatenated into one flat array per device and dtype. Each array is summed by a
        blocking in-place Allreduce and scaled by 1/N at once, while it is still in cache. The
        ranks check first, in one small collective, that they hold the same gradients (which
        parameters, shapes, dtypes, kinds of device): otherwise a ValueError on every rank.
        """
        size = comm.world_size()
        if size == 1:
            return
        big, small, signature = self._plan()
        comm.check_agreement("distributed_optimizer.step", signature)
        for indices, grad in big:
            mean = comm.mean_in_place(grad)  # once, however many parameters share it
            self._set_grads([(i, mean) for i in indices])
        for (device, _), grads in small.items():
            # a fresh flat array (immutable jax arrays cannot be written into a kept one;
            # the concatenation measured no slower than filling one on cpu)
            flat = FLAT_CONCAT([g for _, g in grads])
            layout = [(i, tuple(g.shape)) for i, g in grads]
            self._set_grads(_views(layout, comm.mean_in_place(flat), device.xp))
        self.mark_averaged()

    def _set_grads(self, pairs: list[tuple[int, Any]]) -> None:
        """Make each (parameter index, array) pair's array that parameter's gradient."""
        for i, arr in pairs:
            p = self.params[i]
            if p.grad is None or p.grad._array is not arr:
                p.grad = Tensor.make_const(arr, device=p.device)

    def _plan(self) -> tuple[list, dict, tuple]:
        """(big ([indices], grad array) pairs, {(device, dtype): small (index, grad) pairs},
        the layout signature)."""
        big: dict[int, tuple[list[int], Any]] = {}
        small: dict[tuple, list] = {}
        signature, limit = [], self.optimizer.flat_max_size
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            data = p._realize()
            g = p.grad._realize()
            if g.dtype != data.dtype:  # e.g. a float64 gradient of a float32 parameter
                g = p.device.xp.astype(g, data.dtype)
            # the device's kind too: a cpu gradient on one rank and a torch one on another
            # are packed into different flat arrays (MPI's "message truncated" otherwise)
            signature.append((i, tuple(g.shape), dtype_of(g).name, p.device.kind))
            if math.prod(g.shape) <= limit:
                small.setdefault((p.device, data.dtype), []).append((i, g))
            elif id(g) in big:
                big[id(g)][0].append(i)
            else:
                if any(may_overlap(g, other) for _, other in big.values()):
                    g = p.device.xp.asarray(g, copy=True)
                big[id(g)] = ([i], g)
        return list(big.values()), small, tuple(signature)

    def __repr__(self) -> str:
        return f"distributed_optimizer({self.optimizer!r})"


def average_for_clipping(params: list) -> list[DistributedOptimizer]:
    """The distributed optimizers holding any of `params`, their gradients averaged now."""
    ids = {id(p) for p in params}
    owners = [w for _, w in sorted(WRAPPERS.items()) if any(id(p) in ids for p in w.params)]
    for owner in owners:
        if not owner.averaged():
            owner.allreduce_gradients()
    return owners


def _views(layout: list, flat: Any, xp: Any) -> list[tuple[int, Any]]:
    """(parameter index, its gradient's view of the bucket's flat array)."""
    views, start = [], 0
    for i, shape in layout:
        end = start + math.prod(shape)
        views.append((i, xp.reshape(flat[start:end], shape)))
        start = end
    return views


def distributed_optimizer(optimizer: Optimizer, module: Module | None = None
                          ) -> DistributedOptimizer:
    """Wrap `optimizer` so that step() averages the gradients over all ranks first.

    Every rank gets rank 0's parameters now (and `module`'s buffers, when given), so all
    ranks start identical whatever their seed; the optimizers must agree (type,
    hyperparameters, step counts, which parameters have state: a ValueError naming what
    differs; load a checkpoint on every rank). Call after `needle.distributed.init()`.
    """
    check_same_tensors("distributed_optimizer", optimizer.params)
    check_same_optimizer(optimizer)
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
