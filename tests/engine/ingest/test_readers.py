"""Corpus readers (hopgraph.read_corpus): every format, field options, and malformed input."""
import json

import pytest

import hopgraph
from hopgraph import Corpus, InputError, read_corpus
from hopgraph.engine.ingest.readers import markdown_title


def write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def test_hopgraph_jsonl_reads_like_from_jsonl(tmp_path):
    p = write(tmp_path / "c.jsonl", '{"id": "a", "title": "A", "text": "alpha", "year": 1}\n{"id": 2, "text": "b"}\n')
    c = read_corpus(p)
    ref = Corpus.from_jsonl(p)
    assert c.ids == ("a", "2") and c.checksum == ref.checksum and c.meta(0) == {"year": 1}


def test_beir_and_pyserini_jsonl(tmp_path):
    beir = read_corpus(write(tmp_path / "beir.jsonl", '{"_id": "d1", "title": "T", "text": "x", "url": "u"}\n'
                                                      '{"_id": "d2", "title": "", "text": "y"}\n'))
    assert beir.ids == ("d1", "d2") and beir.titles == ("T", "") and beir.meta(0) == {"url": "u"}
    assert beir.meta(1) == {}
    pys = read_corpus(write(tmp_path / "p.jsonl", '{"id": "doc1", "contents": "hello world"}\n'))
    assert pys.ids == ("doc1",) and pys.texts == ("hello world",) and pys.titles == ("",)


def test_json_array_with_line_numbers(tmp_path):
    p = write(tmp_path / "c.json", '[\n  {"id": "a", "text": "x"},\n  {"id": "b", "text": "y", "tags": ["t"]}\n]\n')
    c = read_corpus(p)
    assert c.ids == ("a", "b") and c.meta(1) == {"tags": ["t"]}
    write(p, '[\n  {"id": "a", "text": "x"},\n\n  {"id": "a", "text": "y"}\n]')
    with pytest.raises(InputError, match=r"c.json line 4: duplicate id 'a' \(first seen on line 2\)"):
        read_corpus(p)
    write(p, '[\n  {"id": "a", "text": "x"},\n  {"id": "b" "text": "y"}\n]')
    with pytest.raises(InputError, match=r"c.json line 3: invalid JSON"):
        read_corpus(p)
    write(p, '[{"id": "a", "text": "x"}, 3]')
    with pytest.raises(InputError, match=r"c.json line 1: expected a JSON object, got int"):
        read_corpus(p)
    write(p, '[{"id": "a", "text": "x"}] trailing')
    with pytest.raises(InputError, match="extra data"):
        read_corpus(p)


def test_csv_and_tsv(tmp_path):
    c = read_corpus(write(tmp_path / "c.csv", 'id,title,text,year\n1,One,"two\nlines, with comma",2020\n2,Two,hi,\n'))
    assert c.ids == ("1", "2") and c.texts[0] == "two\nlines, with comma" and c.titles == ("One", "Two")
    assert c.meta(0) == {"year": 2020} and c.meta(1) == {}  # typed by inference; an empty cell is missing
    t = read_corpus(write(tmp_path / "c.tsv", "docid\tbody\tlang\nx\thello there\ten\n"))
    assert t.ids == ("x",) and t.texts == ("hello there",) and t.meta(0) == {"lang": "en"}


def test_csv_metadata_types_are_inferred_or_given(tmp_path):
    p = write(tmp_path / "c.csv", "id,text,year,price,draft,zip,mixed\n"
                                  "a,alpha,2001,3.5,true,02134,7\nb,beta,1999,4,FALSE,10001,n/a\nc,gamma,,,,,\n")
    c = read_corpus(p)
    assert c.meta(0) == {"year": 2001, "price": 3.5, "draft": True, "zip": "02134", "mixed": "7"}
    assert c.meta(1) == {"year": 1999, "price": 4.0, "draft": False, "zip": "10001", "mixed": "n/a"}
    assert c.meta(2) == {}
    given = read_corpus(p, metadata_types={"year": "str", "zip": "int", "price": "float"})
    assert given.meta(0)["year"] == "2001" and given.meta(0)["zip"] == 2134 and given.meta(1)["price"] == 4.0
    with pytest.raises(InputError, match=r"c.csv line 3: metadata field 'mixed': 'n/a' is not a float"):
        read_corpus(p, metadata_types={"mixed": "float"})
    with pytest.raises(InputError, match=r"metadata_types: 'year': 'date' is not a type"):
        read_corpus(p, metadata_types={"year": "date"})
    # JSON keeps its own types; a given type converts them
    j = write(tmp_path / "c.jsonl", '{"id": "a", "text": "x", "year": "2001", "n": 3}\n')
    assert read_corpus(j).meta(0) == {"year": "2001", "n": 3}
    assert read_corpus(j, metadata_types={"year": "int", "n": "str"}).meta(0) == {"year": 2001, "n": "3"}
    # a --where on the typed field finds the passage (it did not while CSV values stayed strings)
    idx = hopgraph.Index.build(c, embedder="hashing-16", pipelines=["bm25"], progress=False)
    assert [h.id for h in idx.search("alpha", pipeline="bm25", k=3, where={"year": 2001})[0]] == ["a"]
    assert [h.id for h in idx.search("alpha", pipeline="bm25", k=3, where={"price": {"$gte": 4}})[0]] == ["b"]


