"""Chunking (chunk_corpus, Index.build(chunk_tokens=...)), group_by_document, the length warning, CLI flags."""
import json
import re
import warnings

import numpy as np
import pytest

import hopgraph
from hopgraph import Corpus, Index, InputError
from hopgraph.cli import main
from hopgraph.engine.ingest.chunking import (PassageLengthWarning, check_passage_lengths, chunk_corpus, document_of,
                                      group_by_document, split_text, warn_long_passages)


def words(prefix, n):
    return " ".join(f"{prefix}{i}" for i in range(n))


def test_split_text_windows_and_overlap():
    assert split_text(words("w", 10), 4, 0) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
    overlapping = split_text(words("w", 10), 4, 1)
    assert overlapping[0] == "w0 w1 w2 w3" and overlapping[-1].endswith("w9")
    assert all(len(c.split()) <= 4 for c in overlapping) and len(overlapping) == 3
    assert all(a.split()[-1] in b.split() for a, b in zip(overlapping, overlapping[1:]))  # neighbours share a word
    assert split_text("  a\n\nb  c ", 10) == ["a\n\nb  c"]  # original spacing kept, ends trimmed
    assert split_text("   ", 3) == []
    for tokens, overlap in [(0, 0), (3, 3), (3, -1), (2.5, 0), (True, 0)]:
        with pytest.raises(InputError, match="chunk"):
            split_text("a b", tokens, overlap)


def test_chunks_end_at_sentences_when_one_fits():
    text = "The first sentence is here. The second one is a little longer than that. Third!"
    assert split_text(text, 9) == ["The first sentence is here.", "The second one is a little longer than that.",
                                   "Third!"]
    assert split_text(text, 20) == [text]


def test_chunk_corpus_ids_titles_and_document_map():
    c = Corpus.from_records([{"id": "d1", "title": "T", "text": words("w", 7), "src": "x"},
                             {"id": 5, "text": "short"}])
    cc = chunk_corpus(c, 3)
    assert cc.ids == ("d1#0", "d1#1", "d1#2", "5#0")
    assert cc.titles == ("T", "T", "T", "")
    assert cc.texts == ("w0 w1 w2", "w3 w4 w5", "w6", "short")
    assert cc.meta(1) == {"document": "d1", "chunk": 1, "start_char": 9, "end_char": 17, "src": "x"}
    assert cc.meta(3) == {"document": "5", "chunk": 0, "start_char": 0, "end_char": 5}
    assert [document_of(cc, i) for i in range(4)] == ["d1", "d1", "d1", "5"]
    assert document_of(c, 0) == "d1"  # unchunked: a passage is its own document
    twice = chunk_corpus(chunk_corpus(Corpus.from_records([{"id": "a", "text": "x y"}, {"id": "a#0", "text": "z"}]), 1), 5)
    assert twice.ids == ("a#0#0", "a#1#0", "a#0#0#0") and twice.meta(2)["document"] == "a#0#0"


SOURCE = ("Zoë Müller wrote “Die Brücke” in 1921.  It sold well in Köln and Zürich!\n\n"
          "The second paragraph — with ünïcödé, emoji 🙂 and 3.14 — is longer: it runs on, clause after clause, "
          "until the tokenizer has to cut it somewhere sensible. Short one. " * 3)


@pytest.mark.slow
@pytest.mark.parametrize("tokens, overlap", [(12, 0), (24, 6), (40, 10)])
def test_chunk_offsets_slice_the_source_exactly_with_the_minilm_tokenizer(minilm, tokens, overlap):
    from hopgraph.engine.ingest.chunking import token_counter

    tok, unit = token_counter(minilm)
    assert unit == "tokens"
    docs = [{"id": "doc", "title": "Über", "text": SOURCE}, {"id": "short", "text": "Just one sentence."}]
    cc = chunk_corpus(Corpus.from_records(docs), tokens, overlap, minilm)
    assert len(cc) > 3
    for i in range(len(cc)):
        m = cc.meta(i)
        source = docs[0]["text"] if m["document"] == "doc" else docs[1]["text"]
        assert source[m["start_char"]:m["end_char"]] == cc.texts[i]
        assert len(tok.encode(cc.texts[i], add_special_tokens=False).ids) <= tokens
    starts = [cc.meta(i)["start_char"] for i in range(len(cc)) if cc.meta(i)["document"] == "doc"]
    assert starts == sorted(starts) and starts[0] == 0


