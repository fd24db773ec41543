"""Helpers of the sharded-index tests: the demo corpus with metadata, questions, result equality."""
from __future__ import annotations

import json

import numpy as np

ALL = ["dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar", "hop"]
PARAMS = {"dmar": {"gnn_steps": 2}, "hop": {"gnn_steps": 2}}
QUESTIONS = ["Who discovered the comet Venn-Harlow?", "Which university operates the observatory in the Atacama?",
             "Who is the rector of the university founded in 1981?", "river city bridge"]


def demo_records() -> list[dict]:
    from hopgraph.demo import demo_corpus

    corpus = demo_corpus()
    return [{"id": corpus.ids[i], "title": corpus.titles[i], "text": corpus.texts[i],
             "metadata": {"group": i % 3, "even": i % 2 == 0}} for i in range(len(corpus))]


def same_results(a, b, pipeline: str, questions=QUESTIONS, k: int = 8, **kw) -> None:
    """``a`` and ``b`` (indexes) give the same ids, and scores within 1e-6, for ``pipeline``."""
    a_ids, a_scores = a.search_arrays(questions, pipeline, k=k, **kw)
    b_ids, b_scores = b.search_arrays(questions, pipeline, k=k, **kw)
    np.testing.assert_array_equal(a_ids, b_ids, err_msg=pipeline)
    finite = np.isfinite(a_scores)
    np.testing.assert_array_equal(finite, np.isfinite(b_scores))
    np.testing.assert_allclose(a_scores[finite], b_scores[finite], rtol=0, atol=1e-6, err_msg=pipeline)


def ids_of(index) -> list[str]:
    return [json.dumps(x) for x in index.corpus.ids]