@pytest.mark.parametrize("content, message", [
    ('id,title,text\n1,A,x\n\n2,B,y,extra\n', r"c.csv line 4: 4 field\(s\), the header has 3"),
    ('id,title,text\n1,A,"multi\nline"\n2,B\n', r"c.csv line 4: 2 field\(s\), the header has 3"),
    ('id,title,text\n1,A,x\n1,B,y\n', r"c.csv line 3: duplicate id '1' \(first seen on line 2\)"),
    # a stray quote: the row is refused, never merged with the rows after it
    ('id,title,text\n1,A,x\n2,B,"open\n3,C,z\n', r"c.csv line 3: malformed CSV row \(unexpected end of data\)"),
    ('id,title,text\n1,A,"open\n2,B,"z"\n', r"c.csv line 2: malformed CSV row \(',' expected after '\"'\)"),
    ('id,title,text\n1,A,\n', r"c.csv line 2: empty text for id '1'"),
    ('id,title,text\n,A,x\n', r"c.csv line 2: 'id' must be a non-empty string or integer \(the passage id\), got ''"),
    ('name,body\nx,y\n', r"c.csv line 2: no id field"),
    ('id,id,text\n', r"c.csv line 1: the header row must name every column once"),
    ('', r"c.csv is empty"),
    (b'id,text\n1,ok\n2,caf\xe9\n', r"c.csv line 3: not valid UTF-8 text \(byte 0xe9"),
])
def test_csv_errors_name_file_and_line(tmp_path, content, message):
    with pytest.raises(InputError, match=message):
        read_corpus(write(tmp_path / "c.csv", content))


def test_explicit_fields_and_metadata_fields(tmp_path):
    p = write(tmp_path / "c.csv", "key,heading,passage,year,lang\nk1,H,some text,2001,en\n")
    c = read_corpus(p, id_field="key", title_field="heading", text_field="passage", metadata_fields=["lang"])
    assert c.ids == ("k1",) and c.titles == ("H",) and c.texts == ("some text",) and c.meta(0) == {"lang": "en"}
    assert read_corpus(p, id_field="key", text_field="passage", metadata_fields=[]).meta(0) == {}
    with pytest.raises(InputError, match=r"metadata field\(s\) 'langs' appear in no record"):
        read_corpus(p, id_field="key", text_field="passage", metadata_fields=["langs"])
    with pytest.raises(InputError, match=r"c.csv line 2: missing field 'body' \(the passage text\)"):
        read_corpus(p, id_field="key", text_field="body")
    # explicit fields on a hopgraph-format JSON-lines file: the generic reader, same checks
    j = write(tmp_path / "c.jsonl", '{"id": "a", "text": "x", "summary": "s", "n": 1}\n')
    assert read_corpus(j, text_field="summary").texts == ("s",)
    assert read_corpus(j, metadata_fields=["n"]).meta(0) == {"n": 1}


def test_metadata_object_field_is_merged(tmp_path):
    p = write(tmp_path / "c.jsonl", '{"_id": "a", "text": "x", "metadata": {"lang": "en"}, "year": 3}\n')
    assert read_corpus(p).meta(0) == {"lang": "en", "year": 3}


