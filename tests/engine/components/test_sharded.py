"""The router's view of a sharded index's components: the shard map, exact merging of top lists,
BM25 with statistics summed over parts equal to one index, rows gathered from owners."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.engine.components.bm25 import BM25Index, BM25Params, TermStats
from hopgraph.engine.components.sharded import ShardMap, ShardSet, ShardedRows, merge_topk
from hopgraph.engine.errors import InputError

TEXTS = ["the river bridge in the old city", "a bridge over the river", "city hall and the old market",
         "river boats", "the market bridge", "", "old old old city river"]


def test_bm25_with_summed_statistics_equals_one_index():
    params = BM25Params()
    whole = BM25Index.build(TEXTS, params)
    parts = [BM25Index.build([t for i, t in enumerate(TEXTS) if i % 3 == s], params) for s in range(3)]
    queries = whole.tokenize(["old river bridge", "market", "nothing here", "old old city"])
    stats = TermStats(0, 0, {})
    for p in parts:
        stats = stats.plus(p.term_stats(queries))
    for q in queries:
        full = whole.scores(q)
        for s, p in enumerate(parts):
            rows = [i for i in range(len(TEXTS)) if i % 3 == s]
            np.testing.assert_array_equal(p.with_stats(stats).scores(q), full[rows])  # to the bit
            np.testing.assert_array_equal(p.with_stats(stats).scores_at(q, np.arange(len(rows))), full[rows])


def test_shard_map_split_extend_and_global_rows():
    owner = np.array([1, 0, 1, 1, 0])
    local = np.array([0, 0, 1, 2, 1])
    m = ShardMap(owner, local, 2)
    assert [r.tolist() for r in m.rows_of] == [[1, 4], [0, 2, 3]]
    parts = m.split(np.array([3, 4, 0]))
    assert parts[0][0].tolist() == [1] and parts[0][1].tolist() == [1]
    assert parts[1][0].tolist() == [0, 2] and parts[1][1].tolist() == [2, 0]
    grown = m.extended(np.array([0, 1, 0]))
    assert grown.local[5:].tolist() == [2, 3, 3] and [r.tolist() for r in grown.rows_of] == [[1, 4, 5, 7], [0, 2, 3, 6]]
    np.testing.assert_array_equal(m.to_global(1, np.array([2, -1, 0])), [3, -1, 0])
    with pytest.raises(InputError):
        ShardMap(owner, local[:3], 2)


def test_merge_topk_orders_ties_toward_the_lower_row_and_pads():
    a = (np.array([[7, 2, -1]]), np.array([[0.9, 0.5, -np.inf]], np.float32))
    b = (np.array([[3, 5, 1]]), np.array([[0.9, 0.5, 0.1]], np.float32))
    ids, scores = merge_topk([a, b], 4, 1)
    assert ids.tolist() == [[3, 7, 2, 5]]
    ids, scores = merge_topk([a], 4, 1)
    assert ids.tolist() == [[7, 2, -1, -1]] and np.isneginf(scores[0, 2:]).all()
    ids, scores = merge_topk([], 2, 3)
    assert (ids == -1).all() and np.isneginf(scores).all() and ids.shape == (3, 2)


class TwoShards:
    n_shards = 2

    def __init__(self, X: np.ndarray, m: ShardMap) -> None:
        self.local = [X[m.rows_of[s]] for s in range(2)]
        self.calls = 0

    def map(self, method, calls):
        self.calls += 1
        assert method == "rows"
        return {s: self.local[s][args[0]] for s, args in calls.items()}


def test_sharded_rows_read_each_row_from_its_owner_in_one_call_per_batch():
    X = np.arange(20, dtype=np.float32).reshape(5, 4)
    m = ShardMap(np.array([1, 0, 1, 1, 0]), np.array([0, 0, 1, 2, 1]), 2)
    calls = TwoShards(X, m)
    rows = ShardedRows(ShardSet(calls, m), 4)
    np.testing.assert_array_equal(rows[[4, 0, 4]], X[[4, 0, 4]])
    np.testing.assert_array_equal(rows.take(np.array([[1, 2], [3, 3]])), X[[[1, 2], [3, 3]]])
    np.testing.assert_array_equal(rows[2], X[2])  # read before: from the router's cache
    assert calls.calls == 2 and rows.shape == (5, 4)
    np.testing.assert_array_equal(rows[[0, 4, 2]], X[[0, 4, 2]])
    assert calls.calls == 2
    small = ShardedRows(ShardSet(calls, m), 4, cache_rows=2)
    np.testing.assert_array_equal(small[[0, 1, 3]], X[[0, 1, 3]])  # more than the cache holds: not kept
    np.testing.assert_array_equal(small[[0, 1]], X[[0, 1]])
    np.testing.assert_array_equal(small[[1, 0]], X[[1, 0]])
    assert calls.calls == 4
    with pytest.raises(IndexError):
        rows[[5]]
    with pytest.raises(InputError, match="never gathers"):
        np.asarray(rows)
