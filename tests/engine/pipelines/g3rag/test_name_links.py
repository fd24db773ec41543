"""G3RAG's name links (:mod:`hopgraph.engine.pipelines.g3rag.name_links`) against dense references:
the passages' names and idf from the shared extraction, the one-step diffusion over the name links
among a query's candidates, the fused score that adds it, and the refresh after ``Index.add``."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.engine.components.extraction import canonical_name, extract
from hopgraph.engine.pipelines.g3rag.name_links import ChunkNames, name_link_diffusion

QUESTIONS = ["Who discovered the comet?", "Which university operates the observatory?",
             "Where was the bridge built?", "Who founded the prize?", "river city", "zzz unknown words"]


def dense_links(ex, titles=(), title_weight: float = 0.0) -> np.ndarray:
    """``A[i, j] = Σ idf(n)`` over the names i and j share (i ≠ j), from the raw entity states, plus
    ``title_weight · idf(title(j))`` when i names j's title."""
    n, v = ex.n_chunks, len(ex.names)
    M = np.zeros((n, v))
    M[ex.node_chunk, ex.node_name] = 1.0
    idf = np.log(n / np.maximum(M.sum(axis=0), 1))
    A = (M * idf) @ M.T
    ids = ex.name_ids()
    for j, t in enumerate(titles):
        if t and canonical_name(t) in ids:
            name = ids[canonical_name(t)]
            A[:, j] += title_weight * idf[name] * M[:, name]
    np.fill_diagonal(A, 0.0)
    return A


def reference_diffusion(A: np.ndarray, cand: np.ndarray, p: np.ndarray) -> np.ndarray:
    y = np.zeros(cand.shape)
    for b in range(len(cand)):
        slots = np.flatnonzero(cand[b] >= 0)
        sub = A[np.ix_(cand[b, slots], cand[b, slots])]
        rows = sub.sum(axis=1, keepdims=True)
        T = np.divide(sub, rows, out=np.zeros_like(sub), where=rows > 0)
        y[b, slots] = p[b, slots] @ T
    return y


def test_chunk_names_are_the_distinct_names_of_each_passage_with_their_idf(demo_corpus):
    ex = extract(demo_corpus)
    names = ChunkNames.from_extraction(ex)
    assert names.n_chunks == len(demo_corpus)
    df = np.zeros(len(ex.names))
    for c in range(len(demo_corpus)):
        want = sorted(set(ex.node_name[ex.node_chunk == c].tolist()))
        assert names.names[names.indptr[c]:names.indptr[c + 1]].tolist() == want
        df[want] += 1
    held = df > 0
    np.testing.assert_allclose(names.idf[held], np.log(len(demo_corpus) / df[held]))
    assert (names.title == -1).all()  # no titles given
    titled = ChunkNames.from_extraction(ex, demo_corpus.titles)
    for c, t in enumerate(demo_corpus.titles):  # the title rule makes every title a name of its passage
        assert ex.names[titled.title[c]] == canonical_name(t)
        assert titled.title[c] in names.names[names.indptr[c]:names.indptr[c + 1]]


