"""The title bridge (:mod:`hopgraph.engine.components.title_mentions`): the title mention graph, the
re-ranking, and its use as the last step of G3RAG, STITCH and DMAR (ablation ``no_bridge``)."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.demo import DEMO_QUESTIONS
from hopgraph.engine.params import InvalidParameter
from hopgraph.engine.pipelines.dmar.pipeline import DMAR
from hopgraph.engine.pipelines.g3rag.pipeline import G3RAG
from hopgraph.engine.pipelines.stitch import PPRBinary, STITCH
from hopgraph.engine.components.title_mentions import TitleMentions
from hopgraph.engine.pipelines.title_bridge import bridge_rerank

QUESTIONS = list(DEMO_QUESTIONS)


def test_mention_graph_matches_titles_and_their_base_form():
    titles = ["Paris", "Bethel University (Minnesota)", "Eiffel Tower", "Alps"]
    texts = ["Paris holds the Eiffel Tower.",  # mentions 2, not itself
             "Bethel University is in St. Paul; students visit PARIS.",  # case-folded match of 0
             "A tower in Paris, France.",  # 0 only: "Eiffel Tower" is not all there
             "No mention of a title here; bethel universityx is not one."]
    M = TitleMentions.build(titles, texts)
    assert [M.row(s).tolist() for s in range(4)] == [[2], [0], [0], []]
    texts[3] = "Graduates of Bethel University (Minnesota) climb the Alps."
    M = TitleMentions.build(titles, texts)
    assert M.row(3).tolist() == [1]  # the full title, parenthesis included, and never itself


def test_rerank_lifts_and_adds_the_passages_the_best_passage_mentions():
    M = TitleMentions.from_indices(np.array([0, 2, 2, 2, 2, 2, 2]), np.array([4, 5]))  # passage 0 mentions 4 and 5
    ids = np.array([[0, 1, 2, 3, 4]])
    scores = np.array([[1.0, 0.9, 0.8, 0.7, 0.0]], np.float32)
    got, s = bridge_rerank(M, ids, scores, 3, weight=0.4, seeds=1)
    # normalised: 1, .9, .8, .7, 0; +0.4 for 4 (0.4) and for 5 (0 + 0.4, not in the list)
    assert got.tolist() == [[0, 1, 2]]
    got, s = bridge_rerank(M, ids, scores, 6, weight=0.4, seeds=1)
    assert got.tolist() == [[0, 1, 2, 3, 4, 5]]
    np.testing.assert_allclose(s[0], [1.4 - 0.4, 0.9, 0.8, 0.7, 0.4, 0.4], rtol=1e-6)
    got, _ = bridge_rerank(M, ids, scores, 3, weight=1.0, seeds=1)
    assert got.tolist() == [[0, 4, 5]]  # weight 1: both tie with the best (1.0; ties toward the lower id)
    allowed = np.ones(6, bool)
    allowed[5] = False
    got, _ = bridge_rerank(M, ids, scores, 3, weight=1.0, seeds=1, allowed=allowed)
    assert got.tolist() == [[0, 4, 1]]  # a filtered passage never enters
    got, _ = bridge_rerank(M, np.array([[-1, -1]]), np.array([[-np.inf, -np.inf]], np.float32), 2, 0.4, 1)
    assert got.tolist() == [[-1, -1]]


@pytest.fixture(scope="module")
def fitted(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    Q = hashing_embedder.encode(QUESTIONS)
    pipes = [G3RAG().fit(X, demo_corpus, hashing_embedder), STITCH(settings={"device": "cpu"}).fit(X, demo_corpus, hashing_embedder),
             DMAR(gnn_steps=5).fit(X, demo_corpus, hashing_embedder)]
    return pipes, Q


def test_every_graph_pipeline_ends_with_the_bridge(fitted):
    """Default = the ``no_bridge`` ranking's top ``bridge_depth`` re-ranked by :func:`bridge_rerank`; the
    ablation switches it off and changes the results on the demo (its passages name each other)."""
    pipes, Q = fitted
    for pipe in pipes:
        assert type(pipe).ablations["no_bridge"] == {"bridge": 0.0}
        assert type(pipe).ablations["no_graph"]["bridge"] == 0.0
        assert type(pipe).SearchParams.published().bridge == 0.0
        off = pipe.with_search_defaults(bridge=0.0)
        ids, scores = pipe.search(Q, 5, query_texts=QUESTIONS)
        lst = off.search(Q, pipe.search_defaults.bridge_depth, query_texts=QUESTIONS)
        want = bridge_rerank(pipe.components.title_mentions(), *lst, 5, pipe.search_defaults.bridge, pipe.search_defaults.bridge_seeds)
        np.testing.assert_array_equal(ids, want[0], err_msg=pipe.name)
        np.testing.assert_allclose(scores, want[1], err_msg=pipe.name)
        assert (ids != off.search(Q, 5, query_texts=QUESTIONS)[0]).any(), pipe.name
        assert "title_bridge" in pipe.timings


def test_bridge_respects_filters_and_batches(fitted):
    pipes, Q = fitted
    n = len(pipes[0].X)
    allowed = np.arange(n) % 3 != 1
    for pipe in pipes:
        ids, _ = pipe.search(Q, 5, query_texts=QUESTIONS, allowed=allowed)
        assert (ids >= 0).all() and allowed[ids].all(), pipe.name
        alone = np.concatenate([pipe.search(Q[i:i + 1], 5, query_texts=QUESTIONS[i:i + 1])[0]
                                for i in range(len(Q))])
        np.testing.assert_array_equal(alone, pipe.search(Q, 5, query_texts=QUESTIONS)[0], err_msg=pipe.name)


def test_bridge_parameters_are_checked_and_off_for_ppr_binary():
    assert PPRBinary.SearchParams().bridge == 0.0 and STITCH.SearchParams().bridge == 0.4
    for cls, bad in ((G3RAG, {"bridge": -0.1}), (STITCH, {"bridge_seeds": 0}), (DMAR, {"bridge_depth": 0})):
        with pytest.raises(InvalidParameter, match=next(iter(bad))):
            cls(**bad)


def test_mention_graph_is_saved_and_not_rebuilt_on_load(tmp_path, demo_corpus, monkeypatch):
    """The graph is built at fit, saved with the components and memory-mapped on load: a loaded
    index's first bridged search does not rebuild it (no first-query cost at 10⁶ passages)."""
    from hopgraph.engine.components import title_mentions as title_bridge
    from hopgraph.engine.errors import IndexFormatError
    from hopgraph.index import Index

    idx = Index.build(demo_corpus, embedder="hashing-32", pipelines=["g3rag"], progress=False)
    built = idx.components.title_mentions()
    idx.save(tmp_path / "i")
    texts = list(DEMO_QUESTIONS)[:4]
    want, _ = idx.search_arrays(texts, pipeline="g3rag", k=5)

    def refuse(*a, **kw):
        raise AssertionError("title mention graph rebuilt after load")

    monkeypatch.setattr(title_bridge.TitleMentions, "build", classmethod(refuse))
    back = Index.load(tmp_path / "i", embedder="hashing-32")
    got, _ = back.search_arrays(texts, pipeline="g3rag", k=5)
    np.testing.assert_array_equal(got, want)
    M = back.components.title_mentions()
    np.testing.assert_array_equal(M.graph.indptr, built.graph.indptr)
    np.testing.assert_array_equal(M.graph.indices, built.graph.indices)
    assert isinstance(M.graph.indices, np.memmap)  # read with plain reads by rows(), never through the mapping
    for seeds in ([0], [1, 3, 1], [len(demo_corpus) - 1, 0], []):
        union = np.unique(np.concatenate([built.row(s) for s in seeds] or [np.zeros(0, np.int64)]))
        np.testing.assert_array_equal(M.rows(seeds), union)
        np.testing.assert_array_equal(built.rows(seeds), union)
    # an out-of-range id is refused on load (structural validation, even without checksums)
    f = next((tmp_path / "i").rglob("title-mentions/indices.npy"))
    arr = np.load(f)
    if len(arr):
        arr[0] = len(demo_corpus) + 5
        np.save(f, arr)
        with pytest.raises(IndexFormatError, match="indices"):
            Index.load(tmp_path / "i", embedder="hashing-32", verify="fast")
