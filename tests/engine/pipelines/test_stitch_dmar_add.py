"""Live indexes: STITCH / ppr_binary and DMAR updated in place by ``Index.add``
(SPEC §2 "Index", SPEC §3 step 2) against fits from scratch of the grown corpus."""
from __future__ import annotations

import copy
from dataclasses import fields

import numpy as np
import pytest
import torch

from hopgraph import HashingEmbedder, Index
from hopgraph.engine.pipelines.dmar import gnn
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.pipelines.dmar.gnn import encode_all, entity_features
from hopgraph.engine.pipelines.dmar import pipeline as dmar_module

QUESTIONS = ["Which engineer designed the bridge in the home city of the amateur astronomer Peter Harlow?",
             "Who founded the prize won by the novel about sisters running a lighthouse?",
             "Who is the rector of the university that operates the observatory where comet Venn-Harlow was "
             "discovered?", "Which company did Linda Faraday found after Purdue?", "Orbis Computing founder"]
#: the demo corpus split 24 + 6: the added passages bring no lower-case word that opens an old
#: sentence as a one-word span, so the extension equals a fresh extraction (test_live_extraction)
SPLIT = 24


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, remembering every text it embeds."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.seen: list[str] = []

    def encode(self, texts, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        self.seen += list(texts)
        return super().encode(texts, batch_size, progress)


def same_hypergraph(a, b) -> None:
    for f in fields(a):
        assert np.array_equal(np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name))), f.name


def same_ids(a: Index, b: Index, pipeline: str, questions=QUESTIONS, k: int = 5) -> None:
    ra, rb = a.search(questions, pipeline=pipeline, k=k), b.search(questions, pipeline=pipeline, k=k)
    assert [[h.id for h in r] for r in ra] == [[h.id for h in r] for r in rb]


def part(corpus: Corpus, lo: int, hi: int) -> Corpus:
    return corpus.take(np.arange(lo, hi))


@pytest.fixture(scope="module")
def stitch_pair(demo_corpus):
    embedder = CountingEmbedder(64)
    grown = Index.build(part(demo_corpus, 0, SPLIT), embedder=embedder, pipelines=["stitch", "ppr_binary"],
                        progress=False)
    old_emb = np.array(grown.pipelines["stitch"].hypergraph_.text_emb)
    embedder.seen = []
    grown.add(part(demo_corpus, SPLIT, len(demo_corpus)))
    fresh = Index.build(demo_corpus, embedder=HashingEmbedder(64), pipelines=["stitch", "ppr_binary"],
                        progress=False)
    return grown, fresh, old_emb, list(embedder.seen)


@pytest.mark.parametrize("pipeline", ["stitch", "ppr_binary"])
def test_stitch_add_equals_a_fresh_fit(stitch_pair, pipeline):
    grown, fresh, _, _ = stitch_pair
    same_hypergraph(grown.pipelines[pipeline].hypergraph_, fresh.pipelines[pipeline].hypergraph_)
    same_ids(grown, fresh, pipeline)
    for variant in ({"localise": False}, {"ppr": False}):
        assert np.array_equal(grown.pipelines[pipeline].with_search_defaults(**variant).search(
            fresh.embedder.encode(QUESTIONS), 5, QUESTIONS)[0], fresh.pipelines[pipeline].with_search_defaults(**variant).search(
            fresh.embedder.encode(QUESTIONS), 5, QUESTIONS)[0])


def test_stitch_add_embeds_only_new_texts(stitch_pair, demo_corpus):
    grown, _, old_emb, seen = stitch_pair
    H = grown.pipelines["stitch"].hypergraph_
    new_emb_texts = demo_corpus.embedding_texts(SPLIT)
    texts = grown.components.extraction().texts
    assert np.array_equal(np.asarray(H.text_emb)[:len(old_emb)], old_emb)  # old rows kept as they were
    passages = set(demo_corpus.embedding_texts())
    # the add embeds the new passages, then the new texts except those equal to a passage's text (rows of X)
    assert seen == new_emb_texts + [t for t in texts[len(old_emb):] if t not in passages]
    assert len(seen) < len(new_emb_texts) + len(texts)


