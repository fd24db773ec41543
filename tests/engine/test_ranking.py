"""Ranking helpers: ``topk_rows`` order, ties toward the lower column and padding; reciprocal rank fusion;
the check of ``k``."""
import re

import numpy as np
import pytest

from hopgraph.engine.ranking import reciprocal_rank_fusion, topk_rows


def test_topk_rows_orders_breaks_ties_and_pads():
    s = np.array([[0.1, 0.5, -np.inf, 0.5], [1, 2, 3, 4]], np.float32)
    ids, sc = topk_rows(s, 3)
    assert ids.tolist() == [[1, 3, 0], [3, 2, 1]]
    ids, sc = topk_rows(s, 6)
    assert ids.tolist() == [[1, 3, 0, -1, -1, -1], [3, 2, 1, 0, -1, -1]]
    assert np.isneginf(sc[0, 3:]).all()
    assert topk_rows(np.zeros((0, 4), np.float32), 2)[0].shape == (0, 2)
    assert topk_rows(np.zeros((2, 0), np.float32), 2)[0].tolist() == [[-1, -1], [-1, -1]]


def test_topk_rows_matches_argsort(rng):
    s = rng.standard_normal((7, 50)).astype(np.float32)
    ids, sc = topk_rows(s, 10)
    assert (ids == np.argsort(-s, axis=1, kind="stable")[:, :10]).all()


def test_rrf():
    a = np.array([[0, 1, -1]])
    b = np.array([[1, 2, 0]])
    f = reciprocal_rank_fusion([a, b], 4, k=60)
    assert np.isclose(f[0, 1], 1 / 62 + 1 / 61) and np.isclose(f[0, 0], 1 / 61 + 1 / 63)
    assert np.isclose(f[0, 2], 1 / 62) and f[0, 3] == 0


def test_topk_rows_keeps_the_lowest_columns_of_a_tie_across_the_kth_place(rng):
    """argpartition alone keeps an arbitrary member of a tie that straddles the k-th place."""
    for _ in range(50):
        scores = rng.integers(0, 4, (6, 40)).astype(np.float32)  # many ties
        for k in (1, 3, 7, 39):
            ids, top = topk_rows(scores, k)
            order = np.lexsort((np.broadcast_to(np.arange(40), scores.shape), -scores), axis=1)[:, :k]
            np.testing.assert_array_equal(ids, order)
            np.testing.assert_array_equal(top, np.take_along_axis(scores, order, 1))


def test_check_k_is_the_one_check_of_a_number_of_results():
    from hopgraph.engine.errors import InputError
    from hopgraph.engine.ranking import check_k, is_k

    assert check_k(3) == 3 and check_k(np.int64(7)) == 7 and type(check_k(np.int32(2))) is int
    for bad in (0, -1, True, 2.0, "3", None):
        assert not is_k(bad)
        with pytest.raises(InputError, match=re.escape(f"search_kwargs['k'] must be a positive integer, got {bad!r}")):
            check_k(bad, "search_kwargs['k']")
