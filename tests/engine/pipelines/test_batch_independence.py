"""Batch independence, for every pipeline: a question's results are the same whether
it is searched alone, in any batch, at any position of a batch (duplicates included) — scores
within 1e-5, ids equal up to near-ties (:mod:`ranking_asserts`: BLAS and MKL's sparse products
block a batch differently from a single question, which moves scores in their last bits, so
entries whose scores tie may swap; nothing else may move).

Property tests (hypothesis) over random batches drawn from a question pool, on real indexes
built with the hashing embedder: the bundled demo corpus, and the shared HotpotQA corpus
when it is available (skipped otherwise). The pools hold edge questions: lowercase, linking
no entity (SPEC §3 adaptive fusion), vague, a bare number.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopgraph import Index
from hopgraph.demo import DEMO_QUESTIONS
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.pipelines import pipeline_names

from conftest import shared_dataset
from ranking_asserts import assert_same_up_to_ties

PIPELINES = pipeline_names()
EDGE_QUESTIONS = ["who designed the bridge in the home city of peter harlow?", "what is it?", "1999",
                  "Which of the two tornado outbreaks killed the most people?"]
MAX_BATCH = 8
SCORE_ATOL = 1e-5


@dataclass
class Pool:
    """An index, its question pool and each question's results searched alone (computed once)."""

    index: Index
    questions: list[str]
    alone: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def single(self, pipeline: str, i: int) -> tuple[np.ndarray, np.ndarray]:
        key = (pipeline, i)
        if key not in self.alone:
            ids, scores = self.index.search_arrays([self.questions[i]], pipeline)
            self.alone[key] = ids[0], scores[0]
        return self.alone[key]


def _demo_pool(demo_corpus, hashing_embedder) -> Pool:
    index = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=PIPELINES, progress=False)
    return Pool(index, DEMO_QUESTIONS + EDGE_QUESTIONS)


def _hotpotqa_pool(hashing_embedder) -> Pool:
    path = shared_dataset("hotpotqa")
    corpus = Corpus.from_jsonl(path / "corpus.jsonl")
    with open(path / "questions.jsonl", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f][:12]
    index = Index.build(corpus, embedder=hashing_embedder, pipelines=PIPELINES, progress=False)
    return Pool(index, list(dict.fromkeys(questions + EDGE_QUESTIONS)))


@pytest.fixture(scope="module", params=["demo", pytest.param("hotpotqa", marks=pytest.mark.slow)])
def pool(request, demo_corpus, hashing_embedder) -> Pool:
    if request.param == "demo":
        return _demo_pool(demo_corpus, hashing_embedder)
    return _hotpotqa_pool(hashing_embedder)


def assert_same_as_alone(pool: Pool, pipeline: str, rows: list[int]) -> None:
    ids, scores = pool.index.search_arrays([pool.questions[i] for i in rows], pipeline)
    assert ids.shape == scores.shape == (len(rows), 5)
    for pos, i in enumerate(rows):
        one_ids, one_scores = pool.single(pipeline, i)
        where = f"{pipeline}: question {pool.questions[i]!r} at position {pos} of batch {rows}"
        assert_same_up_to_ties(ids[pos], scores[pos], one_ids, one_scores, SCORE_ATOL, where)


@pytest.mark.parametrize("pipeline", PIPELINES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_results_do_not_depend_on_the_batch(pool: Pool, pipeline: str, data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.integers(0, len(pool.questions) - 1), min_size=1, max_size=MAX_BATCH),
                     label="batch")
    assert_same_as_alone(pool, pipeline, rows)


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_whole_pool_and_reversed(pool: Pool, pipeline: str) -> None:
    """The whole pool in one batch (larger than any drawn batch), forwards and reversed, and
    every edge question repeated."""
    n = len(pool.questions)
    assert_same_as_alone(pool, pipeline, list(range(n)))
    assert_same_as_alone(pool, pipeline, list(range(n))[::-1])
    edges = [pool.questions.index(q) for q in EDGE_QUESTIONS]
    assert_same_as_alone(pool, pipeline, edges + edges[::-1])


@pytest.fixture(scope="module")
def minilm_index(demo_corpus, minilm) -> Index:
    return Index.build(demo_corpus, embedder=minilm, pipelines=["g3rag", "dmar"], progress=False)


@pytest.mark.parametrize("pipeline", ["g3rag", "dmar"])
def test_minilm_query_embedding_does_not_move_scores_with_the_batch(minilm_index, pipeline):
    """With the default embedder the query embedding itself is row-independent, so scores that
    min-max normalisation would magnify still match to 1e-7: a one-word question alone, in a
    batch of long questions, and in another batch."""
    short = ["Paris", "x"]
    long = list(DEMO_QUESTIONS) + ["which city hosted the 1936 Summer Olympics, and who won most gold medals?"]
    alone = {q: minilm_index.search_arrays([q], pipeline) for q in short}
    for batch in (short + long, long + short[::-1], [short[0]] * 3 + long[:1]):
        ids, scores = minilm_index.search_arrays(batch, pipeline)
        for pos, q in enumerate(batch):
            if q in alone:
                np.testing.assert_array_equal(ids[pos], alone[q][0][0])
                np.testing.assert_allclose(scores[pos], alone[q][1][0], rtol=0, atol=1e-7)
