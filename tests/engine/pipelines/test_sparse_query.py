"""The sparse query paths of hybrid, DMAR and STITCH against the dense computations
they replaced (kept here only as references): hybrid's RRF over the two top lists instead of a
``[B, N]`` fusion array, DMAR's lexical term read at the candidates instead of a BM25 row per
question. Same ids and bit-equal scores, on generated data and the demo corpus."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.engine.ranking import reciprocal_rank_fusion, rrf_topk, topk_rows


def _random_rankings(rng: np.random.Generator, B: int, m: int, n: int, n_lists: int) -> list[np.ndarray]:
    out = []
    for _ in range(n_lists):
        r = np.stack([rng.choice(n, size=m, replace=False) for _ in range(B)]).astype(np.int64)
        r[rng.random(r.shape) < 0.2] = -1  # padding anywhere (bm25 pads its tail; check the general case)
        out.append(r)
    return out


@pytest.mark.parametrize("n,m,top_k", [(30, 10, 5), (12, 12, 20), (500, 40, 8)])
def test_rrf_topk_equals_dense_fusion(rng, n, m, top_k):
    for n_lists in (1, 2, 3):
        rankings = _random_rankings(rng, 7, m, n, n_lists)
        dense = reciprocal_rank_fusion(rankings, n, k=60)
        dense[dense == 0] = -np.inf
        ref_ids, ref_scores = topk_rows(dense, top_k)
        ids, scores = rrf_topk(rankings, top_k, k=60)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_array_equal(scores, ref_scores)


def test_rrf_topk_all_padding():
    ids, scores = rrf_topk([np.full((3, 4), -1, np.int64)], 2)
    assert (ids == -1).all() and np.isneginf(scores).all()


@pytest.fixture(scope="module")
def demo_index(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["hybrid", "dmar", "stitch", "ppr_binary"],
                       progress=False)


def _questions():
    from hopgraph.demo import DEMO_QUESTIONS

    return DEMO_QUESTIONS + ["what is it?", "1999", "who designed the bridge in the home city of peter harlow?"]


def test_hybrid_equals_dense_reference(demo_index):
    comp = demo_index.components
    qs = _questions()
    Q = demo_index.embed_queries(qs)
    pipe = demo_index.pipeline("hybrid")
    n = len(comp.X)
    for allowed in (None, np.arange(n) % 3 != 0):
        for top_k in (1, 5, n + 3):
            batch = comp.batch(Q, qs, allowed)
            d_ids, _ = batch.dense_topk(max(pipe.search_defaults.fusion_depth, top_k))
            b_ids, _ = batch.bm25_topk(max(pipe.search_defaults.fusion_depth, top_k))
            fused = reciprocal_rank_fusion([d_ids, b_ids], n, k=pipe.search_defaults.rrf_k)
            fused[fused == 0] = -np.inf
            ref_ids, ref_scores = topk_rows(fused, min(top_k, n))  # k clamped to the passages
            ids, scores = pipe.search(Q, top_k, qs, allowed=allowed)
            np.testing.assert_array_equal(ids, ref_ids)
            np.testing.assert_array_equal(scores, ref_scores)


def test_bm25_at_candidates_equals_full_rows(demo_index, rng):
    comp = demo_index.components
    bm25 = comp.bm25()
    qs = _questions() + ["the the bridge bridge", "zzzz unknownword"]
    tokens = bm25.tokenize(qs)
    n = len(comp.X)
    for toks in tokens:
        cand = rng.integers(-1, n, size=(3, 17))
        ref = np.where(cand >= 0, bm25.scores(toks)[np.maximum(cand, 0)], 0.0).astype(np.float32)
        np.testing.assert_array_equal(bm25.scores_at(toks, cand), ref)


# ---------------------------------------------------------------------- STITCH: the dense reference
# STITCH's dense query (the code of commit 2bf91cf): Q @ text_embᵀ over every text, [B, n_nodes] channel
# inputs, [B, N] relevance, prior, walk and scores.
def _reference_prior(pipe, batch) -> np.ndarray:
    import torch

    from hopgraph.engine.pipelines.stitch.walk import normalise_rows
    from hopgraph.kernels import call

    H, Q = pipe.hypergraph_, batch.Q
    as_t = lambda a, dt=torch.int64: torch.as_tensor(np.array(a), dtype=dt)  # noqa: E731
    inc_edge = np.repeat(np.arange(H.n_edges), np.diff(np.asarray(H.edge_indptr)))
    text_sim = torch.from_numpy(np.ascontiguousarray(Q @ np.asarray(H.text_emb, np.float32).T))
    node_sim = text_sim[:, as_t(H.node_text)]
    S = text_sim[:, as_t(H.edge_text)].clamp_min(0.0)
    if pipe.search_defaults.delta_mode == "relative":
        thr = pipe.search_defaults.delta * node_sim.max(dim=1, keepdim=True).values.clamp_min(1e-6)
    else:
        thr = pipe.search_defaults.delta
    A = torch.where((node_sim >= thr) & (node_sim > 0), node_sim, torch.zeros_like(node_sim))
    channels = [A]
    if pipe.search_defaults.spatial:
        channels.append(call("hyperedge_max_propagate", A, S, as_t(H.edge_indptr), as_t(H.edge_nodes, torch.int32),
                             as_t(H.node_indptr), as_t(H.node_incidence, torch.int32), device="cpu"))
    if pipe.search_defaults.temporal:
        chunk_sim = torch.from_numpy(np.maximum(batch.cosine(), 0.0))
        best_edge = torch.zeros_like(A).scatter_reduce(1, as_t(H.edge_nodes).expand(len(A), -1), S[:, as_t(inc_edge)],
                                                      "amax")
        w = best_edge * chunk_sim[:, as_t(H.node_chunk)]
        channels.append(call("group_decay_propagate", A, w, as_t(H.node_group), as_t(H.node_chunk),
                             as_t(H.group_indptr), as_t(H.group_nodes, torch.int32),
                             as_t(H.group_alpha(), torch.float32), device="cpu"))
    a = torch.stack(channels).mean(0)
    log_group = as_t(np.log1p(np.asarray(H.group_size)[np.asarray(H.node_group)]), torch.float32)
    I = torch.zeros((len(Q), H.n_chunks), dtype=torch.float64)
    I.index_add_(1, as_t(H.node_chunk), (a * log_group).to(torch.float64))
    return normalise_rows(I.numpy())


def _reference_scores(pipe, batch) -> np.ndarray:
    from hopgraph.engine.components.hybrid_ranking import hybrid_ranking
    from hopgraph.engine.pipelines.stitch.walk import HYBRID_DEPTH, SUPPORT_RTOL, normalise_max, normalise_rows
    from hopgraph.kernels import call

    n = len(pipe.X)
    if pipe.search_defaults.relevance == "dense":
        rel = np.maximum(batch.cosine(), 0.0)
    else:
        ids, sc = hybrid_ranking(batch, HYBRID_DEPTH, depth=HYBRID_DEPTH)
        rel = np.zeros((len(batch), n), np.float32)
        rows = np.broadcast_to(np.arange(len(batch))[:, None], ids.shape)
        rel[rows[ids >= 0], ids[ids >= 0]] = sc[ids >= 0]
    batch.mask_prior(rel)
    p = _reference_prior(pipe, batch)
    if pipe.search_defaults.prior_mix > 0:
        r = np.zeros_like(p)
        top = np.argsort(-rel, axis=1, kind="stable")[:, :pipe.search_defaults.n_seeds]
        np.put_along_axis(r, top, np.take_along_axis(rel, top, axis=1), axis=1)
        p = (1 - pipe.search_defaults.prior_mix) * p + pipe.search_defaults.prior_mix * normalise_rows(r)
    if batch.allowed is not None:
        p = np.where(batch.allowed[None, :], p, 0.0)
        p = p / p.sum(1, keepdims=True)
    region = (p > 0) & (p >= SUPPORT_RTOL * p.max(1, keepdims=True))
    P = pipe.transition.to_scipy()
    adj = ((P + P.T) != 0).astype(np.float32)
    for _ in range(pipe.search_defaults.region_hops):
        region = region | (np.asarray(adj @ region.T.astype(np.float32)).T > 0)
    pi, _ = call("batched_ppr", pipe.transition, p, d=pipe.search_defaults.damping, tol=pipe.search_defaults.tol, max_iter=pipe.search_defaults.max_iter, region=region,
                 device="cpu")
    pi = pi.numpy()
    return ((1 - pipe.search_defaults.balance) * normalise_max(pi) + pipe.search_defaults.balance * normalise_max(rel)).astype(np.float32)


@pytest.mark.parametrize("overrides", [{}, {"region_hops": 0}, {"region_hops": 2}, {"relevance": "dense"},
                                       {"spatial": False}, {"temporal": False},
                                       {"delta_mode": "absolute", "delta": 0.3, "prior_mix": 0.0}])
def test_stitch_equals_dense_reference(demo_index, overrides):
    """With every description text matched (``match_k`` ≥ the texts: the SPEC's step 1 over all
    states), the sparse search ranks as the dense reference; scores within 1e-5."""
    comp = demo_index.components
    qs = _questions()
    Q = demo_index.embed_queries(qs)
    # the reference is the ranking before the title bridge (tests/engine/pipelines/test_title_bridge.py checks that step)
    pipe = demo_index.pipeline("stitch").with_search_defaults(description_depth=10**6, bridge=0.0, **overrides)
    n = len(comp.X)
    for allowed in (None, np.arange(n) % 4 != 1):
        batch = comp.batch(Q, qs, allowed)
        ref = batch.mask_scores(_reference_scores(pipe, batch))
        ref_ids, ref_scores = topk_rows(ref, 8)
        ids, scores = pipe.search(Q, 8, qs, allowed=allowed)
        np.testing.assert_array_equal(ids, ref_ids)
        np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-5)


def test_stitch_prior_equals_dense_reference(demo_index):
    comp = demo_index.components
    qs = _questions()
    Q = demo_index.embed_queries(qs)
    for overrides in ({}, {"delta_mode": "absolute", "delta": 0.2}, {"delta_mode": "absolute", "delta": 0.99}):
        pipe = demo_index.pipeline("stitch").with_search_defaults(description_depth=10**6, **overrides)
        batch = comp.batch(Q, qs)
        np.testing.assert_allclose(pipe.prior(batch), _reference_prior(pipe, batch), rtol=1e-5, atol=1e-9)


def test_local_walk_equals_full_walk_on_the_region(demo_index, rng):
    """The sink-closed sub-graph (``local_transition``) walks as the kernel on the full P with the
    region as mask: mass leaving the region dropped, dangling chunks keeping theirs."""
    from hopgraph.engine.pipelines.stitch.local_rows import LocalRows
    from hopgraph.engine.pipelines.stitch.walk import SUPPORT_RTOL
    from hopgraph.kernels import call

    pipe = demo_index.pipeline("stitch").with_search_defaults(region_hops=0)
    n = pipe.hypergraph_.n_chunks
    p = np.where(rng.random((6, n)) < 0.15, rng.random((6, n)), 0.0)
    p[0] = 0.0
    p[0, :3] = 1.0
    p /= np.maximum(p.sum(1, keepdims=True), 1e-30)
    p[5] = 0.0  # an empty row walks nowhere
    pi = pipe.walk(LocalRows.full(p).on(np.flatnonzero(p.any(0)))).dense()
    region = (p > 0) & (p >= SUPPORT_RTOL * p.max(1, keepdims=True))
    ref, _ = call("batched_ppr", pipe.transition, p, d=pipe.search_defaults.damping, tol=pipe.search_defaults.tol, region=region, device="cpu")
    np.testing.assert_allclose(pi, ref.numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ["stitch", "ppr_binary", "hybrid", "dmar"])
def test_filters_give_k_allowed_results(demo_index, name):
    comp = demo_index.components
    qs = _questions()
    Q = demo_index.embed_queries(qs)
    n = len(comp.X)
    pipe = demo_index.pipeline(name)
    for n_pass, k in ((5, 5), (n // 2, 8), (3, 5)):
        allowed = np.zeros(n, bool)
        allowed[np.random.default_rng(n_pass).choice(n, n_pass, replace=False)] = True
        ids, scores = pipe.search(Q, k, qs, allowed=allowed)
        got = ids >= 0
        assert allowed[ids[got]].all()
        if name != "hybrid" and name != "dmar":  # graph pipelines rank every allowed passage
            assert (got.sum(1) == min(k, n_pass)).all(), (name, n_pass, k, got.sum(1))
        for row in ids:
            assert len(set(row[row >= 0].tolist())) == int((row >= 0).sum())


def _generated_corpus(n: int):
    """``n`` short passages: passage i names the entities of its block of 4 and of the next
    block, so a name links about 8 passages (a local graph, as real corpora are)."""
    from hopgraph.engine.components.corpus import Corpus

    names = [f"Kalo{i} Miran{i}" for i in range(n // 4)]
    recs = [{"id": f"p{i}", "title": names[i // 4],
             "text": f"{names[i // 4]} met {names[(i // 4 + 1) % len(names)]} at the old harbour."}
            for i in range(n)]
    return Corpus.from_records(recs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stitch", "ppr_binary"])
def test_graph_search_allocates_nothing_of_size_batch_by_n(hashing_embedder, name):
    """The STITCH / PPRBinary search holds a few candidates and activated chunks per
    question, never a [B, N] array (one [8, 40000] float64 array would be 2.6 MB)."""
    import tracemalloc

    corpus = _generated_corpus(40_000)
    index = Index.build(corpus, embedder=hashing_embedder, pipelines=[name], progress=False)
    qs = [f"Whom did Kalo{i} Miran{i} meet?" for i in range(0, 4000, 500)]
    Q = index.embed_queries(qs)
    pipe = index.pipeline(name)
    pipe.search(Q, 5, qs)  # query-side caches (text index, column sums) outside the measurement
    B, n = len(qs), len(corpus)
    tracemalloc.start()
    try:
        ids, _ = pipe.search(Q, 5, qs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (ids >= 0).all()
    # the dense search held several [B, N] float64 arrays (relevance, prior, region, π, scores)
    assert peak < B * n * 8, f"search peak {peak / 1e6:.2f} MB"


def test_stitch_text_ivf_saved_and_loaded(demo_corpus, hashing_embedder, tmp_path, monkeypatch):
    """With the text index searching approximately (``HOPGRAPH_DENSE=ann``), ``save`` stores its IVF
    and a loaded index answers without training one (no cold-start k-means), with the same results."""
    from hopgraph.engine.components.dense import DENSE_MODE_ENV

    monkeypatch.setenv(DENSE_MODE_ENV, "ann")
    index = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["stitch"], progress=False)
    qs = _questions()
    before = index.search_arrays(qs, pipeline="stitch", k=5)
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx", embedder=hashing_embedder, progress=False)
    pipe = loaded.pipelines["stitch"]
    assert pipe._text_index is not None and pipe._text_index.method == "ann"
    assert pipe._text_index._ivf.bits == 4     # TEXT_CODE_BITS: the text codes are half-width
    after = loaded.search_arrays(qs, pipeline="stitch", k=5)
    assert pipe.text_index.ivf_builds == []
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[1], before[1], rtol=0, atol=1e-6)