@pytest.mark.slow
def test_chunk_hits_carry_document_and_offsets(minilm, tmp_path):
    docs = [{"id": "doc", "title": "Über", "text": SOURCE}, {"id": "other", "text": "Bridges of Köln. " * 20}]
    index = Index.build(docs, embedder=minilm, pipelines=["bm25", "dense"], progress=False, chunk_tokens=24,
                        chunk_overlap=4)
    source = {d["id"]: d["text"] for d in docs}
    for pipeline in ("bm25", "dense"):
        hits = index.search(["emoji paragraph Zürich", "bridges"], pipeline=pipeline, k=6)
        for h in (h for row in hits for h in row):
            assert h.document_id in source and h.id.startswith(h.document_id + "#")
            assert source[h.document_id][h.start_char:h.end_char] == h.text
    plain = Index.build(docs, embedder="hashing-16", pipelines=["bm25"], progress=False)
    h = plain.search("bridges", pipeline="bm25", k=1)[0][0]
    assert (h.document_id, h.start_char, h.end_char) == (h.id, None, None)


def fake_search(table):
    """A passage search over fixed rankings: the first ``depth`` entries of each row, -1 padded."""
    calls = []

    def search(depth):
        calls.append(depth)
        rows = np.full((len(table), depth), -1, np.int64)
        scores = np.full((len(table), depth), -np.inf, np.float32)
        for b, ranking in enumerate(table):
            r = ranking[:depth]
            rows[b, :len(r)] = r
            scores[b, :len(r)] = -np.arange(len(r), dtype=np.float32)
        return rows, scores
    return search, calls


def test_group_by_document_searches_deeper_until_k_documents():
    c = chunk_corpus(Corpus.from_records([{"id": f"d{i}", "text": words("w", 40)} for i in range(3)]), 1)
    n = len(c)  # 120 passages, 40 per document
    ranking = list(range(40)) + [40, 80]  # all of d0 first, then d1 and d2
    search, calls = fake_search([ranking, [81, 1]])
    rows, scores = group_by_document(search, c, 3)
    assert rows.tolist() == [[0, 40, 80], [81, 1, -1]]
    assert scores[0].tolist() == [0.0, -40.0, -41.0] and scores[1, 2] == -np.inf
    assert calls == [19, 38, 76] and calls[-1] < n  # deeper until complete; the second row was exhausted


def test_index_chunks_and_groups_by_document(tmp_path):
    docs = [{"id": f"doc{i}", "title": f"Title {i}", "text": f"topic{i} shared words " + words(f"t{i}_", 30)}
            for i in range(6)]
    index = Index.build(docs, embedder="hashing-64", pipelines=["dense", "bm25"], progress=False,
                        chunk_tokens=8, chunk_overlap=2)
    assert len(index.corpus) == 6 * 6 and index.corpus.ids[:2] == ("doc0#0", "doc0#1")
    flat = index.search(["shared words topic3"], pipeline="bm25", k=4)[0]
    grouped = index.search(["shared words topic3"], pipeline="bm25", k=4, group_by_document=True)[0]
    docs_of = [index.corpus.meta(index.corpus.position(h.id))["document"] for h in grouped]
    assert len(grouped) == 4 and len(set(docs_of)) == 4 and docs_of[0] == "doc3"
    assert [h.rank for h in grouped] == [1, 2, 3, 4] and grouped[0].id == flat[0].id
    dense = index.search(["t5_20 t5_21 t5_22"], pipeline="dense", k=6, group_by_document=True)[0]
    assert sorted(index.corpus.meta(index.corpus.position(h.id))["document"] for h in dense) == \
        [f"doc{i}" for i in range(6)]
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx", progress=False)
    assert {k: loaded.corpus.meta(7)[k] for k in ("document", "chunk")} == {"document": "doc1", "chunk": 1}
    again = loaded.search(["shared words topic3"], pipeline="bm25", k=4, group_by_document=True)[0]
    assert [h.id for h in again] == [h.id for h in grouped]
    with pytest.raises(InputError, match="exclude each other"):
        Index.build(docs, embeddings=np.ones((6, 4), np.float32), pipelines=["dense"], progress=False,
                    chunk_tokens=8)


class LimitedModel:
    """Stands in for a sentence-transformers model: max_seq_length and a character-level tokenizer."""

    max_seq_length = 20

    def tokenizer(self, texts, add_special_tokens=True, truncation=False, verbose=False):
        return {"input_ids": [[0] * (len("".join(t.split())) + 2) for t in texts]}


class LimitedEmbedder(hopgraph.HashingEmbedder):
    def __init__(self):
        super().__init__(16)
        self.model = LimitedModel()


