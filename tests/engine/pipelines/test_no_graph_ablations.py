"""Every graph pipeline's ``no_graph`` ablation is the pipeline without its graph:
G3RAG without the gain graph and the name links (g3rag/test_name_links.py), STITCH ranked by its
relevance alone (no influence prior, no PPR), DMAR without the knowledge-graph path; each also
without the title bridge (test_title_bridge.py)."""
from __future__ import annotations

import numpy as np

from hopgraph.demo import DEMO_QUESTIONS
from hopgraph.engine.pipelines.dmar.pipeline import DMAR
from hopgraph.engine.pipelines.g3rag.pipeline import G3RAG
from hopgraph.engine.pipelines.stitch import STITCH
from hopgraph.engine.pipelines.stitch.walk import normalise_max

QUESTIONS = list(DEMO_QUESTIONS[:4])  # they name entities of the demo corpus (DMAR links them)


def test_every_graph_pipeline_has_a_no_graph_ablation():
    assert G3RAG.ablations["no_graph"] == {"gamma": 0.0, "name_links": 0.0, "bridge": 0.0}
    assert STITCH.ablations["no_graph"] == {"balance": 1.0, "bridge": 0.0}
    assert DMAR.ablations["no_graph"] == {"structural": False, "bridge": 0.0}


def test_stitch_no_graph_ranks_by_relevance_alone(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    Q = hashing_embedder.encode(QUESTIONS)
    pipe = STITCH(settings={"device": "cpu"}).fit(X, demo_corpus, hashing_embedder)
    v = pipe.with_search_defaults(**STITCH.ablations["no_graph"])
    batch = v.components.batch(Q, QUESTIONS)
    want = normalise_max(v.relevance_rows(batch).dense())
    np.testing.assert_allclose(v.scores(Q, QUESTIONS), want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(pipe.scores(Q, QUESTIONS), want)  # the graph changes the default's scores


def test_dmar_no_graph_drops_the_structural_path(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    Q = hashing_embedder.encode(QUESTIONS)
    pipe = DMAR(gnn_steps=5).fit(X, demo_corpus, hashing_embedder)
    got = pipe.with_search_defaults(**DMAR.ablations["no_graph"]).search(Q, 5, query_texts=QUESTIONS)
    want = pipe.with_search_defaults(structural=False, bridge=0.0).search(Q, 5, query_texts=QUESTIONS)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])
    default = pipe.search(Q, 5, query_texts=QUESTIONS)
    assert not np.allclose(default[1], got[1])  # the knowledge-graph path changes the default's scores
