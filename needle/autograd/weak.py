"""Weak containers keyed by identity: weakref's WeakSet and WeakKeyDictionary compare their
keys with `==` (a Tensor's is elementwise, as PyTorch's), these by `is`."""

from __future__ import annotations

import weakref
from typing import Any


class WeakIdDict:
    """obj -> value for objects held weakly, looked up by identity (an entry goes with its
    object)."""

    __slots__ = ("_items", "__weakref__")

    def __init__(self) -> None:
        self._items: dict[int, tuple[weakref.ref, Any]] = {}

    def _forget(self, key: int, ref: weakref.ref) -> None:
        entry = self._items.get(key)
        if entry is not None and entry[0] is ref:  # (not a later object of the same id)
            del self._items[key]

    def __setitem__(self, obj: Any, value: Any) -> None:
        mine = weakref.ref(self)
        key = id(obj)

        def gone(ref: weakref.ref, key: int = key) -> None:
            me = mine()
            if me is not None:
                me._forget(key, ref)
        self._items[key] = (weakref.ref(obj, gone), value)

    def get(self, obj: Any, default: Any = None) -> Any:
        entry = self._items.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else default

    def __contains__(self, obj: Any) -> bool:
        entry = self._items.get(id(obj))
        return entry is not None and entry[0]() is obj

    def __len__(self) -> int:
        return len(self._items)


class WeakIdSet:
    """A set of objects held weakly, by identity."""

    __slots__ = ("_dict",)

    def __init__(self) -> None:
        self._dict = WeakIdDict()

    def add(self, obj: Any) -> None:
        self._dict[obj] = None

    def __contains__(self, obj: Any) -> bool:
        return obj in self._dict

    def __len__(self) -> int:
        return len(self._dict)
