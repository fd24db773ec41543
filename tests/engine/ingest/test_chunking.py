"""Chunking (chunk_corpus, Index.build(chunk_tokens=...)), group_by_document, the length warning, CLI flags."""
import json
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
    assert split_text(words("w", 10), 4, 1) == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert split_text(words("w", 10), 4, 0) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
    assert split_text(words("w", 5), 4, 2) == ["w0 w1 w2 w3", "w2 w3 w4"]
    assert split_text("  a\n\nb  c ", 10) == ["a\n\nb  c"]  # original spacing kept, ends trimmed
    assert split_text("   ", 3) == []
    for tokens, overlap in [(0, 0), (3, 3), (3, -1), (2.5, 0), (True, 0)]:
        with pytest.raises(InputError, match="chunk"):
            split_text("a b", tokens, overlap)


def test_chunk_corpus_ids_titles_and_document_map():
    c = Corpus.from_records([{"id": "d1", "title": "T", "text": words("w", 7), "src": "x"},
                             {"id": 5, "text": "short"}])
    cc = chunk_corpus(c, 3, 1)
    assert cc.ids == ("d1#0", "d1#1", "d1#2", "5#0")
    assert cc.titles == ("T", "T", "T", "")
    assert cc.texts == ("w0 w1 w2", "w2 w3 w4", "w4 w5 w6", "short")
    assert cc.meta(1) == {"document": "d1", "chunk": 1, "src": "x"} and cc.meta(3) == {"document": "5", "chunk": 0}
    assert [document_of(cc, i) for i in range(4)] == ["d1", "d1", "d1", "5"]
    assert document_of(c, 0) == "d1"  # unchunked: a passage is its own document
    twice = chunk_corpus(chunk_corpus(Corpus.from_records([{"id": "a", "text": "x y"}, {"id": "a#0", "text": "z"}]), 1), 5)
    assert twice.ids == ("a#0#0", "a#1#0", "a#0#0#0") and twice.meta(2) == {"document": "a#0#0", "chunk": 0}


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
    assert loaded.corpus.meta(7) == {"document": "doc1", "chunk": 1}
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
    with pytest.warns(PassageLengthWarning, match=r"1 of 2 passages exceed .* 20 word pieces \(longest: 22 word"):
        assert warn_long_passages(c, LimitedEmbedder()) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_long_passages(c, hopgraph.HashingEmbedder(16)) is None  # no stated limit
        Index.build(c, embedder=LimitedEmbedder(), pipelines=["dense"], progress=False, chunk_tokens=4)
    with pytest.warns(PassageLengthWarning):
        Index.build(c, embedder=LimitedEmbedder(), pipelines=["dense"], progress=False)
    assert check_passage_lengths([words("w", 10), "a"], 12) == (1, 13)  # words x 1.3 without a tokenizer


def test_minilm_limit_from_the_model():
    pytest.importorskip("sentence_transformers")
    from hopgraph.engine.ingest.chunking import embedder_limit

    emb = hopgraph.MiniLMEmbedder()
    limit, count = embedder_limit(emb)
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
    assert index.corpus.meta(1) == {"chunk": 1, "document": "k0", "year": "2000"}
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
