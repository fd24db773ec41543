"""BM25Index.topk (posting-list top-k) against the dense reference: bm25s's own score row
for every passage, ranked by ``topk_rows`` (ties toward the lower id, zero scores as padding)."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.engine.components.bm25 import BM25Index, BM25Params
from hopgraph.engine.ranking import topk_rows

WORDS = "bridge river city tower prize novel harbour poet mayor castle".split()


def random_corpus(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(1, 9))) for _ in range(n)]


def reference(index: BM25Index, tokens: list[list[str]], k: int, allowed: np.ndarray | None) -> tuple:
    rows = np.stack([index.scores(t) for t in tokens]).astype(np.float32)
    rows[rows <= 0] = -np.inf
    if allowed is not None:
        rows[:, ~allowed] = -np.inf
    return topk_rows(rows, k)


@pytest.fixture(scope="module")
def index() -> BM25Index:
    return BM25Index.build(random_corpus(300, 0), BM25Params())


QUERIES = [["bridge"], ["bridge", "river"], ["river", "river", "poet"], ["unknown"], [], ["the", "mayor"],
           ["castle", "harbour", "novel", "tower", "prize", "city", "bridge", "river", "poet", "mayor"]]


@pytest.mark.parametrize("k", [1, 5, 100, 1000])
def test_topk_equals_dense_reference(index, k):
    tokens = index.tokenize([" ".join(q) for q in QUERIES])
    ids, scores = index.topk(tokens, k)
    ref_ids, ref_scores = reference(index, tokens, k, None)
    np.testing.assert_array_equal(scores, ref_scores)  # bit for bit
    np.testing.assert_array_equal(ids, ref_ids)  # ties toward the lower id, padding -1


def test_topk_respects_allowed(index):
    allowed = np.random.default_rng(1).random(index.n_docs) < 0.3
    tokens = index.tokenize(["bridge river", "poet", "castle tower"])
    ids, scores = index.topk(tokens, 20, allowed)
    ref_ids, ref_scores = reference(index, tokens, 20, allowed)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(scores, ref_scores)
    assert allowed[ids[ids >= 0]].all()


def test_duplicate_query_tokens_count_twice(index):
    once, twice = index.tokenize(["river"])[0], ["river", "river"]
    d1, s1 = index.matching(once)
    d2, s2 = index.matching(twice)
    s1, s2 = s1[np.argsort(d1)], s2[np.argsort(d2)]
    d2 = np.sort(d2)
    np.testing.assert_array_equal(np.sort(d1), np.sort(d2))
    np.testing.assert_array_equal(s2, index.scores(twice)[d2])
    assert (s2 > s1).all()


def test_matching_is_the_score_row_at_its_passages(index):
    tokens = index.tokenize(["bridge mayor city"])[0]
    docs, scores = index.matching(tokens)
    row = index.scores(tokens)
    np.testing.assert_array_equal(scores, row[docs])
    assert (row[np.setdiff1d(np.arange(index.n_docs), docs)] == 0).all()
    assert len(np.unique(docs)) == len(docs)
    scratch = index.scratch()  # reused across queries, left zeroed
    for q in index.tokenize(["bridge river", "poet poet", "castle"]):
        d, v = index.matching(q, scratch)
        np.testing.assert_array_equal(v, index.scores(q)[d])
        assert not scratch[0].any()


def test_empty_batch_and_no_hits(index):
    ids, scores = index.topk([], 5)
    assert ids.shape == (0, 5) and scores.shape == (0, 5)
    ids, scores = index.topk([["nothing"]], 3)
    assert (ids == -1).all() and np.isneginf(scores).all()


def test_term_scores_are_each_tokens_score_at_the_passages():
    """``term_scores_at`` row t = ``scores_at([token t])`` bit for bit, over one part and over
    several (a grown index), with padding, unknown tokens and passages outside the postings."""
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words, int(rng.integers(1, 25)))) for _ in range(240)]
    grown = BM25Index.build(texts[:120], BM25Params()).extended(texts[120:], join_below=1)
    assert len(grown.parts) == 2
    docs = np.array([0, 5, 239, -1, 120, 119, 7, 200])
    tokens = ["w1", "w3", "unknown", "w39", "w1"]
    for idx in (BM25Index.build(texts, BM25Params()), grown):
        got = idx.term_scores_at(tokens, docs)
        assert got.shape == (len(tokens), len(docs)) and got.dtype == np.float32
        for t, token in enumerate(tokens):
            np.testing.assert_array_equal(got[t], idx.scores_at([token], docs))
        assert (got[:, 3] == 0).all() and (got[2] == 0).all()
    assert grown.term_scores_at([], docs).shape == (0, len(docs))
