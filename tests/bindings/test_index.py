"""``hopgraph.Index``: search hits, hybrid fusion, query embeddings, save/load round trip and refusals,
precomputed embeddings, parameter variants, input checks before embedding, and hits carrying text
and metadata read from the store."""
import json

import numpy as np
import pytest

import hopgraph
from hopgraph import Index, IndexFormatError, InputError
from hopgraph.engine import storage

from conftest import rewrite_manifest


@pytest.fixture(scope="module")
def built(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["dense", "bm25", "hybrid"],
                       progress=False)


def test_search_returns_hits(built):
    res = built.search(["Who founded Orbis Computing?", "comet discovered at Cerro Alto"], pipeline="bm25", k=3)
    assert len(res) == 2 and [h.rank for h in res[0]] == [1, 2, 3]
    assert res[0][0].title == "Orbis Computing" and res[0][0].id.startswith("demo-")
    assert res[0][0].score >= res[0][1].score
    dense = built.search("Linda Faraday Purdue", pipeline="dense", k=40)[0]
    assert len(dense) == len(built.corpus)  # k > N: all passages, no padding
    with pytest.raises(InputError, match="question 0 must be a non-empty string"):
        built.search([""], pipeline="dense")
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        built.search(["x"], pipeline="nope")


def test_hybrid_fuses_dense_and_bm25(built):
    q = ["Who founded Orbis Computing?"]
    n = len(built.corpus)
    h = built.search(q, pipeline="hybrid", k=5)[0]
    fused = {}
    for p in ("dense", "bm25"):
        for hit in built.search(q, pipeline=p, k=n)[0]:
            fused[hit.id] = fused.get(hit.id, 0.0) + 1.0 / (60 + hit.rank)
    expected = sorted(fused.items(), key=lambda kv: -kv[1])[:5]
    assert [x.id for x in h] == [pid for pid, _ in expected]
    assert np.allclose([x.score for x in h], [s for _, s in expected])


def test_query_embeddings_only(built):
    Q = built.embedder.encode(["Brunel bridge Bristol"])
    res = built.search(Q, pipeline="dense", k=2)
    assert res[0][0].title in {"Clifton Suspension Bridge", "Bristol", "Isambard Kingdom Brunel"}
    with pytest.raises(InputError, match="needs the query texts"):
        built.search(Q, pipeline="bm25", k=2)
    with pytest.raises(InputError, match="dimension 3 does not match"):
        built.search(np.ones((1, 3), np.float32), pipeline="dense")