@pytest.mark.parametrize("title_weight", [0.0, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_name_link_diffusion_equals_the_dense_reference(demo_corpus, seed, title_weight):
    ex = extract(demo_corpus)
    A = dense_links(ex, demo_corpus.titles, title_weight)
    assert title_weight == 0 or not np.allclose(A, A.T)  # title links are directed
    g = np.random.default_rng(seed)
    n, B, m = len(demo_corpus), 7, 9
    cand = np.stack([g.permutation(n)[:m] for _ in range(B)]).astype(np.int64)
    cand[1, 5:] = -1  # padding at the end of a row
    cand[2, :] = -1  # a query without candidates
    p = g.random((B, m)).astype(np.float32)
    p[cand < 0] = 0
    p /= np.maximum(p.sum(axis=1, keepdims=True), 1e-12)
    got = name_link_diffusion(ChunkNames.from_extraction(ex, demo_corpus.titles), cand, p, title_weight)
    want = reference_diffusion(A, cand, p)
    assert got.dtype == np.float32 and got.shape == (B, m)
    assert (want > 0).sum() > B  # the links are not trivially empty
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def demo_index(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["g3rag"], progress=False)


def test_fused_score_adds_the_normalised_name_link_support(demo_index):
    """The default search = the scores without name links + ``name_links · y / max y`` over the candidates."""
    pipe = demo_index.pipeline("g3rag").with_search_defaults(bridge=0.0)  # the title bridge: tests/engine/pipelines/test_title_bridge.py
    assert pipe.search_defaults.scoring == "fused" and pipe.search_defaults.name_links > 0
    Q = demo_index.embed_queries(QUESTIONS)
    m = pipe.search_defaults.candidate_depth
    batch = pipe.components.batch(Q, QUESTIONS)
    cand, rel = pipe._relevance(batch, m, pipe.search_defaults)
    # without name links, the m candidates come back with their relevance + gain-graph scores
    base_ids, base_scores = pipe.with_search_defaults(name_links=0.0).search(Q, m, query_texts=QUESTIONS)
    p = np.exp((rel - rel[:, :1]) / pipe.search_defaults.tau)
    p /= p.sum(axis=1, keepdims=True)
    assert pipe.search_defaults.title_links > 0
    A = dense_links(pipe.components.extraction(), pipe.components.corpus.titles, pipe.search_defaults.title_links)
    y = reference_diffusion(A, cand, p)
    got_ids, got_scores = pipe.search(Q, m, query_texts=QUESTIONS)
    changed = 0
    for b in range(len(Q)):
        base = dict(zip(base_ids[b].tolist(), base_scores[b].tolist()))
        assert set(base) == set(cand[b].tolist())
        support = y[b] / y[b].max() if y[b].max() > 0 else np.zeros(m)
        want = {j: base[j] + pipe.search_defaults.name_links * s for j, s in zip(cand[b].tolist(), support)}
        np.testing.assert_allclose(got_scores[b], [want[j] for j in got_ids[b].tolist()], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_scores[b], sorted(want.values(), reverse=True), rtol=1e-5, atol=1e-6)
        changed += not np.array_equal(got_ids[b, :5], base_ids[b, :5])
    assert changed > 0  # the name links change some top-5


def test_no_graph_ablation_switches_off_both_graphs(demo_index):
    pipe = demo_index.pipeline("g3rag")
    Q = demo_index.embed_queries(QUESTIONS)
    no_graph = pipe.with_search_defaults(**pipe.ablations["no_graph"])
    batch = pipe.components.batch(Q, QUESTIONS)
    cand, rel = pipe._relevance(batch, pipe.search_defaults.candidate_depth, pipe.search_defaults)
    ids, scores = no_graph.search(Q, 5, query_texts=QUESTIONS)
    np.testing.assert_array_equal(ids, cand[:, :5])
    np.testing.assert_allclose(scores, rel[:, :5], rtol=1e-6)


def test_name_links_follow_index_add(demo_corpus, hashing_embedder):
    n = len(demo_corpus)
    cut = int(0.8 * n)
    idx = Index.build(demo_corpus.take(np.arange(cut)), embedder=hashing_embedder, pipelines=["g3rag"],
                      progress=False)
    Q = idx.embed_queries(QUESTIONS)
    idx.pipeline("g3rag").search(Q, 5, query_texts=QUESTIONS)  # the names of the first cut passages
    idx.add(demo_corpus.take(np.arange(cut, n)))
    pipe = idx.pipeline("g3rag")
    names = pipe._names(pipe.search_defaults)
    want = ChunkNames.from_extraction(idx.components.extraction())
    assert names.n_chunks == n
    np.testing.assert_array_equal(names.indptr, want.indptr)
    np.testing.assert_array_equal(names.names, want.names)
    ids, _ = pipe.search(Q, 5, query_texts=QUESTIONS)
    assert (ids >= 0).all() and all(len(set(row)) == 5 for row in ids.tolist())


def test_names_are_built_at_fit_and_saved_with_the_index(demo_corpus, hashing_embedder, tmp_path, monkeypatch):
    from hopgraph.engine.errors import IndexFormatError
    from hopgraph.engine.pipelines.g3rag import name_links

    idx = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["g3rag"], progress=False)
    built = idx.pipeline("g3rag")._chunk_names
    assert built is not None  # at fit, not on the first query
    Q = idx.embed_queries(QUESTIONS)
    before = idx.pipeline("g3rag").search(Q, 5, query_texts=QUESTIONS)
    idx.save(tmp_path / "idx")
    monkeypatch.setattr(name_links.ChunkNames, "from_extraction",
                        classmethod(lambda *a, **k: pytest.fail("names rebuilt after load")))
    loaded = Index.load(tmp_path / "idx", embedder=hashing_embedder, progress=False)
    pipe = loaded.pipeline("g3rag")
    for field in name_links.ARRAY_FIELDS:
        np.testing.assert_array_equal(getattr(pipe._chunk_names, field), getattr(built, field))
    after = pipe.search(Q, 5, query_texts=QUESTIONS)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    arrays = built.arrays()
    arrays["names_names"] = arrays["names_names"] + len(built.idf)  # a name id outside the idf table
    with pytest.raises(IndexFormatError, match="names_names"):
        ChunkNames.from_arrays(arrays, built.n_chunks, "idx")
    with pytest.raises(IndexFormatError, match="names_indptr"):
        ChunkNames.from_arrays(built.arrays(), built.n_chunks + 1, "idx")


@pytest.mark.parametrize("decode_all", [0, 10**9])  # titles looked up by binary search / in the decoded vocabulary
def test_names_extended_after_an_add_equal_names_made_from_scratch(demo_corpus, monkeypatch, decode_all):
    """An add extends the passages' names from the new passages' states only (the stored rows'
    name ids follow the grown vocabulary; every idf from the new counts): the same arrays as
    names made from the grown extraction."""
    from hopgraph.engine.components.extraction import extend_extraction, extract
    from hopgraph.engine.pipelines.g3rag import name_links

    monkeypatch.setattr(name_links, "DECODE_ALL_FACTOR", decode_all)

    for start in (5, 17, 29):
        old_ex = extract(demo_corpus.take(np.arange(start)))
        old = ChunkNames.from_extraction(old_ex, demo_corpus.titles[:start])
        ex = extend_extraction(old_ex, demo_corpus, start)
        got = old.extended(ex, demo_corpus.titles[start:])
        want = ChunkNames.from_extraction(ex, demo_corpus.titles)
        for field in ("indptr", "names", "idf", "title"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=f"{start} {field}")
        assert old.extended(extract(demo_corpus), demo_corpus.titles[start:]) is None  # not an extension of it
