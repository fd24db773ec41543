"""Shared components: one corpus store, dense index, BM25 index and extraction per
index, persisted once (index format 2, generations since format 3); the query batch computes shared quantities once."""
from __future__ import annotations


import numpy as np
import pytest

from hopgraph import Index, IndexFormatError, InputError
from hopgraph.engine.components import shared as shared_module
from hopgraph.engine import storage
from hopgraph.engine.components.shared import Components
from hopgraph.engine.components.corpus import Corpus, PackedStrings
from hopgraph.engine.pipelines import pipeline_names

from conftest import make_legacy

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")


@pytest.fixture(scope="module")
def seven(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=ALL, params={"dmar": {"gnn_steps": 2}},
                       progress=False)


def test_all_seven_share_one_of_each_component(seven, tmp_path, monkeypatch):
    assert set(ALL) <= set(pipeline_names())
    builds = seven.components.builds
    assert len(builds["bm25"]) == 1 and len(builds["extraction"]) == 1 and len(builds["dense"]) <= 1
    assert all(p.components is seven.components for p in seven.pipelines.values())
    path = seven.save(tmp_path / "idx")
    gen = storage.segment_dirs(path)[-1]
    files = [p.relative_to(gen).as_posix() for p in gen.rglob("*") if p.is_file()]
    bm25_stores = [f for f in files if f.endswith("/tf.npy")]
    assert bm25_stores == ["components/bm25-0/tf.npy"]
    assert not [f for f in files if f.endswith(".faiss")]
    assert "corpus.jsonl" not in files and "embeddings.npy" in files
    # loading reads the saved components: nothing is extracted or tokenized again
    monkeypatch.setattr(shared_module, "extract", lambda *a, **k: pytest.fail("extraction ran again"))
    loaded = Index.load(path, embedder=seven.embedder)
    for name in ALL:
        a = seven.search_arrays(["Who designed the bridge in Peter Harlow's home city?"], pipeline=name, k=4)
        b = loaded.search_arrays(["Who designed the bridge in Peter Harlow's home city?"], pipeline=name, k=4)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], rtol=1e-5)
    assert not any(loaded.components.builds[k] for k in ("bm25", "extraction"))
    assert len(loaded.components.builds["dense"]) == 1  # one dense index served all seven
    # a pipeline fitted after loading reuses the saved extraction too
    loaded.pipelines.pop("ppr_binary")
    loaded.pipeline("ppr_binary")
    assert not loaded.components.builds["extraction"]


def test_bm25_parameters_reach_every_pipeline_that_uses_bm25(demo_corpus, hashing_embedder):
    idx = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["bm25", "hybrid", "g3rag"],
                      params={"bm25": {"k1": 0.9, "b": 0.4}}, progress=False)
    (params, bm25), = idx.components._bm25.items()
    assert (params.k1, params.b) == (0.9, 0.4) and bm25.params.k1 == 0.9
    # a bm25 variant with other BM25 parameters scores the same postings with its own; the shared one stays
    v = idx.pipeline("bm25", k1=2.0)
    assert len(idx.components._bm25) == 2 and idx.components.bm25().params.k1 == 0.9
    assert len(idx.components._postings) == 1 and all(b.parts[0] is bm25.parts[0] for b in idx.components._bm25.values())
    assert v.search(idx.embed_queries(["comet"]), 3, ["comet"])[0].shape == (1, 3)


