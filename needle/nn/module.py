"""Parameter and Module: the building blocks every layer is made of."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from ..autograd import Tensor
from ..backends import Device


class Parameter(Tensor):
    """A tensor that a Module learns (found by `Module.parameters()`)."""

    __slots__ = ()


def _items(obj: Any) -> Any:
    """The (name, value) pairs one level below a Module, dict, list or tuple."""
    if isinstance(obj, Module):
        return vars(obj).items()
    if isinstance(obj, dict):
        return obj.items()
    return enumerate(obj)


def _walk(obj: Any, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Any]]:
    """Every Tensor and Module below `obj`, in attribute insertion order, with dotted names.

    Containers (dicts, lists, tuples) are entered; Modules are entered when `recurse`.
    """
    for key, value in _items(obj):
        name = f"{prefix}{key}"
        if isinstance(value, Tensor):
            yield name, value
        elif isinstance(value, Module):
            yield name, value
            if recurse:
                yield from _walk(value, name + ".")
        elif isinstance(value, (dict, list, tuple)):
            yield from _walk(value, name + ".", recurse)


def _unique(pairs: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Drop objects already seen (shared weights appear once, under their first name)."""
    seen: set[int] = set()
    for name, value in pairs:
        if id(value) not in seen:
            seen.add(id(value))
            yield name, value


def _host_shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(int(s) for s in shape)


def _indent(text: str, spaces: int = 2) -> str:
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


class Module:
    """Base class of layers and models: holds Parameters, buffers and child Modules."""

    training: bool = True

    def __init__(self) -> None:
        self.training = True

    # ----- discovery (course API) -------------------------------------------------------
    def parameters(self) -> list[Parameter]:
        """Every Parameter of this module and its descendants, in insertion order, once each."""
        return [p for _, p in self.named_parameters()]

    def _children(self) -> list[Module]:
        """Every descendant Module (children, grandchildren, ...), in insertion order."""
        return [m for _, m in _walk(self) if isinstance(m, Module)]

    # ----- discovery (PyTorch-shaped) ----------------------------------------------------
    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs, e.g. ("modules.0.weight", ...)."""
        return ((n, p) for n, p in _unique(_walk(self)) if isinstance(p, Parameter))

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, Tensor) for Tensor attributes that are not Parameters (running stats)."""
        return ((n, t) for n, t in _unique(_walk(self))
                if isinstance(t, Tensor) and not isinstance(t, Parameter))

    def buffers(self) -> list[Tensor]:
        """The buffers: Tensor attributes that are not Parameters."""
        return [b for _, b in self.named_buffers()]

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, Module) for the direct child modules."""
        return ((n, m) for n, m in _walk(self, recurse=False) if isinstance(m, Module))

    def children(self) -> list[Module]:
        """The direct child modules."""
        return [m for _, m in self.named_children()]

    def _named_tensors(self) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name, in insertion order."""
        return {n: t for n, t in _unique(_walk(self)) if isinstance(t, Tensor)}

    # ----- modes -------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and all its descendants."""
        self.training = mode
        for m in self._children():
            m.training = mode
        return self

    def eval(self) -> Module:
        """Set evaluation mode on this module and all its descendants."""
        return self.train(False)

    # ----- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name, as detached Tensors sharing storage."""
        return {n: t.detach() for n, t in self._named_tensors().items()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Copy `state` (Tensors or arrays) into this module's parameters and buffers.

        Every problem (missing keys, unexpected keys, shape mismatches) is reported in one
        ValueError, and nothing changes when it is raised. With `strict=False` missing and
        unexpected keys are tolerated; shape mismatches still raise. Each tensor keeps its
        object identity, dtype and device.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict expects a mapping, got {type(state).__name__}")
        own = self._named_tensors()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        problems = []
        if strict and missing:
            problems.append(f"missing keys: {missing}")
        if strict and unexpected:
            problems.append(f"unexpected keys: {unexpected}")
        for key, target in own.items():
            if key in state:
                found = _host_shape(state[key])
                if found != target.shape:
                    problems.append(f"shape mismatch for {key!r}: expected {target.shape}, "
                                    f"found {found}")
        if problems:
            raise ValueError(f"load_state_dict for {type(self).__name__}: "
                             + "; ".join(problems))
        # convert everything first, so a failing conversion leaves the module untouched
        arrays = {}
        for key, target in own.items():
            if key in state:
                value = state[key]
                raw = value.realize_cached_data() if isinstance(value, Tensor) else value
                arrays[key] = target.device.asarray(raw, dtype=target.dtype)
        for key, array in arrays.items():
            own[key].cached_data = array

    def to(self, device: Device) -> Module:
        """Move every parameter, buffer (and gradient) to `device`, in place; returns self."""
        for t in self._named_tensors().values():
            if t.device != device:
                t.cached_data = device.asarray(t.realize_cached_data())
                t.device = device
                if t.grad is not None:
                    grad = device.asarray(t.grad.realize_cached_data())
                    t.grad = Tensor.make_const(grad, device=device)
        return self

    # ----- calling -----------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses override it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ----- printing ----------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The arguments shown between the parentheses of this module's repr."""
        return ""

    def _repr_name(self, name: str) -> str:
        return name

    def __repr__(self) -> str:
        lines = [f"({self._repr_name(n)}): {_indent(repr(m))}" for n, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
