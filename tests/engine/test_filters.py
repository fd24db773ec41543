"""The ``where`` filter's per-field cache is bounded: requests naming thousands of new fields keep
it at ``MAX_FIELDS`` entries, and a field no passage has is answered without being cached."""
from __future__ import annotations

import json

import numpy as np

from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.filters import MAX_FIELDS, MetadataIndex


def corpus(n: int = 40) -> Corpus:
    meta = [json.dumps({"year": 2000 + i % 4, f"f{i % 7}": "x", "tags": ["a", "b"] if i % 2 else ["c"]})
            for i in range(n)]
    return Corpus([f"p{i}" for i in range(n)], [""] * n, [f"text {i}" for i in range(n)], metadata=meta)


def test_field_cache_is_bounded_and_unknown_fields_are_free():
    c = corpus()
    index = MetadataIndex(c, max_fields=4)
    want_year = np.array([i % 4 == 1 for i in range(len(c))])
    np.testing.assert_array_equal(index.mask({"year": 2001}), want_year)
    for i in range(5000):  # a request naming fresh field names, as an abusive client would
        assert not index.mask({f"no-such-field-{i}": "v"}).any()
        assert index.mask({f"no-such-field-{i}": None}).all()  # a missing field is None
    assert len(index._fields) == 1  # unknown names were never cached
    for i in range(7):
        index.mask({f"f{i}": "x"})
    assert len(index._fields) == 4
    np.testing.assert_array_equal(index.mask({"year": 2001}), want_year)  # rebuilt after eviction: same mask
    np.testing.assert_array_equal(index.mask({"tags": "a"}), np.arange(len(c)) % 2 == 1)
    assert MetadataIndex(c)._fields.maxsize == MAX_FIELDS
