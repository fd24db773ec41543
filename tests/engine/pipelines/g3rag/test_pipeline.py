"""G3RAG (SPEC §1): exact mode against an independent dense numpy implementation of the
published algorithm, the scalable kNN mode, the fused scoring's options, persistence."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph import G3RAG
from hopgraph.engine.errors import InputError


def published_g3rag_reference(X: np.ndarray, Q: np.ndarray, seed_k: int, top_k: int, beta: float = 1.0) -> np.ndarray:
    """The published algorithm written densely, independent of hopgraph's kernels."""
    X64, Q64 = X.astype(np.float64), Q.astype(np.float64)
    n = len(X)
    S = X64 @ X64.T
    off = ~np.eye(n, dtype=bool)
    dens = np.array([np.maximum(S[i, off[i]], 0).mean() for i in range(n)])
    nd = (dens - dens.min()) / (dens.max() - dens.min() + 1e-9)
    pen = np.exp(-beta * nd)
    x = np.clip(S, 0, 1)
    G = np.where((S >= 0) & (S <= 1) & off, x * np.sqrt(1 - x * x), 0.0) * pen[None, :]
    sums = G.sum(1, keepdims=True)
    T = np.divide(G, sums, out=np.zeros_like(G), where=sums > 0)
    out = np.full((len(Q), top_k), -1)
    for b, q in enumerate(Q64):
        sims = X64 @ q
        order = np.argsort(-sims, kind="stable")
        seeds = list(order[:seed_k])
        y = T[seeds].mean(0)  # p uniform over the seeds: pᵀT
        y[seeds] = -np.inf
        diffused = [j for j in np.argsort(-y, kind="stable") if y[j] > 0]
        result = seeds + diffused[:max(top_k - len(seeds), 0)]
        result += [j for j in order if j not in result]
        out[b] = result[:top_k]
    return out


def data(n=120, d=24, n_q=9, seed=0):
    X = clustered_embeddings(n, d, 6, seed=seed)
    Q = clustered_embeddings(n_q, d, 6, seed=seed)  # same centres: queries fall in the clusters
    return X, Q


@pytest.mark.parametrize("seed_k,top_k", [(3, 5), (2, 8), (4, 3)])
def test_exact_mode_reproduces_the_published_algorithm(seed_k, top_k):
    X, Q = data()
    pipe = G3RAG(mode="exact", published=True, n_seeds=seed_k, settings={"device": "cpu"}).fit(X)
    ids, scores = pipe.search(Q, k=top_k)
    np.testing.assert_array_equal(ids, published_g3rag_reference(X, Q, seed_k, top_k))
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_knn_mode_equals_exact_when_k_and_band_cover_everything():
    X, Q = data(60)
    exact = G3RAG(mode="exact", published=True, settings={"device": "cpu"}).fit(X).search(Q, 6)[0]
    knn = G3RAG(mode="knn", n_neighbors=59, sim_min=0.0, sim_max=1.0, published=True, settings={"device": "cpu"}).fit(X).search(Q, 6)[0]
    np.testing.assert_array_equal(knn, exact)


def test_knn_graph_shape_and_batched_search_equals_single_queries():
    X, Q = data()
    pipe = G3RAG(n_neighbors=8, published=True, settings={"device": "cpu"}).fit(X)
    counts = np.diff(pipe.graph_.indptr)
    assert counts.max() <= 8 and pipe.graph_.n_rows == len(X)
    batch = pipe.search(Q, 5)[0]
    single = np.vstack([pipe.search(q[None], 5)[0] for q in Q])
    np.testing.assert_array_equal(batch, single)
    assert len(set(batch[0])) == 5  # no duplicates after seed masking and filling


def test_fill_when_diffusion_reaches_too_few_and_k_beyond_the_corpus():
    X = np.eye(6, dtype=np.float32)  # orthogonal passages: the gain graph has no edge
    pipe = G3RAG(published=True, n_seeds=2, settings={"device": "cpu"}).fit(X)
    ids, scores = pipe.search(X[[3]], k=8)  # k is clamped to the 6 passages
    assert ids.shape == scores.shape == (1, 6)
    assert ids[0, 0] == 3 and sorted(ids[0].tolist()) == list(range(6)) and np.isfinite(scores).all()


