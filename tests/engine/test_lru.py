"""The bounded LRU mapping behind every cache keyed by user input."""
from __future__ import annotations

import numpy as np
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


def test_a_pickled_cache_arrives_empty_with_its_bound():
    import pickle

    from hopgraph.engine.embedders import HashingEmbedder

    cache = LRUCache(3)
    cache.put("a", 1)
    copy = pickle.loads(pickle.dumps(cache))
    assert len(copy) == 0 and copy.maxsize == 3
    copy.put("b", 2)
    assert copy.get("b") == 2
    emb = HashingEmbedder(16)
    emb.encode(["a cached token"])
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(emb)).encode(["a cached token"]),
                                  emb.encode(["a cached token"]))


def test_concurrent_use_keeps_the_bound_and_every_value():
    import threading

    cache: LRUCache[int, int] = LRUCache(16)
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for key in rng.integers(0, 64, 3000).tolist():
                assert cache.get_or_make(key, lambda: key * 10) == key * 10
                assert len(cache) <= 16
        except Exception as e:  # noqa: BLE001 - every failure is reported
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 16