def test_stitch_caches_are_reset(demo_corpus):
    index = Index.build(part(demo_corpus, 0, SPLIT), embedder=HashingEmbedder(64), pipelines=["stitch"],
                        progress=False)
    index.search(QUESTIONS, pipeline="stitch")  # fills the transition / tensor / adjacency caches
    index.add(part(demo_corpus, SPLIT, len(demo_corpus)))
    pipe = index.pipelines["stitch"]
    assert pipe.transition.n_rows == len(demo_corpus)
    hits = index.search(QUESTIONS, pipeline="stitch", k=len(demo_corpus))
    assert all(len(r) == len(demo_corpus) for r in hits)


def test_stitch_add_before_and_after_compact():
    """A new passage writing ``traditional`` in lower case: the old state ``Traditional`` stays until
    ``compact()`` (the extraction's documented approximation); then the index equals a fresh one."""
    old = [{"id": "a", "title": "Kora Town", "text": "Traditional music is played in Kora Town. It has a port."},
           {"id": "b", "title": "Lena Ward", "text": "Lena Ward was born in Kora Town in 1950."}]
    new = [{"id": "c", "title": "Mira Song", "text": "Mira Song sings traditional songs of Kora Town."}]
    embedder = HashingEmbedder(64)
    index = Index.build(old, embedder=embedder, pipelines=["stitch", "ppr_binary"], progress=False)
    index.add(new)
    fresh = Index.build(old + new, embedder=embedder, pipelines=["stitch", "ppr_binary"], progress=False)
    for name in ("stitch", "ppr_binary"):
        H, F = index.pipelines[name].hypergraph_, fresh.pipelines[name].hypergraph_
        assert H.n_nodes == F.n_nodes + 1 and "traditional" in H.names() and "traditional" not in F.names()
    index.compact()
    for name in ("stitch", "ppr_binary"):
        same_hypergraph(index.pipelines[name].hypergraph_, fresh.pipelines[name].hypergraph_)
        same_ids(index, fresh, name, ["Who sings traditional songs of Kora Town?", "Lena Ward"], k=3)


def test_stitch_add_after_load(tmp_path, demo_corpus):
    """A saved index (extraction without its cached words, memory-mapped hypergraph) grows the same."""
    embedder = HashingEmbedder(64)
    Index.build(part(demo_corpus, 0, 18), embedder=embedder, pipelines=["stitch", "ppr_binary", "dmar"],
                params={"dmar": {"gnn_steps": 0}}, progress=False).save(tmp_path / "idx")
    index = Index.load(tmp_path / "idx", embedder=embedder, progress=False)
    index.add(part(demo_corpus, 18, SPLIT))
    index.add(part(demo_corpus, SPLIT, len(demo_corpus)))
    fresh = Index.build(demo_corpus, embedder=embedder, pipelines=["stitch", "ppr_binary", "dmar"],
                        params={"dmar": {"gnn_steps": 0}}, progress=False)
    for name in ("stitch", "ppr_binary"):
        same_hypergraph(index.pipelines[name].hypergraph_, fresh.pipelines[name].hypergraph_)
        same_ids(index, fresh, name)
    np.testing.assert_array_equal(index.pipelines["dmar"].subgraph_emb_, fresh.pipelines["dmar"].subgraph_emb_)
    same_ids(index, fresh, "dmar")


# ---------------------------------------------------------------------- DMAR
def same_kg(a, b) -> None:
    aa, bb = a.arrays(), b.arrays()
    assert aa.keys() == bb.keys()
    for k in aa:
        assert np.array_equal(aa[k], bb[k]), k


