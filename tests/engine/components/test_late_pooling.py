"""Late-chunked STITCH texts (engine/components/late_pooling.py): spans that reproduce the
texts, span pooling equal to a reference over the model's own token embeddings, Index.build's one
shared pass equal to a separate pass, and live adds equal to a fresh fit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.errors import InputError
from hopgraph.engine.embedders import HashingEmbedder
from hopgraph.engine.components.extraction import extract
from hopgraph.engine.components.late_pooling import embed_with_texts, late_texts, text_spans
from hopgraph.engine.embedders.packed_bert import PackedBertEncoder
from hopgraph.index import Index

pytestmark = pytest.mark.filterwarnings("ignore::hopgraph.engine.ingest.chunking.PassageLengthWarning")

RECORDS = [
    {"id": "a", "title": "Abbey Road", "text": "Abbey Road is an album by the Beatles. It was recorded at EMI "
                                               "Studios in London. The Beatles released it in 1969."},
    {"id": "b", "title": "The Beatles", "text": "The Beatles were an English band from Liverpool. John Lennon "
                                                "and Paul McCartney wrote most of their songs."},
    {"id": "c", "title": "Liverpool", "text": "Liverpool is a city in England. The Beatles came from Liverpool."},
    {"id": "d", "title": "", "text": "No title here. Just two sentences about Paul McCartney."},
    {"id": "e", "title": "Long", "text": "Filler words go on. " * 80 + "Late Sentence names EMI Studios."},
]


def corpus(records=RECORDS) -> Corpus:
    return Corpus.coerce(records)


def test_spans_reproduce_every_text_they_name():
    c = corpus()
    ex = extract(c)
    passages = c.embedding_texts()
    spans = text_spans(ex, passages)
    assert len(spans) and (np.diff(spans.chunk) >= 0).all()
    for r in range(len(spans)):
        text = ex.texts[int(spans.text[r])]
        passage = passages[int(spans.chunk[r])]
        parts = [passage[a:b] for a, b in spans.ranges[spans.indptr[r]:spans.indptr[r + 1]].tolist()]
        assert " ".join(parts) == text  # a topic is one range; a description its sentences joined
    # each text is requested once, in the first passage that uses it
    assert len(np.unique(spans.text)) == len(spans)
    first = {}
    for e in range(ex.n_topics):
        first.setdefault(int(ex.topic_text[e]), int(ex.topic_chunk[e]))
    for t, ch in zip(spans.text.tolist(), spans.chunk.tolist()):
        if t in first:
            assert ch <= first[t]
    # texts from first_text on, numbered from it
    later = text_spans(ex, passages, first_text=5)
    assert set((later.text + 5).tolist()) == {t for t in spans.text.tolist() if t >= 5}


def test_spans_leave_out_texts_not_in_their_passage():
    c = corpus()
    ex = extract(c)
    passages = list(c.embedding_texts())
    passages[0] = "something else entirely"
    spans = text_spans(ex, passages)
    assert not (spans.chunk == 0).any()


def test_no_late_texts_without_a_packed_model():
    c = corpus()
    assert late_texts(extract(c), c.embedding_texts(), HashingEmbedder(32)) is None
    assert embed_with_texts(extract(c), c.embedding_texts(), HashingEmbedder(32)) is None


def reference_pool(minilm, text: str, ranges) -> np.ndarray | None:
    """Mean of the model's own token embeddings (sentence-transformers) inside ``ranges``."""
    st = minilm.model
    tokens = st.encode([text], output_value="token_embeddings")[0].numpy()
    off = np.asarray(st.tokenizer(text, truncation=True, max_length=st.max_seq_length,
                                  return_offsets_mapping=True)["offset_mapping"])
    keep = np.zeros(len(off), bool)
    for a, b in ranges:
        keep |= (off[:, 0] >= a) & (off[:, 1] <= b) & (off[:, 1] > off[:, 0])
    if not keep.any():
        return None
    v = tokens[keep].mean(0)
    return v / np.linalg.norm(v)