def test_fused_scoring_is_relevance_plus_normalised_graph_support():
    X = clustered_embeddings(120, 24, 6, seed=0, noise=0.2)  # within-cluster similarity ≈ 0.7: in the band
    Q = clustered_embeddings(9, 24, 6, seed=0, noise=0.2)
    pipe = G3RAG(n_neighbors=8, gamma=0.05, tau=0.05, candidate_depth=15, settings={"device": "cpu"}).fit(X)
    assert pipe.search_defaults.scoring == "fused"
    ids, scores = pipe.search(Q, 6)
    from hopgraph.engine.sparse import row_normalised

    T = row_normalised(pipe.graph_).to_dense().astype(np.float64)
    for b, q in enumerate(Q.astype(np.float64)):
        cos = X.astype(np.float64) @ q
        cand = np.argsort(-cos, kind="stable")[:15]
        p = np.exp((cos[cand] - cos[cand[0]]) / 0.05)
        p /= p.sum()
        y = p @ T[cand]
        assert y[cand].max() > 0
        final = cos[cand] + 0.05 * y[cand] / y[cand].max()
        expected = cand[np.argsort(-final, kind="stable")[:6]]
        np.testing.assert_array_equal(ids[b], expected)
        np.testing.assert_allclose(scores[b], np.sort(final)[::-1][:6], rtol=1e-5)
    no_graph = pipe.with_search_defaults(gamma=0.0).search(Q, 6)[0]
    np.testing.assert_array_equal(no_graph, np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, :6])


def test_fused_scoring_uses_bm25_only_with_corpus_and_texts(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    texts = ["Who wrote the novel?", "Where is the river?"]
    Q = hashing_embedder.encode(texts)
    pipe = G3RAG(n_neighbors=8, settings={"device": "cpu"}).fit(X, demo_corpus)
    with_text = pipe.search(Q, 5, query_texts=texts)
    without = pipe.search(Q, 5)
    assert np.all(np.diff(with_text[1], axis=1) <= 0) and np.all(with_text[0] >= 0)
    np.testing.assert_array_equal(without[0], pipe.with_search_defaults(bm25_weight=0.0).search(Q, 5, query_texts=texts)[0])
    expand = pipe.with_search_defaults(expand=True).search(Q, 5, query_texts=texts)
    assert expand[0].shape == (2, 5)
    # without the corpus there is neither BM25 nor the name links nor the title bridge, which need no texts
    alone = G3RAG(n_neighbors=8, settings={"device": "cpu"}).fit(X).search(Q, 5)[0]
    np.testing.assert_array_equal(alone, pipe.with_search_defaults(name_links=0.0, bridge=0.0).search(Q, 5)[0])


def test_hybrid_seeds_need_corpus_and_texts(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    Q = X[:2]
    with pytest.raises(InputError, match="corpus"):
        G3RAG(published=True, seed_source="hybrid", settings={"device": "cpu"}).fit(X).search(Q, 3, query_texts=["a", "b"])
    pipe = G3RAG(published=True, seed_source="hybrid", settings={"device": "cpu"}).fit(X, demo_corpus)
    with pytest.raises(InputError, match="query_texts"):
        pipe.search(Q, 3)
    ids, _ = pipe.search(Q, 3, query_texts=[demo_corpus.texts[0], demo_corpus.texts[1]])
    assert ids[0, 0] == 0 and ids[1, 0] == 1


def test_parameters_are_checked():
    with pytest.raises(InputError, match="mode"):
        G3RAG(mode="dense")
    with pytest.raises(InputError, match="scoring"):
        G3RAG(scoring="sum")
    with pytest.raises(InputError, match="gamma"):
        G3RAG(gamma=-1.0)
    with pytest.raises(RuntimeError, match="not fitted"):
        G3RAG().search(np.ones((1, 3), np.float32))


def test_save_and_load_memory_mapped(tmp_path, demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    texts = ["Who wrote the novel?"]
    Q = hashing_embedder.encode(texts)
    pipe = G3RAG(n_neighbors=6, settings={"device": "cpu"}).fit(X, demo_corpus)
    pipe.save(tmp_path)
    loaded = G3RAG.load(tmp_path, pipe.get_params(), pipe.components)
    assert isinstance(loaded.graph_.indices, np.memmap) or isinstance(loaded.graph_.indices.base, np.memmap)
    for variant in ({}, {"scoring": "mask", "seed_source": "dense", "n_seeds": 3}):
        a = pipe.with_search_defaults(**variant).search(Q, 5, query_texts=texts)
        b = loaded.with_search_defaults(**variant).search(Q, 5, query_texts=texts)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
