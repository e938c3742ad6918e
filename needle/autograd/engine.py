"""The backward engine: one reverse-mode walk for both kinds of backward.

While a graph is recorded (`backward()`, create_graph=True) the adjoints are Tensors built by
the ops' `gradient` rules, so they can be differentiated again. With no graph recorded
(create_graph=False, or under no_grad) the same rules run on raw arrays: each node is shown
to its rule as an `ArrayNode` and every op called on arrays evaluates at once, so both kinds
give the same numbers by construction. The engine names no op: a value's class sums its
partial adjoints (`_sum_adjoints`) and fits one to its shape (`_fit_adjoint`).
"""

from __future__ import annotations

import weakref
from operator import attrgetter
from typing import Any

from ..backend_ndarray import unwrap
from ..backends import is_device_array
from ..grad_mode import _grad_enabled
from . import graph
from .graph import Value, find_topo_sort
from .modified import REPLACED, check_versions, raise_replaced

_array, _requires_grad = attrgetter("_array"), attrgetter("requires_grad")


class ArrayNode:
    """A node as a gradient rule sees it when no graph is recorded: raw arrays throughout.

    `inputs` are the arrays the op computed on; the other fields are read from the node
    only when a rule asks (most rules read two or three of them).
    """

    __slots__ = ("inputs", "node", "retains")

    @property
    def op(self) -> Any:
        return self.node.op

    @property
    def result(self) -> Any:
        """The op's output array (a RuntimeError once it was replaced, as `Value.result`)."""
        node = self.node
        if REPLACED and node in REPLACED:
            raise_replaced(node)
        return node._array

    @property
    def saved(self) -> Any:
        """What the op's `forward` kept for the gradient."""
        return self.node.saved

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        """For each input, whether it requires a gradient."""
        return self.node.needs_input_grad

    @property
    def device(self) -> Any:
        return self.node.device


def _tensor_rule(op: Any, grad: Any, node: Value) -> tuple:
    """A user op's rule, written with Tensors as the course's are (`node.inputs[0].numpy()`,
    `out_grad.transpose()`), run on Tensors with no graph recorded: its adjoints' arrays."""
    parts = user_parts(op, op.gradient(node.__class__.make_const(grad, device=node.device),
                                       node), node)
    return tuple(None if p is None else p._array for p in parts)


def user_parts(op: Any, parts: Any, node: Value) -> tuple:
    """A user rule's adjoints as a tuple of Values of the node's device (or None): an
    NDArray or an array of the device is taken as a constant, another library's or
    device's array is a TypeError naming the op (it was stored in `.grad` unchecked)."""
    if parts.__class__ is not tuple:
        parts = tuple(parts) if isinstance(parts, list) else (parts,)
    device, out = node.device, []
    for p in parts:
        if p is not None and not isinstance(p, Value):
            raw = unwrap(p)
            if not (is_device_array(raw) and device.owns(raw)):
                raise TypeError(f"{type(op).__name__}.gradient returned {type(p).__name__} "
                                f"for a node on {device}: return Tensors (or None)")
            p = node.__class__.make_const(raw, device=device)
        out.append(p)
    return tuple(out)


def backward(output: Value, out_grad: Any, retain_graph: bool = True) -> None:
    """Set `.grad` of every value `output` depends on, for the adjoint `out_grad` of `output`
    (a Tensor while grad mode is on, else a raw array). Without `retain_graph`, each node's
    saved values are dropped once its rule has run (a later walk recomputes them)."""
    record = _grad_enabled()
    tracer = graph._TRACER
    raw_leaves = False
    if tracer is not None and not record and tracer.recording():
        # ndl.compile records every array operation, and raw arrays' operators escape it:
        # the recording walk gives the same numbers, and the leaves their arrays
        out_grad, record, raw_leaves = tracer.constant(output, out_grad), True, True
    view = None if record else ArrayNode()
    if view is not None:
        view.retains = retain_graph  # False: a rule may consume its node's saved values
    partials_of: dict[Value, list] = {output: [out_grad]}
    given: set[int] = set()  # the recorded adjoints given to leaves as their .grad
    clock = graph._VERSION_CLOCK
    for node in reversed(find_topo_sort([output], requiring_grad=True)):
        partials = partials_of.pop(node, None)
        if partials is None:  # reached only through rules that give it no adjoint (ReLU's
            if node.op is None and node._grad is not None:  # adjoint, say): a leaf's
                node._grad = None  # gradient of an earlier pass must not stay as this one's
                if tracer is not None:
                    tracer.grad_set(node, raw_leaves, None)
            continue
        version = node._version
        if version != clock:  # something changed since this node was made (BatchNorm's
            for inp in node.inputs:  # running statistics, every training forward): check
                if inp._version > version:
                    check_versions(node)  # raises
        if len(partials) == 1 and (record or node._array.__class__ is not tuple):
            grad = partials[0]
        else:  # (a tuple's raw adjoints always: their None elements become zeros)
            grad = node._sum_adjoints(partials)
        op = node.op
        if tracer is not None and op is not None:
            tracer.backward_node(node)  # (ndl.compile: not a graph from before the step)
        if op is None:
            if record:  # a leaf's own .grad, never another leaf's object (`w1 + w2` gives
                if id(grad) in given and grad._array.__class__ is not tuple:  # both one):
                    grad = grad.reshape(grad.shape)  # `w1.grad *= 2` must not scale w2's
                given.add(id(grad))
            node._grad = grad
            if tracer is not None:
                tracer.grad_set(node, raw_leaves, grad)
            continue
        if record:
            # An intermediate node holds a recorded adjoint weakly: that adjoint's graph
            # refers back to the node, and a strong reference would make a cycle only gc
            # could free. It stays alive while the leaves' gradients (built on it) are.
            node._grad = grad if grad.op is None else weakref.ref(grad)
            parts = op.gradient(grad, node)
            if not op.array_rules:  # a user's rule: what it returns is checked
                parts = user_parts(op, parts, node)
        else:
            node._grad = grad  # an array (or a tuple): `Value.grad` wraps it when read
            if op.array_rules:
                view.node = node  # the one view, now of this node
                arrays = node._arrays
                view.inputs = tuple(map(_array, node.inputs)) if arrays is None else arrays
                parts = op.gradient(grad, view)
            else:
                parts = _tensor_rule(op, grad, node)
        if not retain_graph:
            node.saved = None  # (the memory PyTorch frees too; a rule that runs again recomputes)
        if parts.__class__ is not tuple:  # what gradient_as_tuple does, inlined
            parts = tuple(parts) if isinstance(parts, list) else (parts,)
        fit = not op.adjoints_fit  # a user op's adjoint may need summing to its input's shape
        if fit and len(parts) != len(node.inputs):
            raise ValueError(f"{type(op).__name__}.gradient returned {len(parts)} adjoint(s) "
                             f"for {len(node.inputs)} input(s): one per input (None for an "
                             "input that needs none)")
        for i, (inp, partial) in enumerate(zip(node.inputs, parts)):
            if partial is None or not inp.requires_grad:
                continue
            if fit and inp._array.__class__ is not tuple and (
                    partial._array if record else partial).shape != inp._array.shape:
                try:
                    partial = inp._fit_adjoint(partial)
                except ValueError as e:
                    raise ValueError(f"{type(op).__name__}.gradient: the adjoint of input {i} "
                                     f"does not fit its shape {tuple(inp._array.shape)} ({e})"
                                     ) from None
            pending = partials_of.get(inp)
            if pending is None:
                partials_of[inp] = [partial]
            else:
                pending.append(partial)