@pytest.mark.slow
def test_encode_spans_equals_the_models_token_embeddings(minilm):
    enc = PackedBertEncoder.for_embedder(minilm)
    texts = ["Abbey Road: Abbey Road is an album. It was recorded in London.", "short",
             "word " * 400 + "tail end"]
    spans = [(0, np.array([[12, 35]])), (0, np.array([[0, 10], [36, 63]])), (1, np.array([[0, 5]])),
             (2, np.array([[0, 20]])), (2, np.array([[2000, 2008]]))]  # the last lies past truncation
    X, emb, ok = enc.encode_spans(texts, spans)
    np.testing.assert_allclose(X, minilm.encode(texts), atol=1e-5)
    assert ok.tolist() == [True, True, True, True, False]
    assert not emb[4].any()
    for r, (t, ranges) in enumerate(spans[:4]):
        np.testing.assert_allclose(emb[r], reference_pool(minilm, texts[t], ranges.tolist()), atol=1e-5)
    X0, e0, ok0 = enc.encode_spans([], [])
    assert X0.shape == (0, minilm.dim) and len(e0) == len(ok0) == 0


@pytest.mark.slow
def test_encode_spans_tokenises_once(minilm, monkeypatch):
    """The passages are tokenised once for both the forward pass and the span offsets, and the
    result is the same as with the two tokenisations (ids from ``preprocess``, offsets apart)."""
    enc = PackedBertEncoder.for_embedder(minilm)
    texts = ["Abbey Road: Abbey Road is an album. It was recorded in London.", "word " * 400 + "tail end", "x"]
    spans = [(0, np.array([[12, 35]])), (1, np.array([[0, 20]])), (2, np.array([[0, 1]]))]
    calls = {"tokenize": 0, "preprocess": 0}
    tokenize, preprocess = enc._tokenize, enc._preprocess

    def counted(name, fn):
        def call(*a):
            calls[name] += 1
            return fn(*a)
        return call

    monkeypatch.setattr(enc, "_tokenize", counted("tokenize", tokenize))
    monkeypatch.setattr(enc, "_preprocess", counted("preprocess", preprocess))
    X, emb, ok = enc.encode_spans(texts, spans)
    assert calls == {"tokenize": 1, "preprocess": 0}
    features, offsets = tokenize(texts)
    for key, value in preprocess(texts).items():
        assert np.array_equal(value.numpy(), features[key].numpy()), key
    assert [len(o) for o in offsets] == features["attention_mask"].sum(1).tolist()
    with monkeypatch.context() as m:  # the forward pass tokenising for itself gives the same bits
        m.setattr(enc, "_tokenize", lambda t: (None, tokenize(t)[1]))
        X2, emb2, ok2 = enc.encode_spans(texts, spans)
    assert np.array_equal(X, X2) and np.array_equal(emb, emb2) and np.array_equal(ok, ok2)


@pytest.mark.slow
def test_build_pools_texts_in_the_passage_pass_equal_to_a_later_fit(minilm):
    c = corpus()
    built = Index.build(c, embedder=minilm, pipelines=["stitch"], progress=False)
    np.testing.assert_allclose(built.X, minilm.encode(c.embedding_texts()), atol=1e-5)
    assert len(built.components.builds["extraction"]) == 1
    H = built.pipelines["stitch"].hypergraph_
    # the same texts from a fit after the embedding (its own late pass over the passages)
    later = Index.build(c, embedder=minilm, pipelines=[], progress=False)
    H2 = later.pipeline("stitch").hypergraph_
    np.testing.assert_allclose(np.asarray(H.text_emb, np.float32), np.asarray(H2.text_emb, np.float32), atol=2e-3)
    # separately embedded texts differ from late-chunked ones (the option is real), titles' rows are X's
    sep = later.pipeline("stitch", text_pooling="separate").hypergraph_
    ex = later.components.extraction()
    spans = text_spans(ex, c.embedding_texts())
    topics = np.unique(ex.topic_text)
    diff = np.abs(np.asarray(sep.text_emb, np.float32)[topics] - np.asarray(H.text_emb, np.float32)[topics]).max(1)
    assert (diff > 0.01).mean() > 0.9
    long_tail = [i for i, t in enumerate(ex.texts) if t == "Late Sentence names EMI Studios."]
    assert long_tail and long_tail[0] in spans.text.tolist()  # requested, but past the model's window:
    np.testing.assert_allclose(np.asarray(H.text_emb[long_tail[0]], np.float32),  # embedded on its own
                               np.asarray(sep.text_emb[long_tail[0]], np.float32), atol=2e-3)


