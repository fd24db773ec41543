"""G3RAG's sparse query path against the dense computation.

``reference_search`` below is G3RAG's search as it was at commit d495543:
dense ``[chunk, N]`` diffusion output from the ``sparse_diffusion`` op, a dense ``[chunk, N]``
score matrix, ``QueryBatch.cosine`` for ``expand`` and ``QueryBatch.mask_scores`` for the
filter. The sparse search must return the same ids, and the same scores within 1e-6, on random
embeddings, random graphs (tied weights, zero-weight edges, empty rows, isolated passages),
top_k beyond N, filters, ``expand`` on and off, mask scoring and hybrid seeds; and it must not
allocate anything of size [B, N]."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph import G3RAG
from hopgraph.engine.components.query_batch import QueryBatch
from hopgraph.engine.components.shared import Components
from hopgraph.kernels.csr import CSR, check_csr
from hopgraph.engine.components.hybrid_ranking import hybrid_ranking  # noqa: F401  (used through pipe._relevance_ranking)
from hopgraph.engine.ranking import PAD_ID, PAD_SCORE, topk_rows
from hopgraph.engine.pipelines.g3rag.diffusion import diffusion_at, diffusion_entries
from hopgraph.engine.ranking import topk_entries
from hopgraph.engine.storage import save_arrays
from hopgraph.kernels import call


# ---------------------------------------------------------------------- the dense reference (d495543)
def reference_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``topk_rows`` with its documented order enforced: a full sort by (−score, column).

    d495543's ``topk_rows`` selects with ``np.argpartition``, which among scores tied across the
    k-th position keeps an arbitrary member of the tie (not always the lowest column, as its
    docstring says): with duplicate passages the reference would then differ from any
    deterministic ranking. Everything else in the reference is d495543's code."""
    scores = np.asarray(scores, np.float32)
    B, N = scores.shape
    order = np.lexsort((np.broadcast_to(np.arange(N), (B, N)), -scores), axis=1)[:, :k]
    top = np.take_along_axis(scores, order, axis=1)
    ids, out = np.full((B, k), PAD_ID, np.int64), np.full((B, k), PAD_SCORE, np.float32)
    valid = np.isfinite(top) | (top > 0)
    ids[:, :order.shape[1]] = np.where(valid, order, PAD_ID)
    out[:, :order.shape[1]] = np.where(valid, top, PAD_SCORE)
    return ids, out


def _reference_diffuse(pipe: G3RAG, seed_ids: np.ndarray, seed_weights: np.ndarray | None) -> np.ndarray:
    g = pipe.graph_
    return call("sparse_diffusion", seed_ids, seed_weights, g.indptr, g.indices, g.data, g.n_cols, device="cpu")


