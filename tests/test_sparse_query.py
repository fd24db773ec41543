"""The sparse query paths of hybrid, DMAR and STITCH (issue 14) against the dense computations
they replaced (kept here only as references): hybrid's RRF over the two top lists instead of a
``[B, N]`` fusion array, DMAR's lexical term read at the candidates instead of a BM25 row per
question. Same ids and bit-equal scores, on generated data and the demo corpus."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.engine.ranking import reciprocal_rank_fusion, rrf_topk, topk_rows


def _random_rankings(rng: np.random.Generator, B: int, m: int, n: int, n_lists: int) -> list[np.ndarray]:
    out = []
    for _ in range(n_lists):
        r = np.stack([rng.choice(n, size=m, replace=False) for _ in range(B)]).astype(np.int64)
        r[rng.random(r.shape) < 0.2] = -1  # padding anywhere (bm25 pads its tail; check the general case)
        out.append(r)
    return out


@pytest.mark.parametrize("n,m,top_k", [(30, 10, 5), (12, 12, 20), (500, 40, 8)])
def test_rrf_topk_equals_dense_fusion(rng, n, m, top_k):
    for n_lists in (1, 2, 3):
        rankings = _random_rankings(rng, 7, m, n, n_lists)
        dense = reciprocal_rank_fusion(rankings, n, k=60)
        dense[dense == 0] = -np.inf
        ref_ids, ref_scores = topk_rows(dense, top_k)
        ids, scores = rrf_topk(rankings, top_k, k=60)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(scores, ref_scores)


def test_rrf_topk_all_padding():
    ids, scores = rrf_topk([np.full((3, 4), -1, np.int64)], 2)
    assert (ids == -1).all() and np.isneginf(scores).all()


@pytest.fixture(scope="module")
def demo_index(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["hybrid", "dmar", "stitch", "ppr_binary"],
                       progress=False)


def _questions():
    from hopgraph.demo import DEMO_QUESTIONS

    return DEMO_QUESTIONS + ["what is it?", "1999", "who designed the bridge in the home city of peter harlow?"]


def test_hybrid_equals_dense_reference(demo_index):
    comp = demo_index.components
    qs = _questions()
    Q = demo_index.embed_queries(qs)
    pipe = demo_index.pipeline("hybrid")
    n = len(comp.X)
    for allowed in (None, np.arange(n) % 3 != 0):
        for top_k in (1, 5, n + 3):
            batch = comp.batch(Q, qs, allowed)
            d_ids, _ = batch.dense_topk(max(pipe.depth, top_k))
            b_ids, _ = batch.bm25_topk(max(pipe.depth, top_k))
            fused = reciprocal_rank_fusion([d_ids, b_ids], n, k=pipe.rrf_k)
            fused[fused == 0] = -np.inf
            ref_ids, ref_scores = topk_rows(fused, top_k)
            ids, scores = pipe.search(Q, top_k, qs, allowed)
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_array_equal(scores, ref_scores)


def test_bm25_at_candidates_equals_full_rows(demo_index, rng):
    comp = demo_index.components
    bm25 = comp.bm25()
    qs = _questions() + ["the the bridge bridge", "zzzz unknownword"]
    tokens = bm25.tokenize(qs)
    n = len(comp.X)
    for toks in tokens:
        cand = rng.integers(-1, n, size=(3, 17))
        ref = np.where(cand >= 0, bm25.scores(toks)[np.maximum(cand, 0)], 0.0).astype(np.float32)
        np.testing.assert_array_equal(bm25.scores_at(toks, cand), ref)
