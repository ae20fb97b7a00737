"""A few values kept by the identity of the objects they were made from.

A snapshot built on another shares its protocol and metadata objects until a commit changes
one, so a value derived from them (the logical schema, an expression's scope) can be found by
the objects' identity, which costs nothing, instead of by their equality: a ``pa.Schema``
works out its hash anew at every call. The objects are kept with the value, so their ids
cannot be reused while the entry lives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByIdentity(Generic[V]):
    def __init__(self, kept: int = 64) -> None:
        self._kept = kept
        self._items: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, objects: tuple[object, ...], make: Callable[[], V]) -> V:
        """The value made from ``objects`` (``make()`` the first time, or once evicted)."""
        key = tuple(id(o) for o in objects)
        with self._lock:
            got = self._items.get(key)
            if got is not None and all(a is b for a, b in zip(got[0], objects, strict=True)):
                self._items.move_to_end(key)
                return got[1]
        value = make()
        with self._lock:
            self._items[key] = (objects, value)
            if len(self._items) > self._kept:
                self._items.popitem(last=False)
        return value