@pytest.mark.slow
def test_add_late_texts_equal_a_fresh_fit(minilm):
    c = corpus()
    grown = Index.build(corpus(RECORDS[:3]), embedder=minilm, pipelines=["stitch"], progress=False)
    grown.add(RECORDS[3:])
    fresh = Index.build(c, embedder=minilm, pipelines=["stitch"], progress=False)
    a, b = grown.pipelines["stitch"].hypergraph_.text_emb, fresh.pipelines["stitch"].hypergraph_.text_emb
    assert a.shape == b.shape
    np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["late", "separate"])
def test_pooling_is_a_fit_time_parameter_kept_on_load(minilm, tmp_path, pooling):
    idx = Index.build(corpus(), embedder=minilm, pipelines=["stitch"], params={"stitch": {"text_pooling": pooling}},
                      progress=False)
    idx.save(tmp_path / "i")
    back = Index.load(tmp_path / "i", embedder=minilm)
    assert back.pipelines["stitch"].fit_params.text_pooling == pooling
    np.testing.assert_array_equal(np.asarray(back.pipelines["stitch"].hypergraph_.text_emb),
                                  np.asarray(idx.pipelines["stitch"].hypergraph_.text_emb))


def test_work_dir_build_maps_text_embeddings_from_the_work_dir(tmp_path, demo_corpus):
    """Index.build(work_dir=) writes STITCH's text embeddings to a memory-mapped file there
    (docs/decisions/memory-at-a-million.md), equal to an in-memory build; the work directory stays a hopgraph one."""
    from hopgraph.engine.ingest.streaming import TEXT_EMB_FILE, check_work_dir

    work = tmp_path / "i.work"
    mapped = Index.build(demo_corpus, embedder="hashing-32", pipelines=["stitch"], work_dir=work, progress=False)
    plain = Index.build(demo_corpus, embedder="hashing-32", pipelines=["stitch"], progress=False)
    E = mapped.pipelines["stitch"].hypergraph_.text_emb
    assert isinstance(E, np.memmap) and Path(E.filename) == work / TEXT_EMB_FILE
    np.testing.assert_array_equal(np.asarray(E), plain.pipelines["stitch"].hypergraph_.text_emb)
    assert check_work_dir(work) == work
    # a second build into the same work directory leaves the first index's array intact
    first = np.array(E)
    Index.build(demo_corpus, embedder="hashing-16", pipelines=["stitch"], work_dir=work, progress=False)
    np.testing.assert_array_equal(np.asarray(E), first)


def test_texts_embedded_in_blocks_equal_one_block(monkeypatch, demo_corpus):
    import hopgraph.engine.pipelines.stitch.hypergraph as hg

    one = Index.build(demo_corpus, embedder="hashing-32", pipelines=["stitch"], progress=False)
    monkeypatch.setattr(hg, "TEXT_BLOCK_ROWS", 7)
    blocks = Index.build(demo_corpus, embedder="hashing-32", pipelines=["stitch"], progress=False)
    np.testing.assert_array_equal(one.pipelines["stitch"].hypergraph_.text_emb, blocks.pipelines["stitch"].hypergraph_.text_emb)


