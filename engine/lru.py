"""A bounded least-recently-used mapping, for every cache whose keys come from user input (filter
fields, query tokens): its size never depends on what requests ask for.

The eviction is ``cachetools.LRUCache``'s; this adds what its caches leave to the caller: a lock
(they are not thread-safe) and an empty copy when pickled (an embedder sent to another process
does not carry its cache along)."""
from __future__ import annotations

import threading
from typing import Callable, Generic, Hashable, TypeVar

import cachetools

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` entries; a hit makes its entry the most recent, an insertion beyond
    ``maxsize`` drops the least recent. Thread-safe; O(1) per operation. A pickled cache arrives
    empty, with its bound."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: cachetools.LRUCache = cachetools.LRUCache(maxsize)
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:
        return (type(self), (self.maxsize,))

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def get(self, key: K) -> V | None:
        """The value of ``key`` (now the most recent), or None."""
        with self._lock:
            return self._data.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` as the most recently used; the least recently used entry
        beyond ``maxsize`` is dropped."""
        with self._lock:
            self._data[key] = value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` and kept when absent (``make`` runs unlocked)."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._data.clear()
