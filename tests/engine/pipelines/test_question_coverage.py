"""Question coverage (:mod:`hopgraph.engine.pipelines.question_coverage`): the greedy reranking step,
and ``hop`` (DMAR + title bridge + coverage, ablation ``no_coverage``)."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.demo import DEMO_QUESTIONS
from hopgraph.engine.components.bm25 import BM25Index, BM25Params
from hopgraph.engine.params import InvalidParameter
from hopgraph.engine.pipelines.hop import Hop
from hopgraph.engine.components.title_mentions import TitleMentions
from hopgraph.engine.pipelines.question_coverage import Cover, coverage_rerank
from hopgraph.engine.pipelines.title_bridge import bridge_rerank

QUESTIONS = list(DEMO_QUESTIONS)
TEXTS = ["alpha beta gamma", "alpha beta", "alpha beta gamma delta", "zeta", "delta epsilon", "omega"]


@pytest.fixture(scope="module")
def bm25():
    return BM25Index.build(TEXTS, BM25Params())


#: passages 1 and 2 name passage 5
MENTIONS = TitleMentions.from_indices(np.array([0, 0, 1, 2, 2, 2, 2]), np.array([5, 5]))


def cover(bm25, weight=1.0, link=0.0, pairs=0, depth=30):
    return Cover(bm25, MENTIONS, weight, link, pairs, depth)


def test_the_second_pick_adds_what_the_first_lacks(bm25):
    ids = np.array([[2, 0, 1, 4, 3]])
    scores = np.array([[1.0, 0.95, 0.9, 0.6, 0.0]], np.float32)
    tokens = [["alpha", "beta", "gamma", "epsilon"]]
    # off: the list's order
    got, s = coverage_rerank(cover(bm25, weight=0.0), tokens, ids, scores, 5)
    assert got.tolist() == [[2, 0, 1, 4, 3]]
    np.testing.assert_allclose(s[0], [1.0, 0.95, 0.9, 0.6, 0.0], rtol=1e-6)
    # on: 2 covers alpha, beta, gamma; 4 alone adds epsilon, which lifts it over 0 and 1
    got, s = coverage_rerank(cover(bm25), tokens, ids, scores, 5)
    assert got.tolist()[0][:2] == [2, 4]
    assert sorted(got[0].tolist()) == [0, 1, 2, 3, 4]
    assert (np.diff(s[0]) <= 0).all()  # non-increasing scores
    # depth 1: only the first is picked, the rest keeps the list order
    got, _ = coverage_rerank(cover(bm25, depth=1), tokens, ids, scores, 5)
    assert got.tolist() == [[2, 0, 1, 4, 3]]
    # k cuts; k beyond the list pads
    assert coverage_rerank(cover(bm25), tokens, ids, scores, 2)[0].tolist() == [[2, 4]]
    got, s = coverage_rerank(cover(bm25), tokens, ids, scores, 7)
    assert got[0, 5:].tolist() == [-1, -1] and np.isneginf(s[0, 5:]).all()
    # the pair search finds the same pair here
    assert coverage_rerank(cover(bm25, pairs=5), tokens, ids, scores, 2)[0].tolist() == [[2, 4]]


def test_a_picked_passage_lifts_the_passages_it_names(bm25):
    ids = np.array([[2, 0, 1, 5, 3]])
    scores = np.array([[1.0, 0.95, 0.9, 0.85, 0.0]], np.float32)
    tokens = [["alpha", "beta"]]
    got, _ = coverage_rerank(cover(bm25, weight=0.0, link=0.2), tokens, ids, scores, 5)
    assert got.tolist() == [[2, 5, 0, 1, 3]]  # 2 names 5: 0.85 + 0.2 > 0.95
    got, _ = coverage_rerank(cover(bm25, weight=0.0, link=0.02), tokens, ids, scores, 5)
    assert got.tolist() == [[2, 0, 1, 5, 3]]


def test_the_best_pair_need_not_hold_the_best_passage(bm25):
    """Greedy from the best passage gives [0, 1, ...]; the pair (1, 5), 1 naming 5, is worth more."""
    ids = np.array([[0, 1, 5, 3]])
    scores = np.array([[1.0, 0.9, 0.5, 0.0]], np.float32)
    greedy, _ = coverage_rerank(cover(bm25, weight=0.0, link=0.6), [[]], ids, scores, 4)
    assert greedy.tolist() == [[0, 1, 5, 3]]  # 5 is named by 1 only, picked after it
    paired, s = coverage_rerank(cover(bm25, weight=0.0, link=0.6, pairs=3), [[]], ids, scores, 4)
    assert paired.tolist() == [[1, 5, 0, 3]]  # 0.9 + 0.5 + 0.6 = 2.0 > 1.0 + 0.9
    assert (np.diff(s[0]) <= 0).all()
    # a pair search over 1 candidate is no pair search
    assert coverage_rerank(cover(bm25, weight=0.0, link=0.6, pairs=1), [[]], ids, scores, 4)[0].tolist() == greedy.tolist()


def test_padding_empty_questions_and_flat_scores(bm25):
    ids = np.array([[1, 0, -1, -1], [-1, -1, -1, -1], [3, 4, 4, -1]])
    ids[2] = [3, 5, 4, -1]
    scores = np.array([[2.0, 2.0, -np.inf, -np.inf], [-np.inf] * 4, [0.5, -np.inf, 0.1, -np.inf]], np.float32)
    got, s = coverage_rerank(cover(bm25), [["gamma"], ["alpha"], []], ids, scores, 3)
    assert got[0].tolist() == [0, 1, -1]  # flat scores: gamma is only in 0
    assert got[1].tolist() == [-1, -1, -1] and np.isneginf(s[1]).all()
    assert got[2].tolist() == [3, 5, 4]  # no term: -inf counts as the lowest (0.1), ties toward the earlier
    assert np.isfinite(s[2]).all()
    # a question term no passage of the list holds weighs nothing
    got, _ = coverage_rerank(cover(bm25), [["nowhere"]], ids[:1], scores[:1], 2)
    assert got.tolist() == [[1, 0]]


def test_a_picked_passage_lifts_the_passages_that_share_a_rare_name_with_it(bm25, name_extraction):
    """Passages 0 and 4 hold 'Zed Corp' (two passages of six); 'Common Name' is in every passage."""
    ids = np.array([[0, 1, 2, 4, 3]])
    scores = np.array([[1.0, 0.95, 0.9, 0.85, 0.0]], np.float32)
    off, _ = coverage_rerank(cover(bm25, weight=0.0), [[]], ids, scores, 5, ["what is it?"])
    assert off.tolist() == ids.tolist()
    step = Cover(bm25, MENTIONS, 0.0, 0.0, 0, 30, 0.2, name_extraction)
    got, s = coverage_rerank(step, [[]], ids, scores, 5, ["what is it?"])
    assert got.tolist() == [[0, 4, 1, 2, 3]]  # 0.85 + 0.2 · ln 3 / ln 6 > 0.95
    assert (np.diff(s[0]) <= 0).all()
    # the question holds the name: no link
    assert coverage_rerank(step, [[]], ids, scores, 5, ["what is Zed Corp?"])[0].tolist() == ids.tolist()
    # in the pair search too: (1, 4) do not share it, (0, 4) do
    paired = Cover(bm25, MENTIONS, 0.0, 0.0, 5, 30, 0.2, name_extraction)
    assert coverage_rerank(paired, [[]], ids, scores, 2, ["what is it?"])[0].tolist() == [[0, 4]]
    with pytest.raises(ValueError, match="question texts"):
        coverage_rerank(step, [[]], ids, scores, 5)


@pytest.fixture(scope="module")
def name_extraction():
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.components.extraction import extract

    texts = ["Zed Corp made it. Common Name was there.", "Common Name met Ann Lee.", "Common Name sang.",
             "Common Name slept.", "Zed Corp was founded in Oslo. Common Name ran it.", "Common Name left."]
    return extract(Corpus.from_records([{"id": str(i), "text": t} for i, t in enumerate(texts)]))


@pytest.fixture(scope="module")
def hop(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    return Hop(gnn_steps=5).fit(X, demo_corpus, hashing_embedder), hashing_embedder.encode(QUESTIONS)


def test_hop_is_dmar_then_bridge_then_coverage(hop):
    """Default = DMAR's ranking ``coverage_depth`` deep, re-ranked by the bridge over the whole list,
    then by coverage; ``no_coverage`` switches the last step off."""
    pipe, Q = hop
    p = pipe.search_defaults
    assert type(pipe).ablations["no_coverage"] == {"coverage": 0.0, "coverage_link": 0.0, "coverage_names": 0.0}
    assert type(pipe).SearchParams.published().coverage == 0.0
    bare = pipe.with_search_defaults(bridge=0.0, coverage=0.0, coverage_link=0.0, coverage_names=0.0)
    lst = bare.search(Q, p.coverage_depth, query_texts=QUESTIONS)
    bridged = bridge_rerank(pipe.components.title_mentions(), *lst, p.coverage_depth, p.bridge, p.bridge_seeds)
    bm25 = pipe.components.bm25()
    step = Cover(bm25, pipe.components.title_mentions(), p.coverage, p.coverage_link, p.coverage_pairs,
                 p.coverage_depth, p.coverage_names, pipe.components.extraction())
    want = coverage_rerank(step, bm25.tokenize(QUESTIONS), *bridged, 5, QUESTIONS)
    ids, scores = pipe.search(Q, 5, query_texts=QUESTIONS)
    np.testing.assert_array_equal(ids, want[0])
    np.testing.assert_allclose(scores, want[1], rtol=1e-6)
    assert "coverage" in pipe.timings and "title_bridge" in pipe.timings
    off = pipe.with_search_defaults(coverage=0.0, coverage_link=0.0, coverage_names=0.0).search(
        Q, 5, query_texts=QUESTIONS)[0]
    assert (ids != off).any()


def test_hop_respects_filters_and_batches(hop):
    pipe, Q = hop
    allowed = np.arange(len(pipe.X)) % 3 != 1
    ids, _ = pipe.search(Q, 5, query_texts=QUESTIONS, allowed=allowed)
    assert (ids >= 0).all() and allowed[ids].all()
    alone = np.concatenate([pipe.search(Q[i:i + 1], 5, query_texts=QUESTIONS[i:i + 1])[0] for i in range(len(Q))])
    np.testing.assert_array_equal(alone, pipe.search(Q, 5, query_texts=QUESTIONS)[0])


def test_coverage_parameters_are_checked():
    for bad in ({"coverage": -0.1}, {"coverage_link": -1.0}, {"coverage_names": -0.5}, {"coverage_pairs": -1},
                {"coverage_depth": 0}):
        with pytest.raises(InvalidParameter, match=next(iter(bad))):
            Hop(**bad)