def test_save_load_roundtrip(built, tmp_path):
    path = built.save(tmp_path / "idx")
    m = json.loads((path / storage.read_current(path)[0]).read_text())
    seg = json.loads((storage.segment_dirs(path)[-1] / storage.SEGMENT_MANIFEST).read_text())
    assert m["format_version"] == storage.FORMAT_VERSION == seg["format_version"]
    assert m["embedder"] == {"name": "hashing-64", "dim": 64, "spec": "hashing-64"}
    assert seg["corpus"]["checksum"] == built.corpus.checksum and set(m["pipelines"]) == {"dense", "bm25", "hybrid"}
    assert "embeddings.npy" in seg["checksums"] and seg["checksum_algorithm"] in ("xxh3_128", "crc32")
    assert m["parent"] is None and m["content"] == 1 and [s["name"] for s in m["segments"]] == ["seg-000001"]
    loaded = Index.load(path)
    assert isinstance(loaded.X, np.memmap) and loaded.manifest == m
    q = ["Which company acquired Tessellate Systems?"]
    for p in ("dense", "bm25", "hybrid"):
        assert built.search(q, pipeline=p, k=4) == loaded.search(q, pipeline=p, k=4)
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "commit-000001.json", "commit-000001.lock",
                                                      "seg-000001", "write.lock"]  # no temp dirs left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_interrupted_save_leaves_previous_index(built, tmp_path, monkeypatch):
    path = built.save(tmp_path / "idx")
    before = (path / "CURRENT").read_text()

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(storage.commit, "write_json", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        built.save(path, overwrite=True)
    assert (path / "CURRENT").read_text() == before
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "commit-000001.json", "commit-000001.lock",
                                                      "seg-000001", "write.lock"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


def test_load_refuses_corrupt_or_mismatched(built, tmp_path):
    path = built.save(tmp_path / "idx")
    with pytest.raises(IndexFormatError, match="does not exist"):
        Index.load(tmp_path / "missing")
    with pytest.raises(IndexFormatError, match="dimension 64; embedder hashing-32 has 32"):
        Index.load(path, embedder="hashing-32")
    rewrite_manifest(path, lambda m: m.update(format_version=999))
    with pytest.raises(IndexFormatError, match="format version 999"):
        Index.load(path)
    path = built.save(tmp_path / "idx2")
    gen = storage.segment_dirs(path)[-1]
    (gen / "embeddings.npy").write_bytes((gen / "embeddings.npy").read_bytes()[:200])
    for verify in ("full", "fast"):
        with pytest.raises(IndexFormatError, match="embeddings.npy"):
            Index.load(path, verify=verify)
    path = built.save(tmp_path / "idx3")
    gen = storage.segment_dirs(path)[-1]
    offsets = np.load(gen / "corpus" / "texts_offsets.npy")
    offsets[3] = 10 ** 9                      # one changed value, same file size
    np.save(gen / "corpus" / "texts_offsets.npy", offsets)
    with pytest.raises(IndexFormatError, match="texts_offsets.npy: checksum mismatch"):
        Index.load(path)                      # checksum
    with pytest.raises(IndexFormatError, match="corpus.*texts_data.*must never decrease"):
        Index.load(path, verify="fast")       # structure
    (gen / "segment.json").write_text("{broken")
    with pytest.raises(IndexFormatError, match="segment.json is corrupt"):
        Index.load(path, verify="fast")


def test_build_from_precomputed(demo_corpus, tmp_path, rng):
    X = rng.standard_normal((len(demo_corpus), 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    idx = Index.build(demo_corpus, embeddings=tmp_path / "x.npy", pipelines=["dense"], progress=False)
    assert idx.embedder_name == "precomputed:x.npy"
    ids = idx.search(X[:2] / np.linalg.norm(X[:2], axis=1, keepdims=True), pipeline="dense", k=1)
    assert [h[0].id for h in ids] == [demo_corpus.ids[0], demo_corpus.ids[1]]
    with pytest.raises(InputError, match="precomputed embeddings"):
        idx.search(["text query"], pipeline="dense")
    with pytest.raises(InputError, match="has 30 rows but the corpus has 29"):
        Index.build(hopgraph.Corpus.from_strings(["a"] * 29), embeddings=tmp_path / "x.npy")
    X[3, 5] = np.nan
    with pytest.raises(InputError, match="NaN"):
        Index.build(demo_corpus, embeddings=X)


def test_variants_share_fit(built):
    base = built.pipeline("hybrid")
    v = built.pipeline("hybrid", fusion_depth=10)
    assert v is not base and v.components is base.components and built.pipeline("hybrid", fusion_depth=10) is v


def test_sync_params_updates_query_params_and_drops_fit_params(demo_corpus, hashing_embedder):
    idx = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["hybrid", "bm25"], progress=False)
    assert idx.sync_params("hybrid") == "current"
    idx.params["hybrid"] = {"fusion_depth": 7}
    assert idx.sync_params("hybrid") == "updated" and idx.pipelines["hybrid"].search_defaults.fusion_depth == 7
    idx.params["bm25"] = {"k1": 1.2}
    assert idx.sync_params("bm25") == "dropped" and "bm25" not in idx.pipelines
    assert idx.pipeline("bm25").fit_params.k1 == 1.2


# ---------------------------------------------------------------- Index.build input checks
@pytest.mark.parametrize("corpus, kwargs, message", [
    ([], {}, "holds no passages"),
    ([{"id": "a", "title": 0, "text": "x"}], {}, r"record 0: 'title' must be a string"),
    ([{"id": "p1", "text": "x", "metadata": {"score": float("nan")}}], {},
     r"record 0 \('p1'\): metadata field 'score' is NaN, which JSON cannot hold"),
    ([{"id": "a", "text": "x"}, {"id": "p2", "text": "y", "tags": ["ok", {"w": float("-inf")}]}], {},
     r"record 1 \('p2'\): metadata field 'tags\[1\].w' is -Infinity"),
    ([{"id": "é" * 513, "text": "x"}], {}, r"record 0: 'id': the id 'é+'\.\.\. has 1026 bytes of UTF-8; "
                                           r"the limit is 1024"),
    (["a b"], {"pipelines": "dense"}, "pipelines must be a list"),
    (["a b"], {"pipelines": ["dense", "nope"]}, "unknown pipeline 'nope'"),
    (["a b"], {"device": "gpu"}, "device must be one of"),
    (["a b"], {"batch_size": 0}, "batch_size must be a positive integer"),
])
def test_build_refuses_bad_input_before_embedding(corpus, kwargs, message):
    calls = []

    def embed(texts):
        calls.append(texts)
        return np.ones((len(texts), 4), np.float32)

    with pytest.raises(InputError, match=message):
        hopgraph.Index.build(corpus, embedder=embed, progress=False, **kwargs)
    assert not calls


def test_search_refuses_non_iterable_questions():
    index = hopgraph.Index.build(["a b", "c d"], embedder="hashing-8", pipelines=["dense"], progress=False)
    with pytest.raises(InputError, match="questions must be"):
        index.search(None, pipeline="dense")


def test_hits_carry_text_and_metadata_read_from_the_store(tmp_path, demo_corpus, hashing_embedder, monkeypatch):
    from meta_corpus import meta_id, meta_of, write_meta_corpus

    from hopgraph.engine.components.corpus import PackedStrings

    path = write_meta_corpus(demo_corpus, tmp_path / "meta.jsonl")
    Index.build(path, embedder=hashing_embedder, pipelines=["dense", "bm25"], progress=False).save(tmp_path / "i")
    loaded = Index.load(tmp_path / "i", embedder=hashing_embedder, progress=False)
    assert isinstance(loaded.corpus.texts, PackedStrings)
    loaded.search("warm up", pipeline="bm25", k=1)  # components are built on first use

    def no_full_scan(self):
        raise AssertionError("a search must read only the hit rows of the corpus store")
    monkeypatch.setattr(PackedStrings, "__iter__", no_full_scan)
    hits = loaded.search(["Who founded Orbis Computing?", "comet"], pipeline="bm25", k=4)
    for h in hits[0] + hits[1]:
        i = int(h.id.split(" ")[1].split("#")[0])
        assert h.id == meta_id(i) and h.text == demo_corpus.texts[i] and h.title == demo_corpus.titles[i]
        assert h.metadata == meta_of(i, h.id)
    assert hits[0][0].title == "Orbis Computing" and hash(hits[0][0]) == hash(hits[0][0])
    bare = loaded.search(["Who founded Orbis Computing?"], pipeline="bm25", k=4, with_text=False)[0]
    assert [h.id for h in bare] == [h.id for h in hits[0]] and all(h.text is None for h in bare)
    assert [h.metadata for h in bare] == [h.metadata for h in hits[0]]
    assert hits[0][0].to_dict()["metadata"] == hits[0][0].metadata and "text" in hits[0][0].to_dict()
    monkeypatch.undo()  # a look-up by id builds the id table once (ids only)
    assert loaded.passage(meta_id(3)) == {"id": meta_id(3), "title": demo_corpus.titles[3],
                                          "text": demo_corpus.texts[3], "metadata": meta_of(3, meta_id(3))}
    with pytest.raises(KeyError, match="nope"):
        loaded.passage("nope")


def test_pipeline_variants_stay_bounded_after_compact(demo_corpus):
    from hopgraph.index.index import MAX_VARIANTS

    idx = Index.build(demo_corpus, embedder="hashing-16", pipelines=["hybrid"], progress=False)
    for round_ in range(2):  # before and after compact (which resets the variants)
        for depth in range(1, MAX_VARIANTS + 10):
            idx.pipeline("hybrid", fusion_depth=depth)
        assert len(idx._variants) == MAX_VARIANTS
        idx.delete([demo_corpus.ids[round_]])
        idx.compact()
        assert len(idx._variants) == 0


def test_len_is_the_live_passages(built):
    """``len(index)`` is what a search may return: every passage, less the deleted ones."""
    assert len(built) == built.n_live == len(built.corpus)