def encoded_ids(monkeypatch) -> list[np.ndarray]:
    """Record the entity ids DMAR's ``_add`` encodes."""
    calls: list[np.ndarray] = []
    real = gnn.encode_subgraphs

    def spy(encoder, ego, adj, features, ids, *args, **kwargs):
        calls.append(np.asarray(ids))
        return real(encoder, ego, adj, features, ids, *args, **kwargs)

    monkeypatch.setattr(dmar_module, "encode_subgraphs", spy)
    return calls


def test_dmar_add_equals_a_fresh_fit_with_the_same_encoder(demo_corpus, monkeypatch):
    embedder = HashingEmbedder(64)
    params = {"dmar": {"gnn_steps": 5}}
    index = Index.build(part(demo_corpus, 0, SPLIT), embedder=embedder, pipelines=["dmar"], params=params,
                        progress=False)
    pipe = index.pipelines["dmar"]
    weights = {k: v.clone() for k, v in pipe.encoder_.state_dict().items()}
    gate = pipe.gate_
    calls = encoded_ids(monkeypatch)
    index.add(part(demo_corpus, SPLIT, len(demo_corpus)))
    pipe = index.pipelines["dmar"]
    assert pipe.gate_ is gate  # kept
    assert all(torch.equal(v, weights[k]) for k, v in pipe.encoder_.state_dict().items())  # not retrained
    fresh = Index.build(demo_corpus, embedder=embedder, pipelines=["dmar"], params=params, progress=False)
    ref = fresh.pipelines["dmar"]
    same_kg(pipe.knowledge_graph_, ref.knowledge_graph_)
    # the fresh fit trained other weights: give it the added index's encoder and re-encode everything
    ref.encoder_ = copy.deepcopy(pipe.encoder_)
    ref.subgraph_emb_ = encode_all(ref.encoder_, ref.knowledge_graph_.ego, ref.knowledge_graph_.adj, entity_features(ref.knowledge_graph_.passage_entities, ref.X))
    np.testing.assert_allclose(pipe.subgraph_emb_, ref.subgraph_emb_, atol=1e-6)
    same_ids(index, fresh, "dmar")
    # only the changed subgraphs were encoded again, and some were not
    assert len(calls) == 1 and 0 < len(calls[0]) < pipe.knowledge_graph_.n_entities
    # compact() retrains on the grown corpus: a build from scratch
    index.compact()
    fresh = Index.build(demo_corpus, embedder=embedder, pipelines=["dmar"], params=params, progress=False)
    new, ref = index.pipelines["dmar"], fresh.pipelines["dmar"]
    same_kg(new.knowledge_graph_, ref.knowledge_graph_)
    assert all(torch.equal(v, ref.encoder_.state_dict()[k]) for k, v in new.encoder_.state_dict().items())
    np.testing.assert_array_equal(new.subgraph_emb_, ref.subgraph_emb_)
    same_ids(index, fresh, "dmar")


def test_dmar_add_without_training_equals_a_fresh_fit(demo_corpus):
    """``gnn_steps=0``: the encoder is its seeded initialisation in both indexes, so the added
    index equals the fresh one with nothing copied."""
    embedder = HashingEmbedder(64)
    params = {"dmar": {"gnn_steps": 0}}
    for split in (10, SPLIT, len(demo_corpus) - 1):
        index = Index.build(part(demo_corpus, 0, split), embedder=embedder, pipelines=["dmar"], params=params,
                            progress=False)
        index.add(part(demo_corpus, split, len(demo_corpus)))
        fresh = Index.build(demo_corpus, embedder=embedder, pipelines=["dmar"], params=params, progress=False)
        same_kg(index.pipelines["dmar"].knowledge_graph_, fresh.pipelines["dmar"].knowledge_graph_)
        np.testing.assert_array_equal(index.pipelines["dmar"].subgraph_emb_, fresh.pipelines["dmar"].subgraph_emb_)
        same_ids(index, fresh, "dmar")