@pytest.mark.parametrize("version", [1, 2])
def test_older_format_index_gets_a_rebuild_command(seven, tmp_path, version):
    path = make_legacy(seven.save(tmp_path / "old"), version)
    if version == 1:
        (path / "corpus.jsonl").write_text("")  # a version-1 index holds its corpus as JSON lines
    with pytest.raises(IndexFormatError) as err:
        Index.load(path)
    msg = str(err.value)
    assert f"format version {version}; this hopgraph reads versions 3, 4" in msg
    corpus = f"{path}/corpus.jsonl" if version == 1 else seven.corpus.source  # v2: the file it was built from
    assert f"hopgraph index {corpus} --embeddings {path}/embeddings.npy --embedder hashing-64" in msg
    assert "--pipelines bm25,dense,dmar,g3rag,hybrid,ppr_binary,stitch --param dmar.gnn_steps=2 --out" in msg
    # an older-format index is a hopgraph index: replaced with overwrite=True, its old files removed
    with pytest.raises(InputError, match="overwrite=True"):
        seven.save(path)
    seven.save(path, overwrite=True)
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "commit-000001.json", "commit-000001.lock",
                                                      "seg-000001", "write.lock"]
    assert Index.load(path).pipelines.keys() == seven.pipelines.keys()


def test_corpus_store_round_trip_is_memory_mapped_with_metadata(tmp_path):
    corpus = Corpus.from_records([{"id": "a", "title": "Ä", "text": "première ligne", "year": 1999},
                                  {"id": "b", "text": "second 🙂", "tags": ["x"]}, {"id": "c", "text": "third"}])
    corpus.save(tmp_path / "c")
    back = Corpus.load(tmp_path / "c", 3, "saved")
    assert isinstance(back.texts, PackedStrings) and isinstance(back.texts.data, np.memmap)
    assert list(back.ids) == ["a", "b", "c"] and back.texts[1] == "second 🙂" and back.titles[0] == "Ä"
    assert back.meta(0) == {"year": 1999} and back.meta(1) == {"tags": ["x"]} and back.meta(2) == {}
    assert back.position("c") == 2 and back.texts[-1] == "third" and back.texts[0:2] == ["première ligne", "second 🙂"]
    assert back.checksum == corpus.checksum and back.embedding_texts() == corpus.embedding_texts()
    with pytest.raises(IndexError):
        back.texts[3]
    with pytest.raises(IndexFormatError, match="must hold 4 strings"):
        Corpus.load(tmp_path / "c", 4, "saved")


def test_query_batch_computes_each_quantity_once(demo_corpus, hashing_embedder, monkeypatch):
    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    comp = Components(X, demo_corpus, hashing_embedder)
    texts = ["Peter Harlow bridge", "comet"]
    batch = comp.batch(hashing_embedder.encode(texts), texts)
    calls = {"tokenize": 0, "dense": 0}
    bm25, dense = comp.bm25(), comp.dense
    tok, topk = bm25.tokenize, dense.topk
    monkeypatch.setattr(bm25, "tokenize", lambda t: calls.__setitem__("tokenize", calls["tokenize"] + 1) or tok(t))
    monkeypatch.setattr(dense, "topk", lambda Q, k, allowed=None: calls.__setitem__("dense", calls["dense"] + 1) or topk(Q, k, allowed))
    ids20, _ = batch.dense_topk(20)
    ids5, _ = batch.dense_topk(5)
    batch.bm25_topk(10), batch.bm25_topk(3), batch.bm25_of(np.array([[0, 1, -1], [2, 3, 4]]))
    assert calls == {"tokenize": 1, "dense": 1}
    np.testing.assert_array_equal(ids20[:, :5], ids5)
    assert batch.cosine() is batch.cosine()
    lex = batch.bm25_of(np.array([[0, -1], [1, 2]]))
    assert lex[0, 1] == 0 and lex.dtype == np.float32


def test_every_pipeline_reports_its_stage_breakdown(seven):
    import time

    q = ["Who designed the bridge in Peter Harlow's home city?", "comet Venn-Harlow"]
    Q = seven.embed_queries(q)
    for name in ALL:
        pipe = seven.pipeline(name)
        t0 = time.perf_counter()
        pipe.search(Q, 3, q)
        wall = time.perf_counter() - t0
        assert pipe.timings and all(v >= 0 for v in pipe.timings.values()), name
        assert sum(pipe.timings.values()) <= wall + 1e-3, name
    assert {"recall", "shapley", "rerank"} <= set(seven.pipeline("dmar").timings)
    assert {"relevance", "prior", "ppr"} <= set(seven.pipeline("stitch").timings)
