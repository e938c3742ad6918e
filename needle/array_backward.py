"""Reverse-mode AD on raw device arrays, for backward() when no graph is recorded.

`backward(create_graph=False)` (or backward() under no_grad) needs the adjoints' values only.
Ops with a `vjp(g, node)` method give their inputs' adjoints as arrays directly, computed
in the same order as their `gradient` (so the numbers agree to the bit); any other op runs its
`gradient` on a constant Tensor and is unwrapped. No Tensor is made for an adjoint: each
node's `.grad` holds the array and wraps it in a Tensor when first read.

A TensorTuple's adjoint is a tuple of arrays with None for the zero elements.
"""

from __future__ import annotations

from typing import Any

from . import autograd
from .autograd import (
    OneHotAdjoint,
    Tensor,
    TensorTuple,
    Value,
    check_versions,
    find_topo_sort,
)
from .backends import namespace
from .kernels import ADD_TO_FRESH


def backward_arrays(output: Value, out_grad: Any) -> None:
    """Set `.grad` of every node `output` depends on, from the adjoint array `out_grad`."""
    partials_of: dict[Value, list] = {output: [out_grad]}
    clock = autograd._VERSION_CLOCK
    for node in reversed(find_topo_sort([output], requiring_grad=True)):
        partials = partials_of.pop(node, None)
        if partials is None:
            continue
        version = node._version
        if version != clock:  # something changed since this node was made (BatchNorm's
            for inp in node.inputs:  # running statistics, every training forward): check
                if inp._version > version:
                    check_versions(node)  # raises
        if node.__class__ is not Tensor and isinstance(node, TensorTuple):
            grad = _sum_tuples(partials)
        elif len(partials) == 1:
            grad = partials[0]
        else:
            grad = partials[0] + partials[1]  # AddN's order: left to right
            if len(partials) > 2:
                add = ADD_TO_FRESH.on(grad)
                for p in partials[2:]:
                    grad = add(grad, p)
        node._grad = grad  # an array (or a tuple): `Value.grad` wraps it when read
        op = node.op
        if op is None:
            continue
        vjp = getattr(op, "vjp", None)
        if vjp is not None:  # needle's own ops: adjoints shaped like their inputs
            parts = vjp(grad, node)
        else:  # any op: through its gradient, with the shape check as a safety net
            parts = _through_gradient(op, grad, node)
            parts = tuple(_fit(inp, p) for inp, p in zip(node.inputs, parts))
        for inp, partial in zip(node.inputs, parts):
            if partial is None or not inp.requires_grad:
                continue
            pending = partials_of.get(inp)
            if pending is None:
                partials_of[inp] = [partial]
            else:
                pending.append(partial)


def _fit(inp: Value, partial: Any) -> Any:
    """A user op's adjoint summed back to its input's shape where it was broadcast."""
    if partial is None or isinstance(inp, TensorTuple):
        return partial
    shape = inp._realize().shape
    return partial if partial.shape == shape else sum_array_to_shape(partial, tuple(shape))


def _sum_tuples(partials: list[tuple]) -> tuple:
    """Elementwise sums of tuple adjoints (None: zero)."""
    out = list(partials[0])
    for partial in partials[1:]:
        for i, a in enumerate(partial):
            if a is not None:
                out[i] = a if out[i] is None else out[i] + a
    return tuple(out)


def _through_gradient(op: Any, grad: Any, node: Value) -> tuple:
    """The op's `gradient` on a constant Tensor (no graph is recorded), unwrapped."""
    if isinstance(node, TensorTuple):
        data = node._realize()
        full = tuple(namespace(data[i]).zeros_like(data[i]) if g is None else g
                     for i, g in enumerate(grad))
        wrapped = TensorTuple.make_const(full, device=node.device)
    else:
        wrapped = Tensor.make_const(grad, device=node.device)
    parts = op.gradient(wrapped, node)
    if parts.__class__ is not tuple:
        parts = tuple(parts) if isinstance(parts, list) else (parts,)
    return tuple(_unwrap(p) for p in parts)


def _unwrap(part: Value | None) -> Any:
    """An adjoint Tensor's array; a TensorTuple's tuple of arrays (None for known zeros)."""
    if part is None:
        return None
    if part.__class__ is OneHotAdjoint:
        out: list = [None] * len(part._realize())
        out[part.index] = part.element._realize()
        return tuple(out)
    return part._realize()


from .ops.movement import sum_array_to_shape  # noqa: E402
