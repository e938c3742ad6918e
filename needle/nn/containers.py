"""Module containers with PyTorch's names: ModuleList and ModuleDict.

Each item is an attribute of its container, named by its index ("0", "1", ...) or key, so
the Module machinery finds it as a child: `parameters()`, `train()`/`eval()`, `to()` and
`state_dict()` ("layers.0.weight") reach it, each once. Every change goes through
`Module.__setattr__` (a deletion is counted too), so ndl.compile's guard on the container's
assignments notices it and records again.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable, Iterator, Mapping

from ..autograd import graph
from .module import Module


def _checked(owner: str, value: Any, where: str) -> Module:
    """`value`, which must be a Module: a TypeError naming its type otherwise."""
    if not isinstance(value, Module):
        raise TypeError(f"{owner}: {where} must be a Module, found {type(value).__name__}")
    return value


def _read(container: Module) -> None:
    """An item is read: under ndl.compile the container is guarded as a called Module is
    (replays check its assignments), even where the step never calls the container."""
    if graph._TRACER is not None:
        graph._TRACER.module(container)


def _forget(container: Module, name: str) -> None:
    """Delete the item attribute `name`, counted as an assignment (ndl.compile records
    again)."""
    object.__delattr__(container, name)
    object.__setattr__(container, "_assigned", container._assigned + 1)


class ModuleList(Module):
    """A list of Modules, each registered as a child (as PyTorch's `nn.ModuleList`)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _count(self) -> int:
        """The number of items (no read for ndl.compile: changes use it)."""
        n, own = 0, vars(self)
        while str(n) in own:
            n += 1
        return n

    def _items(self) -> list[Module]:
        return [getattr(self, str(i)) for i in range(self._count())]

    def _set_all(self, modules: list[Module]) -> None:
        """Make `modules` the items, in order (unchanged slots are no assignment)."""
        old = self._count()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)
        for i in range(len(modules), old):
            _forget(self, str(i))

    def _index(self, index: Any) -> int:
        """`index` as a position in range (negative ones count from the end)."""
        if isinstance(index, bool):  # (a list takes True as 1: a slip, more likely)
            raise TypeError("ModuleList indices must be integers or slices, found bool")
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"ModuleList indices must be integers or slices, found "
                            f"{type(index).__name__}") from None
        n = self._count()
        if not -n <= index < n:
            raise IndexError(f"ModuleList index {index} out of range for {n} modules")
        return index % n

    def __len__(self) -> int:
        _read(self)
        return self._count()

    def __iter__(self) -> Iterator[Module]:
        _read(self)
        return iter(self._items())

    def __getitem__(self, index: int | slice) -> Module | ModuleList:
        """The module at `index`; a slice gives a new ModuleList of those modules."""
        _read(self)
        if isinstance(index, slice):
            return ModuleList(self._items()[index])
        return getattr(self, str(self._index(index)))

    def __setitem__(self, index: int | slice, value: Any) -> None:
        """Replace the module at `index` (or, with a slice, those modules, as a list's)."""
        items = self._items()
        if isinstance(index, slice):
            new = [_checked("ModuleList", m, "every item") for m in value]
            items[index] = new  # (a list's rules: an extended slice keeps its length)
            self._set_all(items)
        else:
            setattr(self, str(self._index(index)), _checked("ModuleList", value, "an item"))

    def __delitem__(self, index: int | slice) -> None:
        """Remove the module at `index` (or those of a slice); later ones move down."""
        items = self._items()
        del items[index if isinstance(index, slice) else self._index(index)]
        self._set_all(items)

    def append(self, module: Module) -> ModuleList:
        """Add `module` at the end; returns self."""
        setattr(self, str(self._count()), _checked("ModuleList", module, "an item"))
        return self

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        """A new ModuleList of these modules, then `other`'s."""
        return ModuleList([*self, *other])  # (iterating reads: ndl.compile guards self)

    def __iadd__(self, other: Iterable[Module]) -> ModuleList:
        return self.extend(other)

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add each of `modules` at the end, all checked first; returns self."""
        new = [_checked("ModuleList", m, f"item {i}") for i, m in enumerate(modules)]
        for m in new:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert `module` before position `index` (as a list's insert)."""
        items = self._items()
        items.insert(index, _checked("ModuleList", module, "an item"))
        self._set_all(items)

    def pop(self, index: int = -1) -> Module:
        """Remove and return the module at `index` (the last by default)."""
        module = getattr(self, str(self._index(index)))
        del self[index]
        return module


class ModuleDict(Module):
    """Modules by string key, in insertion order, each registered as a child (as
    PyTorch's `nn.ModuleDict`)."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None
                 = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _key(self, key: Any) -> str:
        """`key`, checked to be a string usable as an item name."""
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict keys must be strings, found {type(key).__name__}")
        if not key or "." in key:
            raise KeyError(f"ModuleDict key {key!r}: must be non-empty and contain no '.'")
        if key == "_buffers" or (hasattr(self, key) and key not in self._names()):
            raise KeyError(f"ModuleDict key {key!r} is an attribute of ModuleDict")
        return key

    def _names(self) -> list[str]:
        """The keys (no read for ndl.compile: changes use it)."""
        return [k for k, v in vars(self).items() if isinstance(v, Module)]

    def _get(self, key: Any) -> Module:
        if not isinstance(key, str) or key not in self._names():
            raise KeyError(key)
        return vars(self)[key]

    def __len__(self) -> int:
        return len(self.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: Any) -> bool:
        return isinstance(key, str) and key in self.keys()

    def __getitem__(self, key: str) -> Module:
        """The module under `key`; a KeyError if there is none."""
        _read(self)
        return self._get(key)

    def __setitem__(self, key: str, module: Module) -> None:
        """Set the module under `key` (a new key goes last, an old one keeps its place)."""
        setattr(self, self._key(key), _checked("ModuleDict", module, f"the value for {key!r}"))

    def __delitem__(self, key: str) -> None:
        """Remove the module under `key`."""
        self._get(key)  # (the KeyError)
        _forget(self, key)

    def keys(self) -> list[str]:
        """The keys, in insertion order."""
        _read(self)
        return self._names()

    def values(self) -> list[Module]:
        """The modules, in insertion order."""
        return [vars(self)[k] for k in self.keys()]

    def items(self) -> list[tuple[str, Module]]:
        """(key, module) pairs, in insertion order."""
        return [(k, vars(self)[k]) for k in self.keys()]

    def pop(self, key: str) -> Module:
        """Remove and return the module under `key`."""
        module = self._get(key)
        del self[key]
        return module

    def clear(self) -> None:
        """Remove every module."""
        for key in self._names():
            _forget(self, key)

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Set each (key, module) of a mapping or of an iterable of pairs, all checked first."""
        pairs = list(modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules)
        checked = []
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"ModuleDict.update: expected (key, Module) pairs, found "
                                f"{type(pair).__name__}")
            key, module = pair
            checked.append((self._key(key),
                            _checked("ModuleDict", module, f"the value for {key!r}")))
        for key, module in checked:
            setattr(self, key, module)
