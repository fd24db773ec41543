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
    with pytest.raises(InputError, match="duplicate passage id"):
        Corpus(("a", "a"), ("", ""), ("x", "y"))
    with pytest.raises(KeyError, match="'zz' is not in corpus"):
        Corpus.from_strings(["q"]).position("zz")