def test_passage_length_warning_uses_the_tokenizer():
    c = Corpus.from_records([{"id": "a", "text": words("w", 10)}, {"id": "b", "text": words("w", 9)}])
    with pytest.warns(PassageLengthWarning, match=r"1 of 2 passages exceed .* 20 tokens \(longest: 22,.*at most 18"):
        assert warn_long_passages(c, LimitedEmbedder()) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_long_passages(c, hopgraph.HashingEmbedder(16)) is None  # no stated limit
        Index.build(c, embedder=LimitedEmbedder(), pipelines=["dense"], progress=False, chunk_tokens=4)
    with pytest.warns(PassageLengthWarning):
        Index.build(c, embedder=LimitedEmbedder(), pipelines=["dense"], progress=False)
    assert check_passage_lengths([words("w", 10), "a"], 12) == (1, 13)  # words x 1.3 without a tokenizer


@pytest.mark.slow
def test_the_length_warning_suggests_a_size_that_fits_and_names_the_one_in_use(minilm):
    long = " ".join(["antidisestablishmentarianism"] * 200)
    c = Corpus.from_records([{"id": "a", "title": "A title of five words", "text": long}])
    with pytest.warns(PassageLengthWarning) as caught:
        warn_long_passages(c, minilm)
    fits = int(re.search(r"at most (\d+)", str(caught[0].message)).group(1))
    assert fits == 256 - 2 - len(minilm.model.tokenizer("A title of five words:", add_special_tokens=False)["input_ids"])
    chunked = chunk_corpus(c, fits, 0, minilm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_long_passages(chunked, minilm) is None  # the suggested size fits
    too_big = chunk_corpus(c, 300, 0, minilm)
    with pytest.warns(PassageLengthWarning, match=rf"chunk_tokens=300 is more than fits: .* at most {fits}"):
        warn_long_passages(too_big, minilm, 300)


@pytest.mark.slow
def test_minilm_limit_from_the_model(minilm):
    from hopgraph.engine.ingest.chunking import embedder_limit

    limit, count = embedder_limit(minilm)
    assert limit == 256 and count(["hello world"]) == [4]


def test_cli_fields_chunking_warning_and_grouped_search(tmp_path, capsys):
    csv_path = tmp_path / "c.csv"
    csv_path.write_text("key,name,body,year\n" + "".join(
        f"k{i},Doc {i},topic{i} {words(f'x{i}_', 25)},{2000 + i}\n" for i in range(4)))
    out = tmp_path / "idx"
    assert main(["index", str(csv_path), "--out", str(out), "--embedder", "hashing-32", "--pipelines", "bm25",
                 "-q", "--id-field", "key", "--title-field", "name", "--text-field", "body",
                 "--metadata-fields", "year", "--chunk-tokens", "10", "--chunk-overlap", "3"]) == 0
    assert "indexed 16 passages" in capsys.readouterr().out
    index = Index.load(out, progress=False)
    assert list(index.corpus.ids[:4]) == ["k0#0", "k0#1", "k0#2", "k0#3"] and index.corpus.titles[0] == "Doc 0"
    m = index.corpus.meta(1)
    assert {k: m[k] for k in ("chunk", "document", "year")} == {"chunk": 1, "document": "k0", "year": 2000}
    assert f"topic0 {words('x0_', 25)}"[m["start_char"]:m["end_char"]] == index.corpus.texts[1]
    assert main(["search", str(out), "topic2 x2_1 x2_20", "--pipeline", "bm25", "--k", "3", "--json",
                 "--group-by-document"]) == 0
    hits = json.loads(capsys.readouterr().out)[0]["hits"]
    assert hits[0]["id"].startswith("k2#") and len({h["id"].split("#")[0] for h in hits}) == len(hits)
    assert main(["index", str(csv_path), "--out", str(tmp_path / "i2"), "--embedder", "hashing-32", "-q",
                 "--id-field", "key", "--text-field", "body", "--chunk-tokens", "5", "--chunk-overlap", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chunk overlap must be an integer with 0 <= overlap < chunk tokens (5)" in err[0]
    assert main(["index", str(csv_path), "--out", str(tmp_path / "i3"), "--embedder", "hashing-32", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "c.csv line 2: no id field" in err[0]


def test_cli_prints_the_length_warning_as_one_line(tmp_path, capsys, monkeypatch):
    import hopgraph.index.build as index_module

    monkeypatch.setattr(index_module, "resolve_embedder", lambda name, *a, **k: LimitedEmbedder())
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": "a", "text": words("w", 30)}) + "\n")
    assert main(["index", str(p), "--out", str(tmp_path / "idx"), "--pipelines", "dense", "-q"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("hopgraph index: warning: 1 of 1 passages exceed")
