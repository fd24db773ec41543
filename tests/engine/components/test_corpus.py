"""Corpus reading and checks: JSON-lines round trip and checksum, errors naming the file and line,
hostile inputs (non-UTF-8, byte-order mark, bad titles, lone surrogates, empty or wrongly typed
fields) and the metadata rules."""
import json

import pytest
from conftest import write_lines

from hopgraph import Corpus, InputError


def test_jsonl_roundtrip_and_checksum(tmp_path):
    p = write_lines(tmp_path / "c.jsonl", [
        json.dumps({"id": "a", "title": "T", "text": "hello world"}),
        "",
        json.dumps({"id": 7, "text": "no title"}),
    ])
    c = Corpus.from_jsonl(p)
    assert c.ids == ("a", "7") and c.titles == ("T", "") and len(c) == 2
    assert c.embedding_texts() == ["T: hello world", "no title"]
    assert c.position("7") == 1
    c.write_jsonl(tmp_path / "d.jsonl")
    assert Corpus.from_jsonl(tmp_path / "d.jsonl").checksum == c.checksum
    assert Corpus.from_strings(["x", "y"]).checksum != Corpus.from_strings(["y", "x"]).checksum


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], "line 2: duplicate id 'a' (first seen on line 1)"),
    (['{"id": "a", "text": "x"}', '{"id": "b", "text": "   "}'], "line 2: empty text"),
    (['{"id": "a", "text": "x"}', '{"id": "b", "text": "y"', ], "line 2: invalid JSON"),
    (['{"text": "x"}'], "line 1: missing field 'id'"),
    (['{"id": "a"}'], "line 1: missing field 'text'"),
    (['[1, 2]'], "line 1: expected a JSON object"),
    (['{"id": "a", "text": 3}'], "line 1: 'text' must be a string"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, lines, message):
    p = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(InputError) as e:
        Corpus.from_jsonl(p)
    assert message in str(e.value) and "bad.jsonl" in str(e.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        Corpus.from_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="holds no passages"):
        Corpus.from_jsonl(write_lines(tmp_path / "e.jsonl", [""]))


def test_from_strings_and_records_validate():
    assert Corpus.coerce(["a b", "c"]).ids == ("0", "1")
    assert Corpus.coerce([{"id": "x", "text": "t"}]).ids == ("x",)
    with pytest.raises(InputError, match="empty text"):
        Corpus.from_strings(["ok", ""])
    with pytest.raises(InputError, match="item 1 is int"):
        Corpus.from_strings(["ok", 3])
    with pytest.raises(InputError, match=r"passage 1: duplicate id 'a' \(first seen on passage 0\)"):
        Corpus(("a", "a"), ("", ""), ("x", "y"))
    with pytest.raises(InputError, match=r"record 1: duplicate id 'x' \(first seen on record 0\)"):
        Corpus.from_records([{"id": "x", "text": "t"}, {"id": "x", "text": "u"}])
    with pytest.raises(KeyError, match="'zz' is not in corpus"):
        Corpus.from_strings(["q"]).position("zz")


# ---------------------------------------------------------------- hostile corpora
def test_non_utf8_file_names_file_and_line(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes(b'{"id": "a", "text": "ok"}\n\n{"id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"latin1\.jsonl line 3: not valid UTF-8 text \(byte 0xe9"):
        Corpus.from_jsonl(p)


def test_utf8_bom_is_skipped(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"id": "a", "text": "x"}\n')
    assert Corpus.from_jsonl(p).ids == ("a",)


@pytest.mark.parametrize("title", [0, 1, False, ["t"], {"t": 1}])
def test_non_string_title_is_refused(tmp_path, title):
    p = write_lines(tmp_path / "t.jsonl", [{"id": "a", "text": "x", "title": title}])
    with pytest.raises(InputError, match=r"t\.jsonl line 1: 'title' must be a string"):
        Corpus.from_jsonl(p)
    with pytest.raises(InputError, match=r"<records> record 1: 'title' must be a string"):
        Corpus.from_records([{"id": "a", "text": "x"}, {"id": "b", "text": "y", "title": title}])


def test_null_or_missing_title_is_empty():
    c = Corpus.from_records([{"id": "a", "text": "x", "title": None}, {"id": "b", "text": "y"}])
    assert c.titles == ("", "")


def test_lone_surrogates_are_refused(tmp_path):
    p = write_lines(tmp_path / "s.jsonl", ['{"id": "a", "text": "x"}', '{"id": "b", "title": "\\udc80", "text": "y"}'])
    with pytest.raises(InputError, match=r"s\.jsonl line 2: 'title': not valid Unicode text"):
        Corpus.from_jsonl(p)
    with pytest.raises(InputError, match="item 0: not valid Unicode"):
        Corpus.from_strings(["bad \ud800"])


@pytest.mark.parametrize("corpus, message", [
    ([], "holds no passages"),
    ((), "holds no passages"),
    (None, "got NoneType"),
    (3, "got int"),
    (b"bytes", "got bytes"),
    ({"id": "a", "text": "x"}, "got dict"),
    ([{"id": "a", "text": "x"}, "b"], "record 1: expected an object"),
])
def test_coerce_refuses_empty_and_wrong_types(corpus, message):
    with pytest.raises(InputError, match=message):
        Corpus.coerce(corpus)


def test_metadata_object_is_the_metadata_merged_with_extra_fields(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", [
        json.dumps({"id": "a", "text": "x", "metadata": {"url": "https://a", "year": 1999, "tags": ["t"]}}),
        json.dumps({"id": "b", "text": "y", "source": "wiki", "metadata": {"source": "explicit", "n": 2}}),
        json.dumps({"id": "c", "text": "z", "lang": "en"}),
        json.dumps({"id": "d", "text": "w", "metadata": None}),
        json.dumps({"id": "e", "text": "v", "metadata": {"metadata": {"nested": True}}}),
    ])
    c = Corpus.from_jsonl(p)
    assert c.meta(0) == {"url": "https://a", "year": 1999, "tags": ["t"]}  # the object's keys, not nested
    assert c.meta(1) == {"source": "explicit", "n": 2}                       # merged; the metadata object wins
    assert c.meta(2) == {"lang": "en"} and c.meta(3) == {} and c.meta(4) == {"metadata": {"nested": True}}
    c.write_jsonl(tmp_path / "back.jsonl")  # written as an explicit metadata object: an exact round trip
    back = Corpus.from_jsonl(tmp_path / "back.jsonl")
    assert [back.meta(i) for i in range(5)] == [c.meta(i) for i in range(5)] and back.checksum == c.checksum
    records = Corpus.from_records([{"id": "r", "text": "t", "metadata": {"k": 1}, "extra": 2}])
    assert records.meta(0) == {"k": 1, "extra": 2}


@pytest.mark.parametrize("value", ['"a string"', "[1, 2]", "3", "true"])
def test_non_object_metadata_is_refused_naming_file_and_line(tmp_path, value):
    p = write_lines(tmp_path / "bad.jsonl", ['{"id": "a", "text": "x"}', f'{{"id": "b", "text": "y", "metadata": {value}}}'])
    with pytest.raises(InputError, match=r"bad\.jsonl line 2: 'metadata' must be a JSON object"):
        Corpus.from_jsonl(p)
    with pytest.raises(InputError, match="record 0: 'metadata' must be a JSON object"):
        Corpus.from_records([{"id": "b", "text": "y", "metadata": json.loads(value)}])
