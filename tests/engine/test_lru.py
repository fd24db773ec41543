"""The bounded LRU mapping behind every cache keyed by user input."""
from __future__ import annotations

import pytest

from hopgraph.engine.lru import LRUCache


def test_lru_keeps_the_most_recent_entries():
    cache: LRUCache[str, int] = LRUCache(3)
    for i, key in enumerate("abcd"):
        cache.put(key, i)
    assert len(cache) == 3 and "a" not in cache
    assert cache.get("b") == 1  # b is now the most recent: c goes next
    cache.put("e", 4)
    assert "c" not in cache and {"b", "d", "e"} == {k for k in "bcde" if k in cache}
    made = []
    assert cache.get_or_make("f", lambda: made.append(1) or 5) == 5 and made == [1]
    assert cache.get_or_make("f", lambda: made.append(1) or 6) == 5 and made == [1]
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        LRUCache(0)
