"""STITCH and PPRBinary pipelines (SPEC §2): fit/search, ablations, save/load, façade."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph import Index
from hopgraph.engine.errors import InputError
from hopgraph.engine.pipelines import pipeline_class
from hopgraph.engine.pipelines.stitch.local_rows import LocalRows
from hopgraph.engine.pipelines.stitch import STITCH
from hopgraph.engine.pipelines.stitch.walk import normalise_rows, top_k_distribution
from hopgraph.kernels import call

QUESTIONS = ["Which engineer designed the bridge in the home city of the amateur astronomer Peter Harlow?",
             "Who founded the prize won by the novel about sisters running a lighthouse?"]


@pytest.fixture(scope="module")
def fitted(demo_corpus, hashing_embedder):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    Q = hashing_embedder.encode(QUESTIONS)
    pipe = STITCH(settings={"device": "cpu"}).fit(X, demo_corpus, hashing_embedder)
    return X, Q, pipe


def test_registered_and_exported():
    import hopgraph

    assert pipeline_class("stitch") is STITCH is hopgraph.STITCH
    assert pipeline_class("ppr_binary").name == "ppr_binary"


def test_search_shapes_clamping_and_determinism(fitted):
    X, Q, pipe = fitted
    ids, scores = pipe.search(Q, k=5, query_texts=QUESTIONS)
    assert ids.shape == (2, 5) and ids.dtype == np.int64 and scores.dtype == np.float32
    assert (np.diff(scores, axis=1) <= 0).all() and (ids >= 0).all()
    ids2, _ = pipe.search(Q, k=5, query_texts=QUESTIONS)
    assert np.array_equal(ids, ids2)
    big, big_s = pipe.search(Q[:1], k=len(X) + 3, query_texts=QUESTIONS[:1])  # k clamped to the passages
    assert big.shape == big_s.shape == (1, len(X)) and sorted(big[0].tolist()) == list(range(len(X)))
    e_ids, _ = pipe.search(np.zeros((0, X.shape[1]), np.float32), k=3, query_texts=[])
    assert e_ids.shape == (0, 3)


def test_prior_is_a_distribution_from_activated_states(fitted):
    X, Q, pipe = fitted
    rel = pipe.relevance_rows(pipe.components.batch(Q, QUESTIONS))
    p = pipe.prior(pipe.components.batch(Q, QUESTIONS), rel)
    np.testing.assert_allclose(p.sum(1), 1.0)
    # nothing passes an absolute δ of 0.99 -> uniform prior (SPEC §2.5)
    off = pipe.with_search_defaults(delta_mode="absolute", delta=0.99)
    np.testing.assert_allclose(off.prior(off.components.batch(Q, QUESTIONS), rel), 1.0 / len(X))


def test_prior_matches_manual_formula_without_channels(fitted):
    X, Q, pipe = fitted
    v = pipe.with_search_defaults(spatial=False, temporal=False, description_depth=10**6)  # every text matched: the SPEC's rule
    H = v.hypergraph_
    sim = Q @ np.asarray(H.text_emb).T
    node_sim = sim[:, H.node_text]
    thr = v.search_defaults.delta * node_sim.max(1, keepdims=True)
    A = np.where(node_sim >= thr, node_sim, 0)
    I = np.zeros((len(Q), H.n_chunks))
    for n in range(H.n_nodes):
        I[:, H.node_chunk[n]] += A[:, n] * np.log1p(H.group_size[H.node_group[n]])
    np.testing.assert_allclose(v.prior(v.components.batch(Q, QUESTIONS), None), normalise_rows(I), rtol=1e-5, atol=1e-9)


def test_ablations_change_scores_and_ppr_matches_kernel(fitted):
    X, Q, pipe = fitted
    base = pipe.scores(Q, QUESTIONS)
    for overrides in STITCH.ablations.values():
        if not all(STITCH.SearchParams.accepts(name) for name in overrides):
            with pytest.raises(ValueError, match="refit"):
                pipe.with_search_defaults(**overrides)
            continue
        s = pipe.with_search_defaults(**overrides).scores(Q, QUESTIONS)
        assert s.shape == base.shape and np.isfinite(s).all()
    assert not np.allclose(pipe.with_search_defaults(ppr=False).scores(Q, QUESTIONS), base)
    assert not np.allclose(pipe.with_search_defaults(spatial=False, temporal=False).scores(Q, QUESTIONS), base)
    # with balance 0, no mixing and no localisation the ranking is the kernel's PPR of the prior
    v = pipe.with_search_defaults(balance=0.0, prior_mix=0.0, localise=False)
    batch = v.components.batch(Q, QUESTIONS)
    p = v.prior(batch)
    pi, _ = call("batched_ppr", v.transition, torch.from_numpy(p), d=v.search_defaults.damping, tol=v.search_defaults.tol, device="cpu")
    pi = pi.numpy()
    np.testing.assert_allclose(v.scores(Q, QUESTIONS), pi / pi.max(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_region_contains_support_and_neighbours(fitted):
    _, _, pipe = fitted
    p = np.zeros((1, pipe.hypergraph_.n_chunks))
    p[0, 0] = 1.0
    reg = pipe.region(LocalRows.full(p)).dense()  # default: one hop
    P = pipe.transition.to_dense()
    expect = (P[:, 0] > 0) | (P[0, :] > 0)
    expect[0] = True
    assert np.array_equal(reg[0], expect)
    assert np.array_equal(pipe.with_search_defaults(region_hops=0).region(LocalRows.full(p)).dense(), p > 0)


def test_region_support_ignores_float_noise(fitted):
    """A prior entry of float-noise size (1e-12 of the row's mass, which BLAS rounding
    creates or not depending on the batch) neither joins the region nor brings its neighbours."""
    from hopgraph.engine.pipelines.stitch.walk import SUPPORT_RTOL

    _, _, pipe = fitted
    n = pipe.hypergraph_.n_chunks
    p = np.zeros((2, n))
    p[:, 0] = 1.0
    p[1, n - 1] = 1e-12
    support, one_hop = pipe.with_search_defaults(region_hops=0), pipe.with_search_defaults(region_hops=1)
    reg = lambda v, p: v.region(LocalRows.full(p)).dense()  # noqa: E731
    assert np.array_equal(reg(support, p)[1], reg(support, p)[0])
    assert np.array_equal(reg(one_hop, p)[1], reg(one_hop, p)[0])
    p[1, n - 1] = 10 * SUPPORT_RTOL  # a real (small) prior mass stays in
    assert reg(support, p)[1, n - 1] and reg(support, p)[1].sum() == 2


def test_bad_parameters_named(fitted):
    with pytest.raises(InputError, match="delta_mode"):
        STITCH(delta_mode="sometimes")
    with pytest.raises(InputError, match="parameter 'delta'"):
        STITCH(delta=1.5)
    with pytest.raises(InputError, match="relevance"):
        fitted[2].with_search_defaults(relevance="magic")
    with pytest.raises(InputError, match="parameter .d."):
        STITCH(damping=1.0)
    with pytest.raises(InputError, match="query texts"):
        fitted[2].search(fitted[1], 3)


def test_top_k_distribution():
    rel = np.array([[0.1, 0.5, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out = top_k_distribution(rel, 2)
    np.testing.assert_allclose(out[0], [0, 0.5 / 0.7, 0.2 / 0.7, 0])
    np.testing.assert_allclose(out[1], 0.25)


def test_index_facade_save_load_and_binary_baseline(demo_corpus, hashing_embedder, tmp_path):
    index = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=("stitch", "ppr_binary"),
                        device="cpu", progress=False)
    before = index.search_arrays(QUESTIONS, pipeline="stitch", k=4)
    binary = index.search_arrays(QUESTIONS, pipeline="ppr_binary", k=4)
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx", embedder=hashing_embedder, device="cpu", progress=False)
    assert isinstance(loaded.pipelines["stitch"].hypergraph_.graph_indices, np.memmap)
    for name, ref in (("stitch", before), ("ppr_binary", binary)):
        ids, scores = loaded.search_arrays(QUESTIONS, pipeline=name, k=4)
        assert np.array_equal(ids, ref[0])
        np.testing.assert_allclose(scores, ref[1], rtol=1e-5)
    # the binary prior puts mass exactly on chunks holding a name the question mentions
    pipe = loaded.pipelines["ppr_binary"]
    p = pipe.prior(pipe.components.batch(hashing_embedder.encode(["Peter Harlow"]), ["Peter Harlow"]), None)
    H = pipe.hypergraph_
    g = H.names().index("peter harlow")
    chunks = sorted(set(H.node_chunk[H.node_group == g].tolist()))
    assert sorted(np.flatnonzero(p[0]).tolist()) == chunks


def test_index_option_variant_refits(demo_corpus, hashing_embedder):
    index = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=("stitch",), device="cpu", progress=False)
    base = index.pipeline("stitch")
    no_titles = index.pipeline("stitch", title_entities=False)
    assert no_titles is not base and no_titles.hypergraph_.n_nodes < base.hypergraph_.n_nodes
    ids, _ = index.search_arrays(QUESTIONS, pipeline="stitch", k=3, title_entities=False)
    assert ids.shape == (2, 3)


@pytest.mark.parametrize("B,n,m", [(3, 10, 0), (4, 50, 30), (5, 40, 600), (2, 7, 200)])
def test_union_entries_sorted_and_bitmap_agree(monkeypatch, B, n, m):
    """The region's distinct (row, column) pairs, ordered by row then column, are the same from
    sorted keys and from the bitmap (dense regions), duplicates within and across the lists included."""
    import importlib

    stitch = importlib.import_module("hopgraph.engine.pipelines.stitch.walk")
    rng = np.random.default_rng(B * n + m)
    qs = tuple(rng.integers(0, B, m // 2 + k) for k in range(2))
    cs = tuple(rng.integers(0, n, m // 2 + k) for k in range(2))
    want = sorted({(int(q), int(c)) for Q, C in zip(qs, cs) for q, c in zip(Q, C)})
    for share in (float("inf"), 0.0):  # never / always the bitmap
        monkeypatch.setattr(stitch, "DENSE_ENTRIES_SHARE", share)
        rows, cols = stitch.union_entries(qs, cs, B, n)
        assert rows.dtype == cols.dtype == np.int64
        assert list(zip(rows.tolist(), cols.tolist())) == want