def _reference_masked(pipe: G3RAG, batch: QueryBatch, top_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, B = len(pipe.X), len(batch)
    seed_k = min(pipe.search_defaults.n_seeds, n)
    rank_ids, rank_scores = pipe._relevance_ranking(batch, min(seed_k + top_k, n), pipe.search_defaults)
    seeds = rank_ids[:, :seed_k]
    y = _reference_diffuse(pipe, seeds, None)
    np.put_along_axis(y, np.where(seeds >= 0, seeds, 0), -np.inf, axis=1)  # step 3: seed masking
    y[~(y > 0)] = -np.inf
    batch.mask_scores(y)
    diff_ids, diff_scores = reference_topk(y, top_k)
    ids = np.full((B, top_k), PAD_ID, np.int64)
    scores = np.full((B, top_k), PAD_SCORE, np.float32)
    for b in range(B):
        chosen: list[int] = []
        tiers: list[float] = []
        for j, s in zip(seeds[b], rank_scores[b, :seed_k]):
            if j >= 0:
                chosen.append(int(j)); tiers.append(4.0 + float(s))
        for j, s in zip(diff_ids[b], diff_scores[b]):
            if j >= 0 and len(chosen) < top_k:
                chosen.append(int(j)); tiers.append(2.0 + float(s))
        for j, s in zip(rank_ids[b, seed_k:], rank_scores[b, seed_k:]):
            if len(chosen) >= top_k:
                break
            if j >= 0 and j not in chosen:
                chosen.append(int(j)); tiers.append(float(s))
        m = min(len(chosen), top_k)
        ids[b, :m], scores[b, :m] = chosen[:m], tiers[:m]
    return ids, scores, y


def _reference_fused(pipe: G3RAG, batch: QueryBatch, top_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, B = len(pipe.X), len(batch)
    sp = pipe.search_defaults
    m = min(max(sp.candidate_depth, top_k), n)
    cand, rel = pipe._relevance(batch, m, sp)
    valid = cand >= 0
    rows = np.broadcast_to(np.arange(B)[:, None], cand.shape)
    if sp.expand:
        score = batch.mask_scores(batch.cosine().copy())
    else:
        score = np.full((B, n), -np.inf, np.float32)
    score[rows[valid], cand[valid]] = rel[valid]
    if pipe.search_defaults.gamma > 0:
        top = np.where(valid[:, :1], rel[:, :1], 0.0)
        z = np.where(valid, np.exp((np.where(valid, rel, top) - top) / sp.tau), 0.0)
        total = z.sum(axis=1, keepdims=True)
        p = np.divide(z, total, out=np.zeros_like(z), where=total > 0).astype(np.float32)
        y = _reference_diffuse(pipe, cand, p)
        if not sp.expand:
            y[~np.isfinite(score)] = 0.0
        top = y.max(axis=1, keepdims=True)
        score += pipe.search_defaults.gamma * np.divide(y, top, out=np.zeros_like(y), where=top > 0)
    return (*reference_topk(score, top_k), score)


def reference_search(pipe: G3RAG, Q: np.ndarray, top_k: int, query_texts=None, allowed=None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G3RAG.search at d495543 (chunks bounded by a dense [chunk, N] budget of 2^24 entries):
    ``(ids, scores, dense)``, ``dense`` the [B, N] matrix the results were ranked from (the fused
    score, or the masked scoring's diffused y)."""
    Q, _ = pipe._check_queries(Q, top_k, query_texts)
    needs_text = pipe.components.corpus is not None and query_texts is not None
    ids = np.full((len(Q), top_k), PAD_ID, np.int64)
    scores = np.full((len(Q), top_k), PAD_SCORE, np.float32)
    chunk = max(1, min(256, (1 << 24) // max(len(pipe.X), 1)))
    dense = np.zeros((len(Q), len(pipe.X)), np.float32)
    run = _reference_masked if pipe.search_defaults.scoring == "mask" else _reference_fused
    for c0 in range(0, len(Q), chunk):
        texts = list(query_texts[c0:c0 + chunk]) if needs_text else None
        batch = pipe.components.batch(Q[c0:c0 + chunk], texts, allowed)
        ids[c0:c0 + chunk], scores[c0:c0 + chunk], dense[c0:c0 + chunk] = run(pipe, batch, top_k)
    return ids, scores, dense


def assert_same(pipe: G3RAG, Q: np.ndarray, top_k: int, query_texts=None, allowed=None) -> None:
    """The sparse search returns the reference's scores (within 1e-6) and ids.

    One exception, ``expand=True`` only: the reference ranks all N passages, those neither a
    candidate nor reached by diffusion by their cosine alone, which never exceeds the last
    candidate's relevance; it can only equal it (duplicate passages, or an isolated query whose
    cosines are all 0), and then the reference may return such a passage where the sparse
    search returns the tied candidate (which of the tied passages the dense index returned as
    candidates is faiss's choice). There, a differing id must be exactly tied in the reference's
    own score matrix (within 1e-6: the reference's cosines come from one GEMM)."""
    ids, scores = pipe.search(Q, top_k, query_texts=query_texts, allowed=allowed)
    top_k = min(top_k, len(pipe.X))  # k is clamped to the passages
    assert ids.shape == scores.shape == (len(Q), top_k)
    ref_ids, ref_scores, dense = reference_search(pipe, Q, top_k, query_texts, allowed)
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-6)
    if pipe.search_defaults.scoring == "fused" and pipe.search_defaults.expand:
        differ = ids != ref_ids
        b, i = np.nonzero(differ)
        assert np.all(ids[differ] >= 0) and np.all(ref_ids[differ] >= 0)
        np.testing.assert_allclose(dense[b, ids[differ]], ref_scores[b, i], rtol=0, atol=1e-6)
    else:
        np.testing.assert_array_equal(ids, ref_ids)
    if allowed is not None:
        assert allowed[ids[ids >= 0]].all()


# ---------------------------------------------------------------------- data
def embeddings_with_ties_and_isolated(n: int = 150, d: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered passages, 12 of them duplicated (tied similarities and tied edge weights) and 3
    isolated ones (orthogonal to all others: no edge in the band, or weight 0), and queries near
    passages, duplicates and isolated ones."""
    base = clustered_embeddings(n, d, 6, seed=seed, noise=0.3)
    X = np.zeros((n + 12 + 3, d + 3), np.float32)
    X[:n, :d] = base
    X[n:n + 12, :d] = base[np.random.default_rng(seed).choice(n, 12, replace=False)]
    X[n + 12:, d:] = np.eye(3, dtype=np.float32)
    g = np.random.default_rng(seed + 1)
    Q = X[g.choice(len(X), 20, replace=False)] + 0.05 * g.standard_normal((20, d + 3)).astype(np.float32)
    Q = np.vstack([Q, X[n + 12:n + 14], X[n:n + 2]])  # exactly an isolated passage, exactly a duplicate
    return X, Q / np.linalg.norm(Q, axis=1, keepdims=True)


def random_graph(n: int, seed: int = 0) -> CSR:
    """Random CSR over n passages: 0-9 out-edges per row (a quarter of rows empty), weights in
    {0, 1, 2} (ties and zero-sum rows), self-loops allowed."""
    g = np.random.default_rng(seed)
    counts = np.where(g.random(n) < 0.25, 0, g.integers(1, 10, n))
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.concatenate([np.sort(g.choice(n, c, replace=False)) for c in counts]).astype(np.int32)
    data = g.integers(0, 3, len(indices)).astype(np.float32)
    return check_csr(indptr, indices, data, n, "random graph")


def filter_masks(n: int, seed: int = 0) -> list[np.ndarray | None]:
    """No filter, half the passages, about 3 % (below the dense index's subset threshold)."""
    g = np.random.default_rng(seed)
    sparse = np.zeros(n, bool)
    sparse[g.choice(n, max(2, n // 30), replace=False)] = True
    return [None, g.random(n) < 0.5, sparse]


QUERY_VARIANTS = [
    {},                                    # fused (default)
    {"expand": True},
    {"gamma": 0.0},
    {"gamma": 0.0, "expand": True},
    {"gamma": 0.5, "candidate_depth": 7},     # graph support decides
    {"gamma": 0.5, "expand": True},
    {"published": True},                   # mask scoring
    {"published": True, "n_seeds": 6},
]


def _variant(pipe: G3RAG, overrides: dict) -> G3RAG:
    overrides = dict(overrides)
    if overrides.pop("published", False):
        overrides = {**G3RAG.SearchParams.published_values(), **overrides}
    return pipe.with_search_defaults(**overrides)


# ---------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("fit", [{"n_neighbors": 8}, {"n_neighbors": 8, "sim_min": 0.0}, {"mode": "exact"}])
@pytest.mark.parametrize("overrides", QUERY_VARIANTS)
def test_sparse_search_equals_dense_reference_on_random_embeddings(fit, overrides):
    X, Q = embeddings_with_ties_and_isolated()
    pipe = _variant(G3RAG(settings={"device": "cpu"}, **fit).fit(X), overrides)
    for allowed in filter_masks(len(X)):
        for top_k in (1, 5, 25):
            assert_same(pipe, Q, top_k, allowed=allowed)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("overrides", QUERY_VARIANTS)
def test_sparse_search_equals_dense_reference_on_random_graphs(seed, overrides):
    """A random graph (tied weights, zero-weight edges, empty rows) in place of the gain graph."""
    X, Q = embeddings_with_ties_and_isolated(60, 8, seed=seed)
    pipe = G3RAG(n_neighbors=4, settings={"device": "cpu"}).fit(X)
    pipe.graph_ = random_graph(len(X), seed)
    pipe = _variant(pipe, overrides)
    for allowed in filter_masks(len(X), seed):
        for top_k in (3, 10, len(X) + 4):  # top_k beyond N: clamped
            assert_same(pipe, Q, top_k, allowed=allowed)


@pytest.mark.parametrize("overrides", QUERY_VARIANTS + [{"published": True, "seed_source": "hybrid"},
                                                        {"bm25_weight": 0.0}, {"candidate_depth": 3}])
def test_sparse_search_equals_dense_reference_on_the_demo_index(overrides, tmp_path):
    """An index built by ``Index.build`` (hashing-64): lexical relevance and hybrid seeds from the
    query texts, a metadata-free filter mask and a deleted passage. The reference predates the
    name links and the title bridge, so they are off here; tests/engine/pipelines/g3rag/test_name_links.py
    and tests/engine/pipelines/test_title_bridge.py check them."""
    import hopgraph
    from hopgraph.demo import demo_corpus

    index = hopgraph.Index.build(demo_corpus(), embedder="hashing-64", pipelines=["g3rag"], progress=False)
    texts = ["Who discovered the comet?", "Which university operates the observatory?",
             "Where was the bridge built?", "Who founded the prize?", "river city", "zzz unknown words"]
    Q = index.embed_queries(texts)
    overrides = {**overrides, "name_links": 0.0, "bridge": 0.0}
    pipe = _variant(index.pipeline("g3rag"), overrides)
    n = len(index.X)
    for allowed in filter_masks(n, 3):
        for top_k in (2, 5, n + 2):
            assert_same(pipe, Q, top_k, query_texts=texts, allowed=allowed)
            if pipe.search_defaults.seed_source != "hybrid":
                assert_same(pipe, Q, top_k, allowed=allowed)  # without texts: no lexical term
    index.delete([index.corpus.ids[1]])
    pipe = _variant(index.pipeline("g3rag"), overrides)
    allowed = pipe.components.allowed(None)
    assert allowed is not None and not allowed[1]
    assert_same(pipe, Q, 5, query_texts=texts)
    assert 1 not in pipe.search(Q, n, query_texts=texts)[0]


def test_batches_larger_than_a_chunk_and_empty_batches():
    X, Q = embeddings_with_ties_and_isolated()
    pipe = G3RAG(n_neighbors=8, settings={"device": "cpu"}).fit(X)
    Q = np.repeat(Q, 12, axis=0)  # 276 queries > one batch
    assert len(Q) > G3RAG.default_batch_size
    assert_same(pipe, Q, 5)
    assert_same(pipe.with_search_defaults(scoring="mask"), Q, 5)
    ids, scores = pipe.search(Q[:0], 5)
    assert ids.shape == (0, 5) and scores.shape == (0, 5)


# ---------------------------------------------------------------------- the sparse helpers
@pytest.mark.parametrize("seed", range(4))
def test_sparse_diffusion_equals_the_op_bit_for_bit(seed):
    g = np.random.default_rng(seed)
    n = 80
    graph = random_graph(n, seed)
    seeds = g.integers(-1, n, (7, 5))
    seeds[0] = -1  # a query without seeds
    weights = g.random((7, 5)).astype(np.float32)
    for w in (None, weights):
        dense = call("sparse_diffusion", seeds, w, graph.indptr, graph.indices, graph.data, n, device="cpu")
        y = diffusion_entries(graph, seeds, w)
        sparse = np.zeros_like(dense)
        sparse[y.query, y.column] = y.value
        np.testing.assert_array_equal(sparse, dense)  # bit-identical, not merely close
        assert np.all(np.diff(y.keys(n)) > 0)  # sorted, no pair twice
        cols = g.integers(-1, n, (7, 9))
        at = diffusion_at(graph, seeds, w, cols)
        expected = np.where(cols >= 0, np.take_along_axis(dense, np.maximum(cols, 0), axis=1), 0.0)
        np.testing.assert_array_equal(at, expected)


def test_topk_entries_orders_like_topk_rows_with_ties():
    g = np.random.default_rng(0)
    dense = g.integers(0, 4, (6, 40)).astype(np.float32)  # many ties
    dense[dense == 0] = -np.inf  # not a result
    dense[2] = -np.inf  # a row with no result
    q, c = np.nonzero(np.isfinite(dense))
    for k in (1, 3, 12, 50):
        got = topk_entries(q, c, dense[q, c], len(dense), k)
        order = np.lexsort((np.broadcast_to(np.arange(40), dense.shape), -dense), axis=1)  # full stable sort
        want_ids = np.where(np.isfinite(np.take_along_axis(dense, order, 1)), order, -1)[:, :k]
        np.testing.assert_array_equal(got[0][:, :min(k, 40)], want_ids)
        np.testing.assert_array_equal(got[1], topk_rows(dense, k)[1])


# ---------------------------------------------------------------------- no O(B·N) array
def _loaded_pipeline(tmp_path: Path, n: int, d: int, params: dict) -> G3RAG:
    """A G3RAG over n random passages with a random graph, assembled as ``Index.load`` does
    (``G3RAG.load`` over components): no fit, so n can be large in a unit test."""
    g = np.random.default_rng(0)
    X = g.standard_normal((n, d)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    counts = np.full(n, 16)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    save_arrays(tmp_path, {"indptr": indptr, "indices": g.integers(0, n, indptr[-1]).astype(np.int32),
                           "data": g.random(indptr[-1]).astype(np.float32)})
    return G3RAG.load(tmp_path, {"device": "cpu", **params}, Components(X))


@pytest.mark.parametrize("params", [{}, {"expand": True}, {"scoring": "mask"}])
def test_search_allocates_nothing_of_size_batch_times_n(tmp_path, params):
    n, B = 100_000, 64
    pipe = _loaded_pipeline(tmp_path, n, 8, params)
    Q = np.asarray(pipe.X[:B]) + 0.01
    allowed = np.ones(n, bool)
    allowed[::3] = False
    pipe.components.dense.topk(Q, 1)  # build the faiss index outside the measurement
    tracemalloc.start()
    try:
        pipe.search(Q, 10, allowed=allowed)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # one [B, N] float32 array would be 25.6 MB; the sparse search holds a few hundred KB
    assert peak < B * n * 4 / 10, f"search peak {peak / 1e6:.1f} MB"
