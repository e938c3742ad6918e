"""Parameter and Module: the building blocks every layer is made of."""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Mapping

from ..arguments import flag, integer
from ..autograd import Tensor, graph, mark_modified
from ..autograd.tensor_checks import check_device
from ..backends import Device


class Parameter(Tensor):
    """A tensor that a Module learns (found by `Module.parameters()`)."""

    __slots__ = ()
    _in_place_needs_no_grad = True  # (`p -= lr * p.grad` outside no_grad(): PyTorch's error)

    def __bool__(self) -> bool:
        """True, as the course's (its Tensors define no truth): `if self.bias:` tests that a
        layer has a bias; a one-element bias of 0 (Linear(n, 1)) is not skipped."""
        return True


def check_size(owner: str, name: str, value: Any) -> int:
    """`value` as an int >= 1: a TypeError for non-integers (bools too), ValueError below 1."""
    return integer(owner, name, value, 1)


def _items(obj: Any) -> Any:
    """The (name, value) pairs one level below a Module, dict, list or tuple."""
    if isinstance(obj, Module):
        return vars(obj).items()
    if isinstance(obj, dict):
        return obj.items()
    return enumerate(obj)


def _walk(obj: Any, prefix: str = "", recurse: bool = True, saved_only: bool = False,
          seen: set[int] | None = None) -> Iterator[tuple[str, Any]]:
    """Every Parameter, registered buffer and Module below `obj`, in attribute insertion
    order, with dotted names.

    Containers (dicts, lists, tuples) are entered; Modules are entered when `recurse`, each
    once (a shared or self-referencing module cannot repeat or loop). A Tensor is yielded
    when it is a Parameter (anywhere) or a buffer registered on the module holding it
    (with `saved_only`, a persistent one).
    """
    seen = {id(obj)} if seen is None else seen
    buffers = _buffer_table(obj) if isinstance(obj, Module) else {}
    for key, value in _items(obj):
        name = f"{prefix}{key}"
        if isinstance(value, Tensor):
            buffer = key in buffers and (buffers[key] or not saved_only)
            if buffer or isinstance(value, Parameter):
                yield name, value
        elif isinstance(value, (Module, dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            if isinstance(value, Module):
                yield name, value
                if not recurse:
                    continue
            yield from _walk(value, name + ".", recurse, saved_only, seen)


def _places(obj: Any, prefix: str = "", open_: frozenset[int] = frozenset()
            ) -> Iterator[tuple[str, Module]]:
    """Every Module one level below `obj` at each place that holds it (a shared one at each,
    as PyTorch's repr); never `obj` itself, nor a container inside itself."""
    open_ = open_ | {id(obj)}
    for key, value in _items(obj):
        if id(value) in open_:
            continue
        if isinstance(value, Module):
            yield f"{prefix}{key}", value
        elif isinstance(value, (dict, list, tuple)):
            yield from _places(value, f"{prefix}{key}.", open_)


def _buffer_table(module: Module) -> dict[str, bool]:
    """The module's registered buffer names, each mapped to "persistent" (in state_dict)."""
    return vars(module).get("_buffers", {})


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


_MISSING = object()


def _same_setting(old: Any, new: Any) -> bool:
    """Whether assigning `new` over `old` changes nothing for ndl.compile: the same Tensor
    or Module, or an equal immutable value (a number, numpy's too, a string, bool, None, or
    a tuple of them: `drop.p = 0.0` again). The same list or array, perhaps changed in
    place, is a change."""
    if old is new and isinstance(new, (Tensor, Module)):
        return True
    return type(old) is type(new) and _immutable(new) and repr(old) == repr(new)


def _immutable(value: Any) -> bool:
    """A number (numpy's scalars too), string, bool, None, or a tuple of those."""
    if isinstance(value, tuple):
        return all(map(_immutable, value))
    kind = type(value)
    return kind in (int, float, str, bool, type(None)) or (  # (a 0-d ndarray is mutable)
        kind.__module__ == "numpy" and kind.__name__ != "ndarray"
        and getattr(value, "shape", None) == ())


class Module:
    """Base class of layers and models: holds Parameters, buffers and child Modules.

    Parameters and child Modules are found in the attributes (and in lists, tuples and
    dicts held by them). Buffers, the non-learned state saved in `state_dict()` (such as
    BatchNorm's running statistics), are the Tensors registered with `register_buffer`;
    any other Tensor attribute (an input kept in `forward`, say) is neither.
    """

    training: bool = True
    #: assignments of settings, Parameters, buffers and submodules so far: ndl.compile's
    #: replays check it (`lin.weight = Parameter(...)` or `drop.p = 0.5` records anew);
    #: plain Tensor attributes (a kept input) and `training` (checked itself) don't count
    _assigned: int = 0
    #: settings checked at every assignment, the constructor's and any later one (`bn.eps =
    #: -1` is the constructor's ValueError): name -> check(owner, name, value) -> the value
    #: to keep (a float); reads are plain attribute reads
    _setting_checks: dict[str, Any] = {}

    def __init__(self) -> None:
        self.training = True

    def __setattr__(self, name: str, value: Any) -> None:
        buffers = _buffer_table(self)
        check = self._setting_checks.get(name)
        if check is not None:
            value = check(type(self).__name__, name, value)
        if (isinstance(value, Tensor) and not isinstance(value, Parameter)
                and isinstance(self.__dict__.get(name), Parameter)):
            # allowed, as in the course (its hw4 tests load PyTorch's weights this way), where
            # PyTorch raises; said, since the Tensor is no parameter: not trained, not saved
            warnings.warn(f"{type(self).__name__}.{name}: a plain Tensor replaces a "
                          f"Parameter, so it leaves parameters() and state_dict() (wrap it, "
                          f"Parameter(t), or set `.data` to keep it trained)", stacklevel=2)
        if name != "training":
            if graph._TRACER is not None:  # ndl.compile: what a replay would not repeat
                graph._TRACER.module_set(self, name, value)
            if ((not isinstance(value, Tensor) or name in buffers or isinstance(value, Parameter))
                    and not _same_setting(self.__dict__.get(name, _MISSING), value)):
                object.__setattr__(self, "_assigned", self._assigned + 1)
        if name in buffers:
            if isinstance(value, (Parameter, Module)):
                del buffers[name]  # as in PyTorch: it becomes a parameter or a submodule
            elif value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: cannot assign "
                                f"{type(value).__name__} to buffer {name!r} (a Tensor or "
                                "None expected)")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        _buffer_table(self).pop(name, None)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True
                        ) -> None:
        """Add a buffer: state that is saved and moved with the module but never learned.

        It is read and replaced as the attribute `name`; `persistent=False` leaves it out
        of `state_dict()`. None registers an empty slot (skipped until a Tensor is set).
        """
        where = f"{type(self).__name__}.register_buffer"
        if not isinstance(name, str):
            raise TypeError(f"{where}: the name must be a str, found {type(name).__name__}")
        if not name.isidentifier():
            raise ValueError(f"{where}: the name must be an identifier (no dots), "
                             f"found {name!r}")
        if hasattr(self, name) and name not in _buffer_table(self):
            raise ValueError(f"{where}: {type(self).__name__} already has an attribute "
                             f"{name!r}")
        if isinstance(tensor, Parameter):
            raise TypeError(f"{where}: {name!r} is a Parameter; assign Parameters as "
                            "attributes instead")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"{where}: buffer {name!r} must be a Tensor or None, found "
                            f"{type(tensor).__name__}")
        if "_buffers" not in vars(self):  # a subclass may skip Module.__init__
            object.__setattr__(self, "_buffers", {})
        self._buffers[name] = bool(persistent)
        object.__setattr__(self, name, tensor)

    # ----- discovery (course API) -------------------------------------------------------
    def parameters(self) -> list[Parameter]:
        """Every Parameter of this module and its descendants, in insertion order, once each."""
        return [p for _, p in self.named_parameters()]

    def descendants(self) -> list[Module]:
        """Every descendant Module (children, grandchildren, ...), in insertion order, once
        each; `children()` gives the direct ones only."""
        return [m for _, m in self.named_descendants()]

    # ----- discovery (PyTorch-shaped) ----------------------------------------------------
    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs, e.g. ("modules.0.weight", ...)."""
        return ((n, p) for n, p in _unique(_walk(self)) if isinstance(p, Parameter))

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, Tensor) for the registered buffers of this module and below."""
        return ((n, t) for n, t in _unique(_walk(self))
                if isinstance(t, Tensor) and not isinstance(t, Parameter))

    def buffers(self) -> list[Tensor]:
        """The registered buffers of this module and its descendants."""
        return [b for _, b in self.named_buffers()]

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, Module) for the direct child modules."""
        return ((n, m) for n, m in _walk(self, recurse=False) if isinstance(m, Module))

    def children(self) -> list[Module]:
        """The direct child modules."""
        return [m for _, m in self.named_children()]

    def named_descendants(self) -> Iterator[tuple[str, Module]]:
        """(dotted name, Module) for every descendant, e.g. ("modules.2.fn", ...)."""
        return ((n, m) for n, m in _walk(self) if isinstance(m, Module))

    def named_modules(self) -> Iterator[tuple[str, Module]]:
        """("", self), then (dotted name, Module) for every descendant, as PyTorch's."""
        yield "", self
        yield from self.named_descendants()

    def apply(self, fn: Any) -> Module:
        """`m.apply(fn)` for each child, then `fn(self)`, as PyTorch's (a custom
        initialisation, say); returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set requires_grad on every parameter (freeze with False); returns self."""
        requires_grad = flag(type(self).__name__, "requires_grad", requires_grad)
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's grad to None (as the optimizer's reset_grad), or to zeros."""
        for p in self.parameters():
            p.grad = None if set_to_none else Tensor.make_const(
                p.device.zeros(p.shape, dtype=p._realize().dtype), device=p.device)

    def _named_tensors(self, saved_only: bool = False) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name, in insertion order (with `saved_only`,
        without the non-persistent buffers)."""
        return {n: t for n, t in _unique(_walk(self, saved_only=saved_only))
                if isinstance(t, Tensor)}

    # ----- modes -------------------------------------------------------------------------
    @graph.replayed  # ndl.compile replays a change of mode made inside a step
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and all its descendants."""
        self.training = mode
        for m in self.descendants():
            m.training = mode
        return self

    def eval(self) -> Module:
        """Set evaluation mode on this module and all its descendants."""
        return self.train(False)

    # ----- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name, as detached Tensors sharing storage."""
        return {n: t.detach() for n, t in self._named_tensors(saved_only=True).items()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Copy `state` (Tensors or arrays) into this module's parameters and buffers.

        Every problem (missing keys, unexpected keys, shape mismatches) is reported in one
        ValueError, and nothing changes when it is raised. With `strict=False` missing and
        unexpected keys are tolerated; shape mismatches still raise. Each tensor keeps its
        object identity, dtype, device and memory layout.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"load_state_dict expects a mapping, got {type(state).__name__}")
        own = self._named_tensors(saved_only=True)
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
                raw = value._realize() if isinstance(value, Tensor) else value
                array = target.device.asarray(raw, dtype=target.dtype)
                # laid out in memory as the tensor's own (torch's conv weights)
                arrays[key] = target.device.laid_out_like(array, target._realize())
        for key, array in arrays.items():
            own[key]._array = array
        mark_modified(*(own[key] for key in arrays))  # graphs built before see stale data

    def to(self, device: Device) -> Module:
        """Move every parameter, buffer (and gradient) to `device`, in place; returns self.
        Modules then lay out what they moved as the device's kernels read it (`_placed`)."""
        check_device(device)
        moved = False
        for t in self._named_tensors().values():
            if t.device != device:
                t._array = device.asarray(t._realize())
                t.device = device
                mark_modified(t)
                moved = True
                if t.grad is not None:
                    grad = device.asarray(t.grad._realize())
                    t.grad = Tensor.make_const(grad, device=device)
        for module in [self, *self.descendants()]:
            held = vars(module).get("device", _MISSING)  # (the course's attribute: set once,
            if (held is None or isinstance(held, Device)) and held is not device:
                module.device = device  # so a compiled step that calls to() stays recorded)
            if moved:
                module._placed()
        return self

    def _placed(self) -> None:
        """Called on every module after `to()` moved tensors: lay out this module's own
        tensors as their device's kernels read them (nn.Conv's weights); nothing here."""

    # ----- calling -----------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses override it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if graph._TRACER is not None:
            graph._TRACER.module(self)  # ndl.compile: replays check the train/eval mode
        return self.forward(*args, **kwargs)

    # ----- printing ----------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The arguments shown between the parentheses of this module's repr."""
        return ""

    def _repr_name(self, name: str) -> str:
        return name

    def __repr__(self) -> str:
        lines = [f"({self._repr_name(n)}): {_indent(repr(m))}" for n, m in _places(self)]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"
