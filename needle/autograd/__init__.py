"""The autograd engine: the graph (graph.py), Tensor and its operators (tensor.py) and the
backward walk (engine.py)."""

from typing import Any

from ..backend_ndarray import course_getattr
from ..grad_mode import (  # noqa: F401  (re-exported: needle.autograd.no_grad is course API)
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .engine import ArrayNode, backward
from .graph import (
    Op,
    Value,
    array_function,
    array_of,
    find_topo_sort,
    live_values,
    mark_modified,
    replayed,
)
from .modified import check_versions
from .tensor import OneHotAdjoint, Tensor, TensorOp, TensorTuple, TensorTupleOp, constant_like

__all__ = [
    "ArrayNode", "OneHotAdjoint", "Op", "Tensor", "TensorOp", "TensorTuple", "TensorTupleOp",
    "Value", "array_function", "array_of", "backward", "check_versions",
    "compute_gradient_of_variables", "constant_like", "enable_grad", "find_topo_sort",
    "is_grad_enabled", "live_values", "mark_modified", "no_grad", "replayed",
    "set_grad_enabled",
]


def compute_gradient_of_variables(output_tensor: Tensor, out_grad: Tensor) -> None:
    """The course's name for the backward walk: set `.grad` of every value `output_tensor`
    depends on, for the adjoint `out_grad` (recorded while grad mode is on)."""
    backward(output_tensor, out_grad if is_grad_enabled() else out_grad._array)


_course = course_getattr(__name__)


def __getattr__(name: str) -> Any:
    if name == "TENSOR_COUNTER":  # the course's count of live Values
        return live_values()
    return _course(name)