def test_an_index_saved_before_text_pooling_is_refitted_not_mislabelled(tmp_path, demo_corpus):
    """A saved STITCH whose parameters lack ``text_pooling`` embedded its texts on their own: it
    loads as ``separate``, and syncing to the current defaults refits it (late chunking)."""
    from conftest import rewrite_manifest

    idx = Index.build(demo_corpus, embedder="hashing-32", pipelines=["stitch"], progress=False)
    idx.save(tmp_path / "i")

    def drop(manifest: dict) -> None:
        del manifest["pipelines"]["stitch"]["params"]["text_pooling"]

    rewrite_manifest(tmp_path / "i", drop)
    back = Index.load(tmp_path / "i", embedder="hashing-32", verify="fast")
    assert back.pipelines["stitch"].fit_params.text_pooling == "separate"
    assert back.sync_params("stitch") == "dropped"


def _record_model_texts(monkeypatch) -> list[str]:
    """The texts that run through the packed encoder's forward pass, as they run."""
    seen: list[str] = []
    hidden = PackedBertEncoder._hidden

    def recorded(self, texts, *rest):
        seen.extend(texts)
        return hidden(self, texts, *rest)

    monkeypatch.setattr(PackedBertEncoder, "_hidden", recorded)
    return seen


@pytest.mark.slow
def test_streamed_build_pools_texts_in_the_one_passage_pass(minilm, tmp_path, monkeypatch, demo_corpus):
    """A build with a work directory (``hopgraph index``) runs every passage through the model once,
    pooling STITCH's texts in that pass (the extraction adopted), and equals the in-memory build."""
    minilm.encode(["warm up"])
    seen = _record_model_texts(monkeypatch)
    streamed = Index.build(demo_corpus, embedder=minilm, pipelines=["dense", "stitch"], work_dir=tmp_path / "w",
                           batch_size=1, progress=False)
    passages = demo_corpus.embedding_texts()
    assert sorted(t for t in seen if t in set(passages)) == sorted(passages)  # each passage once
    assert streamed.components.builds["extraction"] == [0.0]
    memory = Index.build(demo_corpus, embedder=minilm, pipelines=["dense", "stitch"], progress=False)
    np.testing.assert_allclose(np.asarray(streamed.X), memory.X, atol=1e-6)
    a, b = (np.asarray(i.pipelines["stitch"].hypergraph_.text_emb, np.float32) for i in (streamed, memory))
    np.testing.assert_allclose(a, b, atol=2e-3)


