"""G3RAG's masked scoring (SPEC §1 query steps 1-4): the batched result lists — ids, each entry's own
score and its tier — against the SPEC read one question at a time (:mod:`g3rag_spec`), and the
list assembly on adversarial parts (repeated passages, padding, more seeds than places)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings
from g3rag_spec import DIFFUSED, FILL, SEED, masked_query

from hopgraph import G3RAG
from hopgraph.engine.pipelines.g3rag import masked
from hopgraph.engine.timing import StageTimer

TIERS = {SEED: masked.SEED, DIFFUSED: masked.DIFFUSED, FILL: masked.FILL}


@pytest.fixture(scope="module")
def fitted():
    X = clustered_embeddings(160, 16, 5, seed=7, noise=0.3)
    g = np.random.default_rng(8)
    Q = X[g.choice(len(X), 12, replace=False)] + 0.1 * g.standard_normal((12, 16)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    return G3RAG(n_neighbors=6, settings={"device": "cpu"}).fit(X), Q


@pytest.mark.parametrize("n_seeds,top_k", [(3, 5), (1, 8), (6, 4), (3, 40)])
def test_masked_scoring_follows_the_spec(fitted, n_seeds, top_k):
    pipe, Q = fitted
    params = pipe.search_params(scoring="mask", seed_source="dense", n_seeds=n_seeds, bridge=0.0)
    got = pipe._search_masked(pipe.components.batch(Q, None, None), top_k, params, StageTimer({}))
    W = pipe.graph_.to_dense().astype(np.float64)
    for b, q in enumerate(Q):
        want = masked_query(np.asarray(pipe.X), W, q, n_seeds, top_k)
        m = len(want)
        np.testing.assert_array_equal(got.ids[b, :m], [j for j, _, _ in want])
        np.testing.assert_allclose(got.scores[b, :m], [s for _, s, _ in want], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got.tiers[b, :m], [TIERS[t] for _, _, t in want])
        assert (got.ids[b, m:] == -1).all() and (got.tiers[b, m:] == masked.PAD_TIER).all()
    assert (got.tiers[:, :min(n_seeds, top_k)] == masked.SEED).all()
    if top_k > n_seeds:  # the data reaches each part of the list
        assert (got.tiers == masked.DIFFUSED).any()
    if top_k == 40:
        assert (got.tiers == masked.FILL).any()
    # the search's one score per entry orders by tier, then score; its ids are the lists'
    ids, scores = pipe.search(Q, top_k, scoring="mask", seed_source="dense", n_seeds=n_seeds, bridge=0.0)
    np.testing.assert_array_equal(ids, got.ids[:, :ids.shape[1]])
    np.testing.assert_array_equal(scores, got.ordering_scores()[:, :ids.shape[1]])
    assert np.all(np.diff(np.where(ids >= 0, scores, -10.0), axis=1) <= 0)


def test_tiered_ranking_keeps_each_passage_at_its_first_place():
    seeds = np.array([[5, 3], [-1, -1], [7, 2]])
    diffused = np.array([[3, 9, -1], [4, 5, 6], [2, 8, 1]])  # 3 and 2 repeat a seed: never listed twice
    fill = np.array([[9, 1, 0, 5], [4, 8, 8, 1], [7, 0, 6, 3]])
    parts = [(seeds, np.full(seeds.shape, 0.9, np.float32), masked.SEED),
             (diffused, np.full(diffused.shape, 0.5, np.float32), masked.DIFFUSED),
             (fill, np.full(fill.shape, 0.1, np.float32), masked.FILL)]
    got = masked.tiered_ranking(parts, 5)
    np.testing.assert_array_equal(got.ids, [[5, 3, 9, 1, 0], [4, 5, 6, 8, 1], [7, 2, 8, 1, 0]])
    S, D, F = masked.SEED, masked.DIFFUSED, masked.FILL
    np.testing.assert_array_equal(got.tiers, [[S, S, D, F, F], [D, D, D, F, F], [S, S, D, D, F]])
    short = masked.tiered_ranking(parts, 1)  # more seeds than places: the first seed only
    np.testing.assert_array_equal(short.ids, [[5], [4], [7]])
    few = masked.tiered_ranking([(np.array([[1, -1]]), np.array([[0.3, -np.inf]], np.float32), masked.SEED)], 4)
    np.testing.assert_array_equal(few.ids, [[1, -1, -1, -1]])
    np.testing.assert_array_equal(few.tiers, [[masked.SEED] + [masked.PAD_TIER] * 3])
    assert np.isneginf(few.ordering_scores()[0, 1:]).all()
    empty = masked.tiered_ranking([(np.zeros((0, 2), np.int64), np.zeros((0, 2), np.float32), masked.SEED)], 3)
    assert empty.ids.shape == (0, 3)


def test_ordering_scores_are_tier_then_score():
    r = masked.TieredRanking(np.array([[4, 2, 9, -1]]), np.array([[-0.2, 1.0, 0.99, -np.inf]], np.float32),
                             np.array([[masked.SEED, masked.DIFFUSED, masked.FILL, masked.PAD_TIER]], np.int8))
    np.testing.assert_array_equal(r.ordering_scores(), np.array([[3.8, 3.0, 0.99, -np.inf]], np.float32))
