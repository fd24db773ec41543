"""A sharded index searched through its router (shards in this process) returns the single index's ids
and scores for every pipeline, with filters, after adds and deletes through the router, and after
reopening."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hopgraph import Index
from hopgraph.engine.errors import IndexFormatError, InputError
from hopgraph.shards import LocalShards, open_router, owner_of, read_shards, shard_index

from shard_corpus import ALL, QUESTIONS, same_results

NEW = [{"id": f"new-{i}", "title": f"Harbor Bridge {i}", "text": f"The Harbor Bridge {i} over the river was "
        f"designed by Marisol Venn in {1990 + i} for the University of Valparaíso.", "metadata": {"group": i % 3}}
       for i in range(5)]


def sharded(saved_index, tmp_path, n_shards=2):
    single = Index.load(saved_index, progress=False)
    out = shard_index(single, n_shards, tmp_path / "shards")
    calls = LocalShards.open(out)
    return single, open_router(out, calls), calls, out


@pytest.mark.parametrize("n_shards", [2, 3])
def test_every_pipeline_equals_the_single_index(saved_index, tmp_path, n_shards):
    single, router, calls, _ = sharded(saved_index, tmp_path, n_shards)
    for name in ALL:
        same_results(single, router, name)
    assert calls.calls["dense_topk"] > 0 and calls.calls["bm25_topk"] > 0


def test_filters_across_shards(saved_index, tmp_path):
    single, router, _, _ = sharded(saved_index, tmp_path)
    for name in ALL:
        same_results(single, router, name, where={"group": {"$in": [0, 2]}})
        same_results(single, router, name, allowed_ids=[single.corpus.ids[i] for i in range(0, 30, 4)])
    np.testing.assert_array_equal(single.filter_mask(where={"even": True}), router.filter_mask(where={"even": True}))


def test_hits_read_texts_and_metadata_from_the_shards(saved_index, tmp_path):
    single, router, _, _ = sharded(saved_index, tmp_path)
    assert single.search(QUESTIONS, "hybrid", k=4) == router.search(QUESTIONS, "hybrid", k=4)


def test_each_passage_lives_in_exactly_one_shard(saved_index, tmp_path):
    single, router, calls, out = sharded(saved_index, tmp_path, 3)
    held = [list(s.index.corpus.ids) for s in calls.services]
    assert sorted(sum(held, [])) == sorted(single.corpus.ids)
    for s, ids in enumerate(held):
        assert all(owner_of(pid, 3) == s for pid in ids)
    meta = read_shards(out)
    assert [x["passages"] for x in meta["shards"]] == [len(h) for h in held]


def test_writes_through_the_router_equal_the_same_writes_on_the_single_index(saved_index, tmp_path):
    single, router, calls, out = sharded(saved_index, tmp_path)
    E = single.embed_passages(NEW)
    changed = {**NEW[0], "id": single.corpus.ids[5], "text": "Marisol Venn rebuilt the Harbor Bridge."}
    for index in (single, router):
        index.add(NEW, embeddings=E)
        index.add([changed], upsert=True)
        index.delete([single.corpus.ids[1], "new-3"])
    for name in ALL:
        same_results(single, router, name)
    for s in calls.services:  # each write committed in its owner shard only
        assert all(owner_of(pid, 2) == calls.services.index(s) for pid in s.index.corpus.ids)
    reopened = open_router(out, LocalShards.open(out))
    for name in ALL:
        same_results(single, reopened, name)
    assert reopened.n_live == single.n_live
    with pytest.raises(KeyError):
        reopened.passage("new-3")
    assert reopened.passage("new-1") == single.passage("new-1")


def test_the_chunk_graph_and_text_embeddings_live_in_the_shards(saved_index, tmp_path):
    single, router, _, out = sharded(saved_index, tmp_path)
    states = ["node_chunk", "node_group", "node_text", "group_nodes", "edge_text", "edge_nodes", "node_incidence"]
    moved = {"stitch": ["graph_indices", "graph_data", "text_emb", *states],
             "ppr_binary": ["graph_indices", "graph_data", *states]}
    for name, arrays in moved.items():
        held = out / read_shards(out)["router"] / "pipelines" / name / "hypergraph"
        assert not [a for a in arrays if (held / f"{a}.npy").exists()], name
        assert (held / "graph_indptr.npy").is_file() and (held / "graph_column_sums.npy").is_file()
        for part in ("node_columns/values", "edge_text/values", "group_graph/indices", "edge_graph/indices",
                     "node_graph/indices", "text_graph/indices"):
            assert all((out / f"graph-{s:03d}" / "pipelines" / name / "hypergraph" / f"{part}.npy").is_file()
                       for s in range(2)), part
        parts = [out / f"graph-{s:03d}" / "pipelines" / name / "hypergraph" for s in range(2)]
        stored = np.load(saved_index / "seg-000001" / "pipelines" / name / "hypergraph" / "graph_indices.npy")
        assert sum(len(np.load(p / "graph_graph" / "indices.npy")) for p in parts) == len(stored)
        for field in ("graph_indices", "node_group", "edge_nodes"):
            with pytest.raises(InputError, match="held by the shards"):
                np.asarray(getattr(router.pipelines[name].hypergraph_, field))
    texts = [np.load(out / f"graph-{s:03d}" / "pipelines/stitch/hypergraph/text_emb/values.npy") for s in range(2)]
    whole = np.load(saved_index / "seg-000001/pipelines/stitch/hypergraph/text_emb.npy")
    np.testing.assert_array_equal(texts[0], whole[0::2])
    np.testing.assert_array_equal(texts[1], whole[1::2])
    with pytest.raises(InputError, match="held by the shards"):
        np.asarray(router.pipelines["stitch"].hypergraph_.text_emb)
    for name in moved:  # the unlocalised walk gathers P for the call; the results stay the single index's
        same_results(single, router, name, questions=QUESTIONS + ["zzzz qqq"], localise=False)
    E = single.embed_passages(NEW)
    for index in (single, router):
        index.add(NEW, embeddings=E)
    held = out / read_shards(out)["router"] / "pipelines" / "stitch" / "hypergraph"
    changed = np.load(held / "graph_over_rows.npy")  # only the rows the add changed, and the new ones
    assert set(range(len(single.X) - len(NEW), len(single.X))) <= set(changed.tolist()) and len(changed) < len(single.X)
    assert not (held / "graph_indices.npy").exists() and len(np.load(held / "text_emb.tail.npy")) > 0
    # the states' chunks and texts, the hyperedges and incidences: the shards' rows and the appended ones
    assert not [a for a in ("node_chunk", "node_text", "edge_text", "edge_nodes", "node_incidence")
                if (held / f"{a}.npy").exists()]
    in_shards = sum(len(np.load(out / f"graph-{s:03d}/pipelines/stitch/hypergraph/node_columns/values.npy"))
                    for s in range(2))
    assert in_shards + len(np.load(held / "node_columns.tail.npy")) == single.pipelines["stitch"].hypergraph_.n_nodes
    reopened = open_router(out, LocalShards.open(out))
    for name in moved:
        same_results(single, reopened, name, questions=QUESTIONS + ["zzzz qqq"])


def test_text_top_k_from_the_shards_equals_the_exact_search(saved_index, tmp_path):
    from hopgraph.engine.components.dense import DenseIndex

    single, router, calls, _ = sharded(saved_index, tmp_path, 3)
    H, whole = router.pipelines["stitch"].hypergraph_, single.pipelines["stitch"].hypergraph_.text_emb
    index = router.pipelines["stitch"].text_index
    Q = single.embed_queries(QUESTIONS)
    base = H.node_text_mask()
    flipped = np.array([int(np.flatnonzero(base)[3]), int(np.flatnonzero(~base)[0])])
    for mask, flips in ((base, flipped[:0]), (base ^ np.isin(np.arange(len(base)), flipped), flipped),
                        (None, np.flatnonzero(~base))):
        H._text_flips = flips  # as after an add that changed these texts' flags
        for k in (1, 5, len(base) + 3):
            want = DenseIndex(whole).topk(Q, k, mask)
            got = index.topk(Q, k, mask)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_allclose(got[1], want[1], atol=1e-6)


def test_router_never_gathers_every_embedding(saved_index, tmp_path):
    _, router, _, _ = sharded(saved_index, tmp_path)
    with pytest.raises(InputError, match="never gathers all its embeddings"):
        np.asarray(router.X)
    assert router.X[[3, 1]].shape == (2, 64)


def test_dmar_knowledge_graph_rows_and_subgraph_embeddings_live_in_the_shards(saved_index, tmp_path):
    single, router, calls, out = sharded(saved_index, tmp_path)
    held = out / read_shards(out)["router"] / "pipelines" / "dmar"
    files = {p.name for p in held.iterdir()}
    assert {"kg_pe_indptr.npy", "kg_ego_indptr.npy", "kg_pe_rows.json", "kg_ego_rows.json",
            "subgraph_emb.rows.json", "kg_names_blob.npy", "kg_adj_indices.npy", "kg_df.npy"} <= files
    assert not files & {"kg_pe_indices.npy", "kg_ego_indices.npy", "kg_pe_data.npy", "kg_ego_data.npy",
                        "subgraph_emb.npy"}
    kg, Z = single.pipelines["dmar"].knowledge_graph_, np.asarray(single.pipelines["dmar"].subgraph_emb_)
    rows = [0, 0, 0]
    for s in range(2):
        graphs = out / f"graph-{s:03d}" / "pipelines" / "dmar"
        for name in ("kg_pe_graph", "kg_ego_graph"):
            assert (graphs / name / "indices.npy").is_file()
        ego = np.load(graphs / "kg_ego_graph" / "indptr.npy")
        emb = np.load(graphs / "subgraph_emb" / "values.npy")
        np.testing.assert_array_equal(emb, Z[s::2])  # entity e in shard e mod 2
        np.testing.assert_array_equal(np.diff(ego), np.diff(kg.ego.indptr)[s::2])
        rows[0] += len(np.load(graphs / "kg_pe_graph" / "indptr.npy")) - 1
        rows[1] += len(ego) - 1
        rows[2] += len(emb)
    assert rows == [len(single.X), kg.n_entities, kg.n_entities]
    dmar = router.pipelines["dmar"]
    with pytest.raises(InputError, match="never"):  # never read whole at the router
        np.asarray(dmar.knowledge_graph_.ego.indices)
    with pytest.raises(InputError, match="never"):
        np.asarray(dmar.subgraph_emb_)
    same_results(single, router, "dmar", questions=QUESTIONS[:1], k=3, candidate_depth=4, second_stage_depth=3,
                 union_depth=2)  # reads the rows it reaches only
    reached = dmar.knowledge_graph_.ego.fetched, dmar.knowledge_graph_.passage_entities.fetched, \
        dmar.subgraph_emb_.fetched
    assert 0 < reached[0] < kg.ego.nnz and 0 < reached[1] < kg.passage_entities.nnz and 0 < reached[2] < len(Z)
    same_results(single, router, "dmar")


def test_dmar_adds_through_the_router_hold_only_the_rows_they_change(saved_index, tmp_path):
    single, router, _, out = sharded(saved_index, tmp_path)
    more = [{"id": f"more-{i}", "title": f"Venn Observatory {i}",
             "text": f"The Venn Observatory {i} near Harbor Bridge 2 hosts comet studies by Marisol Venn."} for i in range(3)]
    E, E2 = single.embed_passages(NEW), single.embed_passages(more)
    for index in (single, router):
        index.add(NEW, embeddings=E)
    router = open_router(out, LocalShards.open(out))  # the held rows survive a commit and a reopen
    for index in (single, router):
        index.add(more, embeddings=E2)
    want, got = single.pipelines["dmar"], router.pipelines["dmar"]
    kg = got.knowledge_graph_
    for graph, whole in ((kg.ego, want.knowledge_graph_.ego), (kg.passage_entities, want.knowledge_graph_.passage_entities)):
        assert 0 < len(graph.overridden) < graph.n_rows  # the rows that differ from the shards' rows
        ptr, ind, _ = graph.rows_csr(np.arange(graph.n_rows))
        np.testing.assert_array_equal(ptr, whole.indptr)
        np.testing.assert_array_equal(ind, whole.indices)
    assert 0 < len(got.subgraph_emb_.held_rows) < kg.n_entities
    np.testing.assert_array_equal(got.subgraph_emb_.take(np.arange(kg.n_entities)), np.asarray(want.subgraph_emb_))
    files = {p.name for p in (out / read_shards(out)["router"] / "pipelines" / "dmar").iterdir()}
    assert not files & {"kg_pe_indices.npy", "kg_ego_indices.npy", "subgraph_emb.npy"}
    reopened = open_router(out, LocalShards.open(out))
    same_results(single, reopened, "dmar", questions=QUESTIONS[:1], k=3, candidate_depth=4, second_stage_depth=3,
                 union_depth=2)
    stored = reopened.pipelines["dmar"].knowledge_graph_.ego.base.base
    assert 0 < stored.fetched < stored.nnz  # the rows a search reaches, read from the shards
    same_results(single, reopened, "dmar")


def test_bad_input_and_damaged_router(saved_index, tmp_path):
    single = Index.load(saved_index, progress=False)
    with pytest.raises(InputError, match="positive integer"):
        shard_index(single, 0, tmp_path / "a")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(InputError, match="not an empty directory"):
        shard_index(single, 2, tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep me"
    with pytest.raises(InputError, match="not a sharded hopgraph index"):
        open_router(saved_index, LocalShards([]))
    out = shard_index(single, 2, tmp_path / "ok")
    meta = read_shards(out)
    graph = next((out / meta["router"] / "pipelines" / "g3rag").rglob("*.npy"))
    data = bytearray(graph.read_bytes())
    data[-1] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="checksum mismatch"):
        open_router(out, LocalShards.open(out))
    single.delete([single.corpus.ids[0]])
    with pytest.raises(InputError, match="compact it first"):
        shard_index(single, 2, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_shard_cli(saved_index, tmp_path, capsys):
    from hopgraph.cli import main

    assert main(["shard", str(saved_index), "--shards", "2", "--out", str(tmp_path / "s"), "-q"]) == 0
    assert "into 2 shards" in capsys.readouterr().out
    assert main(["shard", str(saved_index), "--shards", "2", "--out", str(tmp_path / "s"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an empty directory" in err[0]


def test_a_shard_without_replicas_is_a_503_naming_it(saved_index, tmp_path):
    from fastapi.testclient import TestClient

    from hopgraph.engine.errors import ShardUnavailableError
    from hopgraph.serve import create_app

    single, router, calls, _ = sharded(saved_index, tmp_path)

    class Down(LocalShards):
        def map(self, method, calls_):
            if 1 in calls_:
                raise ShardUnavailableError(1, "no replica answered within 10 s (ActorDiedError)")
            return super().map(method, calls_)

    router.shards.calls = Down(calls.services)
    with TestClient(create_app(router, pipelines=["dense"]), base_url="http://127.0.0.1") as client:
        r = client.post("/search", json={"queries": ["comet"], "pipeline": "dense", "k": 3})
    assert r.status_code == 503 and "shard 1 is unavailable" in r.json()["detail"]


def test_sharded_build_from_the_cli(tmp_path, capsys):
    from hopgraph.cli import main

    from shard_corpus import demo_records

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in demo_records()))
    args = ["index", str(corpus), "--embedder", "hashing-64", "--pipelines", "dense,bm25,g3rag", "-q"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--out", str(tmp_path / "many"), "--shards", "2"]) == 0
    assert "into 2 shards" in capsys.readouterr().out
    single = Index.load(tmp_path / "one", progress=False)
    router = open_router(tmp_path / "many", LocalShards.open(tmp_path / "many"))
    for name in ("dense", "bm25", "g3rag"):
        same_results(single, router, name)
    assert main([*args, "--out", str(tmp_path / "many"), "--shards", "2"]) == 2
    assert "not an empty directory" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["hotpotqa", "musique"])
def test_shared_sets_equal_the_single_index(dataset, tmp_path):
    from conftest import shared_dataset

    data = shared_dataset(dataset)
    single = Index.build(data / "corpus.jsonl", embedder="hashing-64", pipelines=ALL, params={"dmar": {"gnn_steps": 2}},
                         progress=False)
    single.save(tmp_path / "index")
    single = Index.load(tmp_path / "index", progress=False)
    out = shard_index(single, 3, tmp_path / "shards")
    router = open_router(out, LocalShards.open(out))
    questions = [json.loads(line)["question"] for line in (data / "questions.jsonl").read_text().splitlines()]
    for name in ALL:
        same_results(single, router, name, questions=questions, k=10)


def test_routers_of_one_sharded_index_see_each_others_writes(saved_index, tmp_path):
    single, a, _, out = sharded(saved_index, tmp_path)
    b = open_router(out, LocalShards.open(out))
    E = single.embed_passages(NEW)
    a.add(NEW[:2], embeddings=E[:2])
    b.add(NEW[2:], embeddings=E[2:])  # takes in a's commit first: nothing lost
    a.delete(["new-0"])
    single.add(NEW[:2], embeddings=E[:2])  # the same adds: G3RAG's added rows depend on what is added together
    single.add(NEW[2:], embeddings=E[2:])
    single.delete(["new-0"])
    for name in ALL:
        same_results(single, a, name)
        same_results(single, b, name)
    routers = sorted(p.name for p in out.glob("router-*"))
    assert len(routers) <= 3 and read_shards(out)["router"] == routers[-1]


def test_serve_ray_arguments_are_checked_before_any_cluster_starts(saved_index, tmp_path, capsys):
    from hopgraph.cli import main

    out = shard_index(Index.load(saved_index, progress=False), 2, tmp_path / "s")
    for args, message in ((["--shards", str(out)], "both --ray ADDRESS and --shards DIR"),
                          (["--ray", "local"], "both --ray ADDRESS and --shards DIR"),
                          (["--ray", "local", "--shards", str(saved_index)], "not a sharded hopgraph index"),
                          (["--ray", "local", "--shards", str(out), "--replicas", "0"], "--replicas must be")):
        assert main(["serve", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_an_ivf_searched_index_gives_the_same_results_sharded(tmp_path, monkeypatch):
    """With the dense search on its IVF index, the shards hold its cells and codes: their candidates
    merge into the single index's, unfiltered, under a wide filter (more cells probed), a narrow one
    (exact among the rows passing), and for queries the probed cells leave short (exact scan)."""
    monkeypatch.setenv("HOPGRAPH_DENSE", "ann")
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(300)]
    records = [{"id": f"p{i}", "title": f"T{i}", "text": " ".join(rng.choice(words, 12)), "metadata": {"g": i % 20}}
               for i in range(3000)]
    single = Index.build(records, embedder="hashing-64", pipelines=["dense", "hybrid", "g3rag"], progress=False)
    single.save(tmp_path / "index")
    single = Index.load(tmp_path / "index", progress=False)
    assert single.components.dense.method == "ann" and single.components.dense.ivf.nlist > 64
    out = shard_index(single, 3, tmp_path / "shards")
    calls = LocalShards.open(out)
    router = open_router(out, calls)
    questions = [" ".join(rng.choice(words, 4)) for _ in range(12)]
    single.components.dense.nprobe = router.components.dense.nprobe = 6  # an approximate search
    exact = single.components.dense.exact_topk(single.embed_queries(questions), 10)[0]
    assert (single.search_arrays(questions, "dense", k=10)[0] != exact).any()
    for name in ("dense", "hybrid", "g3rag"):
        same_results(single, router, name, questions, k=10)
        same_results(single, router, name, questions, k=10, where={"g": {"$in": list(range(12))}})
        same_results(single, router, name, questions, k=10, where={"g": 3})
        same_results(single, router, name, questions, k=200, where={"g": {"$in": [1, 2, 3]}})
    assert calls.calls["ivf_candidates"] > 0 and calls.calls["dense_exact"] > 0
    before = calls.calls["dense_exact"]
    same_results(single, router, "dense", questions, k=300)  # 6 cells hold fewer: the exact scan
    assert calls.calls["dense_exact"] > before
    shard = Index.load(out / "shard-000", progress=False, dense="ann")
    np.testing.assert_array_equal(shard.components.dense.ivf.centroids(), single.components.dense.ivf.centroids())


def test_a_router_reads_the_extraction_only_when_a_write_or_hop_needs_it(saved_index, tmp_path):
    """hop's shared-name links read the passages' names from the extraction (on the router's first hop
    search); no other search reads it."""
    single, router, _, _ = sharded(saved_index, tmp_path)
    for name in ALL:
        if name != "hop":
            router.search_arrays(QUESTIONS, name, k=5)
    assert "_extraction_segments" in router.components.__dict__  # searches never read it
    router.search_arrays(QUESTIONS, "hop", k=5, coverage_names=0.0)
    assert "_extraction_segments" in router.components.__dict__
    router.search_arrays(QUESTIONS, "hop", k=5)
    assert "_extraction_segments" not in router.components.__dict__
    router = sharded(saved_index, tmp_path / "again")[1]
    router.add(NEW[:1])
    assert "_extraction_segments" not in router.components.__dict__
    single.add(NEW[:1])
    for name in ALL:
        same_results(single, router, name)


def test_the_graph_rows_live_in_the_shards_of_their_passages(saved_index, tmp_path):
    """G3RAG's gain graph and the title mention graph leave the router: each shard holds the rows of
    its passages (global column ids), the router their row pointers; a search reads the rows it
    reaches."""
    single, router, calls, out = sharded(saved_index, tmp_path)
    meta = read_shards(out)
    for part, whole, router_dir in (("pipelines/g3rag", single.pipeline("g3rag").graph_, out / meta["router"]),
                                    ("components/title-mentions", single.components.title_mentions().graph,
                                     out / "parts" / "part-000000")):
        assert (router_dir / part / "indptr.npy").is_file() and not (router_dir / part / "indices.npy").exists()
        held = 0
        for s, shard in enumerate(meta["shards"]):
            a = np.load(out / shard["graph"] / part / "graph" / "indices.npy")
            ptr = np.load(out / shard["graph"] / part / "graph" / "indptr.npy")
            rows = router.shards.map.rows_of[s]
            assert len(ptr) == len(rows) + 1
            for local, r in enumerate(rows.tolist()):
                np.testing.assert_array_equal(a[ptr[local]:ptr[local + 1]],
                                              np.asarray(whole.indices[whole.indptr[r]:whole.indptr[r + 1]]))
            held += len(a)
            assert (out / shard["graph"] / part / "graph" / "data.npy").is_file() == (part == "pipelines/g3rag")
        assert held == int(whole.indptr[-1])
    router.search_arrays(QUESTIONS, "g3rag", k=5)
    assert calls.calls["graph_rows"] > 0


def test_a_router_write_that_fails_changes_no_shard(saved_index, tmp_path, monkeypatch):
    """The router updates its state before any shard commits (the new passages read from the router
    meanwhile): a write failing there leaves every shard and the router's last commit as they were,
    and the same write then succeeds."""
    single, router, calls, out = sharded(saved_index, tmp_path)
    sizes = [s.info()["passages"] for s in calls.services]
    g3rag = type(router.pipelines["g3rag"])

    def broken(self, start, progress):
        raise RuntimeError("disk full")
    with monkeypatch.context() as m:
        m.setattr(g3rag, "_add", broken)
        with pytest.raises(RuntimeError, match="disk full"):
            router.add(NEW)
    assert [s.info()["passages"] for s in calls.services] == sizes and len(router.X) == len(single.X)
    for name in ALL:
        same_results(single, router, name)
    router.add(NEW)
    single.add(NEW)
    for name in ALL:
        same_results(single, router, name)


def test_a_router_commit_writes_what_the_write_added(saved_index, tmp_path):
    """An add commits a router part of the rows it added (their ids, titles, the extraction's delta,
    the title mentions' new rows), not the router's components again; a delete commits none."""
    def size(path):
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

    single, router, _, out = sharded(saved_index, tmp_path)
    router.add(NEW[:2])
    router.delete([NEW[0]["id"]])
    assert [p["dir"] for p in router.parts] == ["parts/part-000000", "parts/part-000001"]
    assert [p["n_rows"] for p in router.parts] == [len(single.X), 2]
    added = router.parts[1]["components"]
    assert [e["state"] for e in added["extraction"]] == ["delta"] and added["title_mentions"]["state"] == "tail"
    assert size(out / "parts" / "part-000001") < size(out / "parts" / "part-000000")
    single.add(NEW[:2])
    single.delete([NEW[0]["id"]])
    again = open_router(out, LocalShards.open(out))
    for name in ALL:
        same_results(single, again, name)


@pytest.mark.parametrize("other", ["the single index", "a small index"])
def test_a_shard_set_entry_naming_another_index_is_refused_at_open(saved_index, tmp_path, other):
    out = shard_index(Index.load(saved_index, progress=False), 2, tmp_path / "shards")
    if other == "a small index":
        target = tmp_path / "small"
        Index.build([{"id": f"x{i}", "text": f"another passage {i}"} for i in range(3)], embedder="hashing-64",
                    pipelines=["dense"], progress=False).save(target)
        message = r"holds 3 passages, the router maps \d+ to it: it is not a shard of this index"
    else:  # more passages than the shard: its ids tell
        target = saved_index
        message = r"its passage at row \d+ is '.*', the router's is '.*': it is not a shard of this index"
    meta = json.loads((out / "shards.json").read_text())
    meta["shards"][1]["dir"] = str(target.resolve())  # an absolute path: joined, it names the other index
    (out / "shards.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match=r"shards\.json: shard 1 \(.*\): " + message):
        open_router(out, LocalShards.open(out))


def test_shard_refuses_an_out_inside_its_source(saved_index, tmp_path, capsys):
    from hopgraph.cli import main

    source = tmp_path / "source"
    shutil.copytree(saved_index, source)
    before = sorted(p.name for p in source.iterdir())
    for out in (source / "inner", source, source / "a" / ".." / "b"):
        assert main(["shard", str(source), "--shards", "2", "--out", str(out), "-q"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is inside the index it shards" in err[0], err
    assert sorted(p.name for p in source.iterdir()) == before
    assert main(["verify", str(source)]) == 0