def test_changed_subgraphs_marks_what_the_encoder_reads():
    """Small graphs grow: an edge weight change alone changes nothing; a node linked by a new
    passage (new features) changes the subgraphs holding it; a new entity and the subgraphs that
    now hold it are marked; a heavier edge that changes a capped ego set, and an edge closing a
    triangle inside an unchanged node set, are marked."""
    import scipy.sparse as sp

    from hopgraph.engine.pipelines.dmar.knowledge_graph import top_per_row
    from hopgraph.engine.sparse import csr_from_scipy

    def graph(edges, E, ego_size=3):
        a, b, w = (np.asarray(x) for x in zip(*edges))
        adj = sp.csr_matrix((np.r_[w, w].astype(np.float32), (np.r_[a, b], np.r_[b, a])), shape=(E, E))
        ptr, idx = top_per_row(adj.indptr.astype(np.int64), adj.indices, adj.data, ego_size - 1)
        rows = np.r_[np.arange(E), np.repeat(np.arange(E), np.diff(ptr))]
        ego = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, np.r_[np.arange(E), idx])), shape=(E, E))
        return csr_from_scipy(ego), csr_from_scipy(adj)

    def links(pairs, N, E):  # (passage, entity) pairs -> passage_entities [N, E]
        p, e = (np.asarray(x) for x in zip(*pairs))
        return csr_from_scipy(sp.csr_matrix((np.ones(len(p), np.float32), (p, e)), shape=(N, E)))

    changed = gnn.changed_subgraphs
    path = [(0, 1, 1), (1, 2, 1), (2, 3, 1)]
    ego0, adj0 = graph(path, 4)
    pe0 = links([(i, i) for i in range(4)], 4, 4)
    ego1, adj1 = graph([(0, 1, 1), (1, 2, 1), (2, 3, 5)], 4)
    same = np.arange(4)
    assert not changed(ego0, adj0, pe0, ego1, adj1, links([(i, i) for i in range(4)], 5, 4), same).any()
    pe1 = links([(i, i) for i in range(4)] + [(4, 3)], 5, 4)  # a new passage links entity 3
    assert changed(ego0, adj0, pe0, ego0, adj0, pe1, same).tolist() == [False, False, True, True]
    # entity 4 inserted at id 2 (old 2, 3 -> 3, 4), linked to old 1 (new 1) only
    ego2, adj2 = graph([(0, 1, 1), (1, 3, 1), (3, 4, 1), (1, 2, 3)], 5)
    old_ids = np.array([0, 1, -1, 2, 3])
    pe2 = links([(0, 0), (1, 1), (2, 3), (3, 4), (4, 2)], 5, 5)
    # 1's capped ego is now {0, 1, 2} (2 is its heaviest neighbour) and new 2 holds {1, 2}; 0's ego
    # {0, 1}, 3's {1, 3, 4} and 4's {3, 4} keep their nodes, features and edges
    assert changed(ego0, adj0, pe0, ego2, adj2, pe2, old_ids).tolist() == [False, True, True, False, False]
    # features and edges unchanged, heavier weights: only the capped ego set of 1 changes
    ego3, adj3 = graph([(0, 1, 2), (1, 2, 1), (1, 3, 1)], 4)
    ego4, adj4 = graph([(0, 1, 2), (1, 2, 1), (1, 3, 5)], 4)
    assert changed(ego3, adj3, pe0, ego4, adj4, pe0, same).tolist() == [False, True, False, False]
    # an edge 0-2 closing the triangle: 1's node set {0, 1, 2} is the same, its edges are not
    ego5, adj5 = graph([(0, 1, 1), (1, 2, 1)], 3)
    ego6, adj6 = graph([(0, 1, 1), (1, 2, 1), (0, 2, 1)], 3)
    pe5 = links([(i, i) for i in range(3)], 3, 3)
    assert (ego5.to_scipy()[1] != ego6.to_scipy()[1]).nnz == 0
    assert changed(ego5, adj5, pe5, ego6, adj6, pe5, np.arange(3)).tolist() == [True, True, True]