@pytest.mark.slow
def test_interrupted_pooled_build_resumes_to_the_same_texts(minilm, tmp_path, monkeypatch, demo_corpus):
    """An interrupted streamed build that pools texts resumes from its last finished chunk (X and
    the pooled texts kept in the work directory) and equals an uninterrupted one; the state of a
    build without pooled texts is refused."""
    import hopgraph.engine.ingest.streaming as streaming

    pool = streaming.pool_spans
    calls = {"n": 0}

    def failing(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated")
        return pool(*a, **kw)

    work = tmp_path / "w"
    monkeypatch.setattr(streaming, "pool_spans", failing)
    with pytest.raises(KeyboardInterrupt):
        Index.build(demo_corpus, embedder=minilm, pipelines=["stitch"], work_dir=work, batch_size=1, progress=False)
    chunk = streaming.CHUNK_BATCHES
    assert streaming.read_state(work)["done"] == chunk and (work / streaming.LATE_TEXTS_FILE).is_file()
    with pytest.raises(InputError, match="cannot resume: .* another build"):
        Index.build(demo_corpus, embedder=minilm, pipelines=["dense"], work_dir=work, resume=True, progress=False)
    seen = _record_model_texts(monkeypatch)
    resumed = Index.build(demo_corpus, embedder=minilm, pipelines=["stitch"], work_dir=work, resume=True,
                          progress=False)
    passages = demo_corpus.embedding_texts()
    assert sorted(t for t in seen if t in set(passages)) == sorted(passages[chunk:])  # the first chunk kept
    fresh = Index.build(demo_corpus, embedder=minilm, pipelines=["stitch"], work_dir=tmp_path / "f",
                        batch_size=1, progress=False)
    np.testing.assert_array_equal(np.asarray(resumed.X), np.asarray(fresh.X))
    np.testing.assert_array_equal(np.asarray(resumed.pipelines["stitch"].hypergraph_.text_emb),
                                  np.asarray(fresh.pipelines["stitch"].hypergraph_.text_emb))


@pytest.mark.slow
def test_add_pools_the_new_texts_in_the_new_passages_pass(minilm, monkeypatch):
    """``add`` runs each new passage through the model once, pooling STITCH's new texts in that
    pass (the extraction extended once, before the pass), and gives the index that the two-pass
    add (the passages embedded alone, STITCH's texts pooled in a pass of its own) gives."""
    minilm.encode(["warm up"])
    base = corpus(RECORDS[:3])
    pooled = Index.build(base, embedder=minilm, pipelines=["dense", "stitch"], progress=False)
    extractions = len(pooled.components.builds["extraction"])
    seen = _record_model_texts(monkeypatch)
    decoded = []
    real = Corpus.embedding_texts
    monkeypatch.setattr(Corpus, "embedding_texts",
                        lambda self, start=0, stop=None: decoded.append((len(self) if stop is None else stop) - start)
                        or real(self, start, stop))
    pooled.add(RECORDS[3:])
    monkeypatch.setattr(Corpus, "embedding_texts", real)
    assert decoded and max(decoded) == len(RECORDS) - 3  # only the new passages' texts are built
    new_passages = corpus(RECORDS[3:]).embedding_texts()
    assert sorted(t for t in seen if t in set(new_passages)) == sorted(new_passages)  # each new passage once
    old_passages = set(base.embedding_texts())
    assert not [t for t in seen if t in old_passages]
    on_their_own = [t for t in seen if t not in set(new_passages)]  # texts past the model's window
    assert on_their_own == ["Late Sentence names EMI Studios."]
    assert len(pooled.components.builds["extraction"]) == extractions + 1  # extended once
    # the same index as the passages embedded apart from STITCH's own pass over them
    two_pass = Index.build(base, embedder=minilm, pipelines=["dense", "stitch"], progress=False)
    seen.clear()
    decoded.clear()
    monkeypatch.setattr(Corpus, "embedding_texts",
                        lambda self, start=0, stop=None: decoded.append((len(self) if stop is None else stop) - start)
                        or real(self, start, stop))
    two_pass.add(RECORDS[3:], embeddings=minilm.encode(new_passages))
    monkeypatch.setattr(Corpus, "embedding_texts", real)
    assert decoded and max(decoded) == len(RECORDS) - 3  # STITCH's own pass reads only the new passages too
    assert set(seen) & set(new_passages)  # STITCH's own pass over the passages holding its texts
    np.testing.assert_allclose(pooled.X, two_pass.X, atol=1e-6)
    a, b = (np.asarray(i.pipelines["stitch"].hypergraph_.text_emb, np.float32) for i in (pooled, two_pass))
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=2e-3)
    q = ["Who recorded at EMI Studios?", "Where is Paul McCartney from?"]
    for name in ("dense", "stitch"):
        assert [h.id for h in pooled.search(q, pipeline=name, k=5)[0]] == \
            [h.id for h in two_pass.search(q, pipeline=name, k=5)[0]]


def test_row_texts_hold_only_the_rows_from_their_start():
    """``Corpus.embedding_texts_from(start)`` is indexed by row and reads no earlier row."""
    texts = corpus(RECORDS).embedding_texts_from(3)
    assert len(texts) == len(RECORDS)
    assert [texts[i] for i in range(3, len(RECORDS))] == corpus(RECORDS).embedding_texts(3)
    for bad in (0, 2, len(RECORDS), -1):
        with pytest.raises(IndexError, match="not held"):
            texts[bad]