@pytest.mark.parametrize("content, message", [
    ('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"\n', r"c.jsonl line 2: invalid JSON"),
    ('{"_id": "a", "text": "x"}\n{"_id": "b"}\n', r"c.jsonl line 2: missing field 'text' \(the passage text\)"),
    ('{"_id": "a", "text": "x"}\n{"text": "y"}\n', r"c.jsonl line 2: missing field '_id' \(the passage id\)"),
    ('{"_id": "a", "text": "x"}\n\n{"_id": "a", "text": "y"}\n',
     r"c.jsonl line 3: duplicate id 'a' \(first seen on line 1\)"),
    ('{"_id": "a", "text": 3}\n', r"c.jsonl line 1: 'text' must be a string \(the passage text\), got int"),
    ('{"_id": "a", "text": "x", "title": 5}\n', r"c.jsonl line 1: 'title' must be a string \(or absent/null: the title\)"),
    ('{"_id": "a", "text": "x", "metadata": 5}\n', r"c.jsonl line 1: 'metadata' must be a JSON object"),
    (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "\xff"}\n', r"c.jsonl line 2: not valid UTF-8"),
    ('{"name": "a", "words": "x"}\n', r"c.jsonl line 1: no id field"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, content, message):
    with pytest.raises(InputError, match=message):
        read_corpus(write(tmp_path / "c.jsonl", content))


def test_folder_of_text_files(tmp_path):
    d = tmp_path / "docs"
    (d / "guide").mkdir(parents=True)
    (d / ".git").mkdir()
    write(d / "guide" / "intro.md", "```\n# not a title\n```\nSome intro.\n\n## Getting started ##\nbody\n")
    write(d / "b.txt", "# a txt file has no Markdown title\nplain text")
    write(d / "a.md", "no heading here")
    write(d / "ignored.rst", "not read")
    write(d / ".git" / "x.txt", "hidden")
    c = read_corpus(d)
    assert c.ids == ("a.md", "b.txt", "guide/intro.md")
    assert c.titles == ("a", "b", "Getting started")
    assert c.texts[1] == "# a txt file has no Markdown title\nplain text"
    write(d / "empty.md", "  \n")
    with pytest.raises(InputError, match=r"empty.md: empty text"):
        read_corpus(d)
    write(d / "empty.md", b"ok\n\xc3(")
    with pytest.raises(InputError, match=r"empty.md line 2: not valid UTF-8"):
        read_corpus(d)
    (tmp_path / "e" / ".hidden").mkdir(parents=True)
    write(tmp_path / "e" / ".hidden" / "x.txt", "hidden"), write(tmp_path / "e" / "notes.rst", "not read")
    with pytest.raises(InputError, match="holds no .txt or .md files"):
        read_corpus(tmp_path / "e")
    with pytest.raises(InputError, match="folder of text files"):
        read_corpus(d, id_field="id")


def test_markdown_title():
    assert markdown_title("text\n  ### Deep #\n# later") == "Deep"
    assert markdown_title("#hashtag only\n") is None


def test_detection_by_content_and_unknown_format(tmp_path):
    assert read_corpus(write(tmp_path / "c.data", '[{"id": "a", "text": "x"}]')).ids == ("a",)
    assert read_corpus(write(tmp_path / "c.txt", '{"_id": "a", "text": "x"}\n')).ids == ("a",)
    assert read_corpus(write(tmp_path / "c.json", '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n')).ids \
        == ("a", "b")
    with pytest.raises(InputError, match="unknown format"):
        read_corpus(write(tmp_path / "c.xml", "<doc/>"))
    with pytest.raises(InputError, match="does not exist"):
        read_corpus(tmp_path / "missing.csv")


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"_id": ["a", "b"], "title": ["A", None], "text": ["x", "y"], "n": [1, 2]}), p)
    c = read_corpus(p)
    assert c.ids == ("a", "b") and c.titles == ("A", "") and c.meta(1) == {"n": 2}
    import datetime
    import decimal

    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "day": [datetime.date(2001, 2, 3)],
                             "price": pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)),
                             "ok": [True], "tags": [["p", "q"]]}), p)
    assert read_corpus(p).meta(0) == {"day": "2001-02-03", "price": 1.25, "ok": True, "tags": ["p", "q"]}
    pq.write_table(pa.table({"_id": ["a", "b", "a"], "text": ["x", "y", "z"]}), p)
    with pytest.raises(InputError, match=r"c.parquet row 3: duplicate id 'a' \(first seen on row 1\)"):
        read_corpus(p)
    pq.write_table(pa.table({"_id": ["a", "b"], "text": ["x", None]}), p)
    with pytest.raises(InputError, match=r"c.parquet row 2: missing field 'text'"):
        read_corpus(p)
    write(p, b"not parquet at all")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_corpus(p)


def test_coerce_and_index_build_accept_any_path(tmp_path):
    p = write(tmp_path / "c.csv", "id,text\nx,alpha beta\ny,gamma delta\n")
    assert Corpus.coerce(p).ids == ("x", "y") and Corpus.coerce(str(p)).ids == ("x", "y")
    index = hopgraph.Index.build(p, embedder="hashing-16", pipelines=["bm25"], progress=False)
    assert index.search(["gamma"], pipeline="bm25", k=1)[0][0].id == "y"
    assert json.loads(json.dumps(hopgraph.__all__)).count("read_corpus") == 1


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(InputError, match=r"c.parquet: reading Parquet needs pyarrow \(pip install 'hopgraph\[parquet\]'\)"):
        read_corpus(write(tmp_path / "c.parquet", b"PAR1"))


def test_beir_empty_metadata_object(tmp_path):
    p = write(tmp_path / "corpus.jsonl", '{"_id": "d", "title": "", "text": "t", "metadata": {}}\n')
    assert read_corpus(p).metadata == ("",)
