"""The ranking helpers on tensors (:mod:`hopgraph.engine.ranking_tensors`) against their host twins
(:mod:`hopgraph.engine.ranking`): the same ids and the same float32 scores bit for bit, on random
lists with ids in several lists, padding anywhere, ties, ``k`` beyond the items, empty batches."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph.engine.ranking import fill_lowest, rrf_topk, topk_entries
from hopgraph.engine.ranking_tensors import fill_lowest_tensors, rrf_topk_tensors, topk_columns


def random_rankings(rng, B: int, m: int, n: int, n_lists: int) -> list[np.ndarray]:
    """``n_lists`` rankings [B, m] over ``n`` ids (an id at most once per row of one list, often in
    several lists), padded anywhere."""
    out = []
    for _ in range(n_lists):
        r = np.stack([rng.choice(n, size=m, replace=False) for _ in range(B)]).astype(np.int64)
        r[rng.random(r.shape) < 0.2] = -1
        out.append(r)
    return out


@pytest.mark.parametrize("n,m,top_k", [(30, 10, 5), (12, 12, 20), (500, 40, 8), (8, 8, 3)])
def test_rrf_topk_tensors_equal_the_host(rng, n, m, top_k):
    for n_lists in (1, 2, 3):
        for _ in range(3):
            rankings = random_rankings(rng, 7, m, n, n_lists)
            want_ids, want_scores = rrf_topk(rankings, top_k, k=60)
            ids, scores = rrf_topk_tensors([torch.from_numpy(r) for r in rankings], top_k, k=60)
            np.testing.assert_array_equal(ids.numpy(), want_ids)
            np.testing.assert_array_equal(scores.numpy(), want_scores)  # the same float32 sums


def test_rrf_topk_tensors_ties_padding_and_empty():
    a = np.array([[0, 1, -1], [5, -1, -1], [-1, -1, -1]])
    b = np.array([[1, 0, 2], [-1, -1, -1], [-1, -1, -1]])  # 0 and 1 tie: the lower id first
    for rankings, top_k in (([a, b], 4), ([a], 2), ([b, a], 6), ([np.zeros((2, 0), np.int64)], 3)):
        want = rrf_topk(rankings, top_k, k=7)
        got = rrf_topk_tensors([torch.from_numpy(r) for r in rankings], top_k, k=7)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])
    assert rrf_topk_tensors([], 3)[0].shape == (0, 3)


def test_rrf_topk_tensors_rows_do_not_depend_on_their_batch(rng):
    rankings = random_rankings(rng, 6, 20, 40, 2)
    ids, scores = rrf_topk_tensors([torch.from_numpy(r) for r in rankings], 10)
    for b in range(6):
        one = rrf_topk_tensors([torch.from_numpy(r[b:b + 1]) for r in rankings], 10)
        np.testing.assert_array_equal(one[0].numpy()[0], ids.numpy()[b])
        np.testing.assert_array_equal(one[1].numpy()[0], scores.numpy()[b])


@pytest.mark.parametrize("M,k", [(9, 4), (5, 8), (0, 3)])
def test_topk_columns_equal_topk_entries(rng, M, k):
    B = 6
    cols = np.sort(rng.choice(50, M, replace=False)).astype(np.int64)
    scores = rng.integers(-2, 3, (B, M)).astype(np.float32) / 2  # ties
    scores[rng.random((B, M)) < 0.2] = -np.inf
    scores[rng.random((B, M)) < 0.1] = np.nan
    if M:
        scores[1] = -np.inf  # a row with no result
    q, j = np.nonzero(np.ones((B, M), bool))
    want = topk_entries(q, cols[j], scores[q, j], B, k)
    got = topk_columns(torch.from_numpy(scores), torch.from_numpy(cols), k)
    np.testing.assert_array_equal(got[0].numpy(), want[0])
    np.testing.assert_array_equal(got[1].numpy(), want[1])


@pytest.mark.parametrize("with_filter", [False, True])
def test_fill_lowest_tensors_equal_the_host(rng, with_filter):
    n, k = 15, 5
    allowed = rng.random(n) < 0.5 if with_filter else None
    for _ in range(5):
        ids = np.full((4, k), -1, np.int64)
        scores = np.full((4, k), -np.inf, np.float32)
        for b, have in enumerate((0, 2, k, 4)):
            ids[b, :have] = rng.choice(n, have, replace=False)
            scores[b, :have] = np.sort(rng.random(have))[::-1]
        want = fill_lowest(ids.copy(), scores.copy(), allowed, n)
        got = fill_lowest_tensors(torch.from_numpy(ids), torch.from_numpy(scores),
                                  None if allowed is None else torch.from_numpy(allowed), n)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])
    none = fill_lowest_tensors(torch.full((2, 3), -1), torch.full((2, 3), -np.inf), torch.zeros(4, dtype=torch.bool), 4)
    assert (none[0] == -1).all()
