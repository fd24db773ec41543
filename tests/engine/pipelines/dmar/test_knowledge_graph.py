"""Corpus knowledge graph of DMAR (SPEC §3): nodes, co-occurrence edges, ego subgraphs, linking."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import InputError
from hopgraph.engine.components.extraction import extract
from hopgraph.engine.pipelines.dmar.knowledge_graph import (KnowledgeGraph, build_knowledge_graph, pack_strings, top_per_row,
                                             unpack_strings)


@pytest.fixture(scope="module")
def kg_and_extraction(demo_corpus):
    ex = extract(demo_corpus)
    return build_knowledge_graph(ex, len(demo_corpus), ego_size=4), ex


def test_edges_are_sentence_cooccurrence_counts(kg_and_extraction):
    kg, ex = kg_and_extraction
    assert kg.names == ex.names
    adj = kg.adj.to_scipy()
    assert (adj != adj.T).nnz == 0
    a, b, w = ex.cooccurring_names()
    assert kg.adj.nnz == 2 * len(a)
    np.testing.assert_array_equal(np.asarray(adj[a, b]).ravel(), w)
    ids = kg.name_ids
    # demo passage 0: "Marisol Venn ... comet Venn-Harlow ... Cerro Alto Observatory" (one sentence)
    assert adj[ids["marisol venn"], ids["cerro alto observatory"]] >= 1


def test_ego_subgraphs_capped_heaviest_neighbours(kg_and_extraction):
    kg, _ = kg_and_extraction
    sizes = np.diff(kg.ego.indptr)
    assert sizes.max() <= 4 and sizes.min() >= 1
    ego, adj = kg.ego.to_scipy(), kg.adj.to_scipy()
    for e in range(kg.n_entities):
        row = set(ego[e].indices.tolist())
        assert e in row
        nbrs = adj[e]
        if nbrs.nnz <= 3:
            assert row == {e, *nbrs.indices.tolist()}
        else:
            kept = sorted(row - {e})
            assert np.asarray(nbrs[:, kept].todense()).min() >= np.sort(nbrs.data)[-3]


def test_top_per_row_matches_sorting():
    g = np.random.default_rng(0)
    indptr = np.array([0, 0, 3, 8, 9])
    indices = g.integers(0, 20, 9).astype(np.int32)
    data = g.integers(1, 4, 9).astype(np.float32)
    ptr, idx = top_per_row(indptr, indices, data, 2)
    for r in range(4):
        lo, hi = indptr[r], indptr[r + 1]
        expect = sorted(zip(-data[lo:hi], indices[lo:hi]))[:2]
        assert idx[ptr[r]:ptr[r + 1]].tolist() == [int(i) for _, i in expect]


def test_passages_link_their_entities_and_queries_by_name(kg_and_extraction, demo_corpus):
    kg, _ = kg_and_extraction
    ids = kg.name_ids
    assert ids["marisol venn"] in kg.passage_entities.to_scipy()[0].indices
    [linked] = kg.link_queries(["Which observatory did Marisol Venn work at?"])
    names = {kg.names[i] for i in linked}
    assert "marisol venn" in names and "venn" not in names  # sub-match of a longer match dropped
    assert kg.link_queries(["nothing known here"])[0].size == 0


def test_external_edge_list_and_errors(tmp_path, demo_corpus):
    ex = extract(demo_corpus)
    edges = tmp_path / "edges.tsv"
    edges.write_text("# comment\nMarisol Venn\tfriend_of\tZed Unknown\nMarisol Venn\tknows\tPeter Harlow\n")
    kg = build_knowledge_graph(ex, len(demo_corpus), edge_list=edges)
    ids = kg.name_ids
    assert "zed unknown" in ids and kg.df[ids["zed unknown"]] == 0
    assert kg.adj.to_scipy()[ids["marisol venn"], ids["zed unknown"]] == 1
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\nonly two\tfields\n")
    with pytest.raises(InputError, match="bad.tsv line 2"):
        build_knowledge_graph(ex, len(demo_corpus), edge_list=bad)
    with pytest.raises(InputError, match="ego_size"):
        build_knowledge_graph(ex, len(demo_corpus), ego_size=0)
    with pytest.raises(InputError, match="passages"):
        build_knowledge_graph(ex, len(demo_corpus) + 1)


def test_arrays_round_trip(kg_and_extraction, demo_corpus):
    kg, _ = kg_and_extraction
    back = KnowledgeGraph.from_arrays(kg.arrays(), len(demo_corpus))
    assert back.names == kg.names and back.max_query_entities == kg.max_query_entities
    for m in ("adj", "passage_entities", "ego"):
        a, b = getattr(back, m), getattr(kg, m)
        assert a.n_cols == b.n_cols and all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3])), m
    assert unpack_strings(*pack_strings(["", "é", "ab"])) == ["", "é", "ab"]


def test_capitalised_linking_ignores_common_words(kg_and_extraction):
    kg, _ = kg_and_extraction
    ids = kg.name_ids
    assert "bristol" in ids
    text = "Which bristol bridge did the engineer from Galway design?"
    names = lambda mode: {kg.names[i] for i in kg.link_queries([text], mode)[0]}  # noqa: E731
    assert names("ngram") >= {"bristol", "galway"}
    assert "galway" in names("capitalised") and "bristol" not in names("capitalised")
    with pytest.raises(InputError, match="linking mode"):
        kg.link_queries([text], "fuzzy")


def test_damaged_graph_arrays_are_refused(kg_and_extraction, demo_corpus):
    kg, _ = kg_and_extraction
    n = len(demo_corpus)

    def load(**changes):
        arrays = {**kg.arrays(), **changes}
        return KnowledgeGraph.from_arrays(arrays, n, "kg")

    data = kg.adj.data.copy()
    data[0] += 1.0  # one direction of an edge heavier than the other
    with pytest.raises(InputError, match="kg_adj_\\*: the co-occurrence graph must be symmetric"):
        load(kg_adj_data=data)
    ego_indices = kg.ego.indices.copy()
    row0 = slice(kg.ego.indptr[0], kg.ego.indptr[1])
    ego_indices[row0] = np.where(ego_indices[row0] == 0, (0 + 1) % kg.n_entities, ego_indices[row0])
    with pytest.raises(InputError, match="every ego subgraph must hold its own entity"):
        load(kg_ego_indices=ego_indices)
    with pytest.raises(InputError, match="kg_pe_\\*: indices must hold column ids"):
        load(kg_pe_indices=np.full_like(kg.passage_entities.indices, kg.n_entities))
