"""Topic hypergraph arrays (SPEC §2 "Index"): CSR both ways, groups, φ-induced chunk graph,
shared text embeddings, save/load memory-mapped."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import HashingEmbedder
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.errors import InputError
from hopgraph.engine.components.extraction import extract
from hopgraph.engine.pipelines.stitch.hypergraph import (TopicHypergraph, as_text_embeddings, build_hypergraph, chunk_links,
                                        embed_texts, pack_strings, text_similarity, unpack_strings)


def corpus() -> Corpus:
    return Corpus.from_records([
        {"id": "0", "title": "Alpha Lab", "text": "Alpha Lab was founded by Ada Stone in 1950. It is in Bern."},
        {"id": "1", "title": "Ada Stone", "text": "Ada Stone was a chemist from Bern. She founded Alpha Lab."},
        {"id": "2", "title": "Bern", "text": "Bern is a city. Many people live there."},
        {"id": "3", "title": "", "text": "nothing named here"},
    ])


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(32)
        self.seen: list[str] = []

    def encode(self, texts, batch_size=64, progress=False):
        self.seen += list(texts)
        return super().encode(texts, batch_size, progress)


@pytest.fixture(scope="module")
def built():
    c = corpus()
    emb = CountingEmbedder()
    X = emb.encode(c.embedding_texts())
    emb.seen.clear()
    ex = extract(c)
    H = build_hypergraph(ex, embed_texts(ex.texts, c, X, emb), max_group_chunks=64)
    return c, X, emb, ex, H


def test_texts_embedded_once_and_title_states_reuse_chunk_rows(built):
    c, X, emb, ex, H = built
    assert len(emb.seen) == len(set(emb.seen))
    assert not set(emb.seen) & set(c.embedding_texts())
    names = H.names()
    v = np.flatnonzero((H.node_chunk == 1) & (H.node_group == names.index("ada stone")))[0]
    np.testing.assert_array_equal(H.text_emb[H.node_text[v]], X[1].astype(np.float16))


def test_incidence_csr_both_ways(built):
    _, _, _, ex, H = built
    pairs_edge = {(e, int(v)) for e in range(H.n_edges) for v in H.edge_nodes[H.edge_indptr[e]:H.edge_indptr[e + 1]]}
    inc_edge = np.repeat(np.arange(H.n_edges), np.diff(H.edge_indptr))  # the edge of each incidence
    pairs_node = {(int(inc_edge[i]), v) for v in range(H.n_nodes)
                  for i in H.node_incidence[H.node_indptr[v]:H.node_indptr[v + 1]]}
    assert pairs_edge == pairs_node == set(zip(ex.mention_topic.tolist(), ex.mention_node.tolist()))
    np.testing.assert_array_equal(H.edge_nodes[H.node_incidence], np.repeat(np.arange(H.n_nodes),
                                                                           np.diff(H.node_indptr)))


def test_groups_chunks_and_sizes(built):
    _, _, _, _, H = built
    assert H.group_size.sum() == H.n_nodes and (H.group_size >= 1).all()
    for g in range(H.n_groups):
        members = H.group_nodes[H.group_indptr[g]:H.group_indptr[g + 1]]
        assert (H.node_group[members] == g).all() and len(members) == H.group_size[g]
    assert (np.diff(H.node_chunk) >= 0).all()  # states sorted by chunk; t(c) = c
    np.testing.assert_allclose(H.group_alpha().mean(), 1.0, rtol=1e-6)


def test_chunk_graph_links_chunks_sharing_a_name(built):
    _, _, _, _, H = built
    P = H.transition().to_dense()
    col = P.sum(0)
    assert np.allclose(col[col > 0], 1.0)
    # 0, 1, 2 share names (alpha lab, ada stone, bern); 3 holds none -> dangling
    assert col[3] == 0 and (col[:3] > 0).all()
    assert P[1, 0] > 0 and P[0, 1] > 0 and P[2, 0] > 0 and P[0, 0] == 0


def test_max_group_chunks_drops_hub_names(built):
    _, _, _, ex, _ = built
    H2 = build_hypergraph(ex, np.ones((len(ex.texts), 4), np.float32) / 2, max_group_chunks=2)
    big = [g for g in range(H2.n_groups) if H2.group_size[g] > 2]
    assert big  # "bern" is in three chunks
    assert H2.transition().nnz < build_hypergraph(ex, np.ones((len(ex.texts), 4), np.float32) / 2).transition().nnz
    with pytest.raises(InputError, match="max_group_chunks"):
        build_hypergraph(ex, np.ones((len(ex.texts), 4), np.float32) / 2, max_group_chunks=1)
    with pytest.raises(InputError, match="text embeddings"):
        build_hypergraph(ex, np.ones((2, 4), np.float32))


def test_chunk_links_bruteforce():
    """W[c', c] = Σ over kept groups holding c and c' (c ≠ c') of 1 / (|g| − 1), as listing the pairs."""
    indptr = np.array([0, 1, 3, 6, 10, 12])
    chunks = np.array([0, 1, 2, 2, 3, 4, 0, 1, 2, 3, 1, 2])  # group 3 (size 4) is above max_size
    W = chunk_links(indptr, chunks, 6, max_size=3).to_scipy().toarray()  # float64 weights
    expect = np.zeros((6, 6))
    for lo, hi in zip(indptr[:-1], indptr[1:]):
        if 2 <= hi - lo <= 3:
            for x in chunks[lo:hi]:
                for y in chunks[lo:hi]:
                    if x != y:
                        expect[y, x] += 1.0 / (hi - lo - 1)
    np.testing.assert_allclose(W, expect, rtol=0, atol=1e-15)
    assert W[1, 2] == 2.0  # linked by two groups: weights summed
    assert chunk_links(np.array([0, 1]), np.array([3]), 5, max_size=3).nnz == 0


def test_chunk_graph_pattern_is_symmetric():
    """STITCH's region hops use P's own pattern as the symmetric adjacency (``STITCH._adjacency``):
    P + Pᵀ must have P's pattern, on random extractions with hub names dropped."""
    rng = np.random.default_rng(3)
    for trial in range(5):
        n = int(rng.integers(20, 200))
        syllables = "ka lo mi ra be ta ru ne vi en".split()
        words = [(syllables[i % 10] + syllables[i // 10 % 10]).capitalize() + " " + syllables[i // 100 % 10].upper()
                 for i in rng.choice(1000, n // 2, replace=False)]
        corpus = Corpus([f"d{i}" for i in range(n)], [""] * n,
                        [". ".join(f"{w} met." for w in rng.choice(words, int(rng.integers(1, 6)))) for _ in range(n)])
        ex = extract(corpus)
        H = build_hypergraph(ex, np.ones((len(ex.texts), 4), np.float32) / 2, max_group_chunks=int(rng.integers(4, 30)))
        A = (H.transition().to_scipy() != 0).astype(np.int8)
        assert A.nnz > 0 and (A != A.T).nnz == 0
        assert A.diagonal().sum() == 0


def test_text_embeddings_float16_and_similarity():
    rng = np.random.default_rng(0)
    E = rng.standard_normal((70_000, 8)).astype(np.float32)  # above one TEXT_BLOCK_ROWS block
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    T = as_text_embeddings(E)
    assert T.dtype == np.float16 and as_text_embeddings(T) is T
    np.testing.assert_allclose(T.astype(np.float32), E, atol=1e-3)
    Q = E[:3]
    np.testing.assert_allclose(text_similarity(Q, T), Q @ T.astype(np.float32).T, atol=1e-6)
    np.testing.assert_array_equal(text_similarity(Q, E), Q @ E.T)  # an older index's float32 rows
    with pytest.raises(InputError, match="2-D"):
        as_text_embeddings(E[0])


def test_strings_roundtrip():
    s = ["", "abc", "Zürich ✓", "x y"]
    assert unpack_strings(*pack_strings(s)) == s
    assert unpack_strings(*pack_strings([])) == []


def test_save_load_memory_mapped(built, tmp_path):
    _, _, _, _, H = built
    H.save(tmp_path / "h")
    L = TopicHypergraph.load(tmp_path / "h")
    assert isinstance(L.text_emb, np.memmap) and L.n_chunks == H.n_chunks
    assert L.names() == H.names()
    assert (L.transition().to_scipy() != H.transition().to_scipy()).nnz == 0
