"""The RuntimeErrors (PyTorch's "modified by an inplace operation") for a graph whose data
changed after it was built: an input stamped later than the node that used it, or an op's
output replaced before its gradient rule read it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .weak import WeakIdSet

if TYPE_CHECKING:
    from .graph import Value


def check_versions(node: Value) -> None:
    """Raise PyTorch's RuntimeError when an input of `node` changed after `node` was made
    (the engine inlines the comparison and calls this to raise)."""
    version = node._version
    for i, inp in enumerate(node.inputs):
        if inp._version > version:
            data = inp._array
            if isinstance(data, tuple):
                what = "TensorTuple of shapes " + ", ".join(str(tuple(a.shape)) for a in data)
            else:
                what = (f"{type(inp).__name__} {inp.device.public_dtype(data.dtype)} "
                        f"{tuple(data.shape)}")
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [needle.{what}], input {i} of {type(node.op).__name__}, "
                "was changed (by an optimizer step, a .data assignment, load_state_dict or "
                "another in-place update) after the graph was built; call backward() before "
                "changing it, or run the forward again"
            )


#: op outputs whose data was replaced (`mark_modified` on a non-leaf): a gradient rule reading
#: one (`node.result`) raises; empty, as it almost always is, the test costs one truth test
REPLACED = WeakIdSet()


def raise_replaced(node: Value) -> None:
    """The RuntimeError for a gradient rule reading the output of `node` after that output
    was replaced (`mark_modified` on a non-leaf): the rule would compute with the new
    data. Rules that never read their output (a loss averaged across ranks in place, then
    differentiated) are unaffected."""
    data = node._array
    shape = tuple(data.shape) if not isinstance(data, tuple) else "a tuple"
    name = type(node.op).__name__
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: the output of {name} (needle.{type(node).__name__} of shape "
        f"{shape}) was replaced (by a .data assignment, a write through an NDArray view, an "
        f"in-place collective) after the graph was built, and "
        f"{name}'s gradient reads it; compute from a copy instead, or run the forward again"
    )
