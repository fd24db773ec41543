"""One set of record rules for every corpus input: records, JSON lines, JSON arrays, CSV."""
import json
from pathlib import Path

import pytest

from hopgraph import Corpus, InputError, read_corpus
from hopgraph.engine.components.records import MAX_ID_BYTES


def _problem(error: InputError) -> str:
    """The message after the location (``SOURCE line 2: ...`` → ``...``)."""
    return str(error).split(": ", 1)[1]


@pytest.mark.parametrize("bad", [
    {"text": "x"},
    {"id": None, "text": "x"},
    {"id": "", "text": "x"},
    {"id": True, "text": "x"},
    {"id": "b"},
    {"id": "b", "text": None},
    {"id": "b", "text": 3},
    {"id": "b", "text": "  "},
    {"id": "b", "text": "x", "title": 0},
    {"id": "b", "text": "x", "metadata": [1]},
    {"id": "b", "text": "x", "title": "\udc80"},
    {"id": "a", "text": "again"},
])
def test_every_input_path_applies_the_same_rules(tmp_path, bad):
    records = [{"id": "a", "text": "first"}, bad]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8", errors="surrogatepass")
    array = tmp_path / "c.json"
    array.write_text(json.dumps(records), encoding="utf-8", errors="surrogatepass")
    errors = []
    for read in (lambda: Corpus.from_records(records), lambda: Corpus.from_jsonl(jsonl), lambda: read_corpus(jsonl),
                 lambda: read_corpus(array)):
        with pytest.raises(InputError) as e:
            read()
        errors.append(_problem(e.value))
    assert len(set(e.replace("record 0", "line 1") for e in errors)) == 1, errors


def test_metadata_rules_are_shared(tmp_path):
    records = [{"id": "a", "text": "x", "year": None, "source": "wiki", "metadata": {"source": "explicit"}}]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps(records[0]) + "\n")
    beir = tmp_path / "beir.jsonl"
    beir.write_text(json.dumps({"_id": "a", **{k: v for k, v in records[0].items() if k != "id"}}) + "\n")
    expect = {"year": None, "source": "explicit"}  # nulls kept; the metadata object wins
    for corpus in (Corpus.from_records(records), Corpus.from_jsonl(jsonl), read_corpus(jsonl), read_corpus(beir)):
        assert corpus.meta(0) == expect
    assert Corpus.from_jsonl(jsonl).checksum == read_corpus(jsonl).checksum


def test_lists_follow_the_corpus_rules():
    with pytest.raises(InputError, match="holds no passages"):
        Corpus((), (), ())
    with pytest.raises(InputError, match=r"<memory> passage 1: empty text for id 'b'"):
        Corpus(("a", "b"), ("", ""), ("x", " "))


@pytest.mark.parametrize("literal, field, name", [
    ('{"score": NaN}', "score", "NaN"),
    ('{"range": [0, Infinity]}', "range[1]", "Infinity"),
    ('{"a": {"b": [{"c": -Infinity}]}}', "a.b[0].c", "-Infinity"),
])
def test_metadata_json_cannot_hold_is_refused_by_every_input_path(tmp_path, literal, field, name):
    """NaN and the infinities, at any depth of the metadata, are refused with the passage and the
    field named: as records, JSON lines, a JSON array, lists given to Corpus and typed CSV cells."""
    meta = json.loads(literal)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"id": "a", "text": "first"}\n{"id": "b", "text": "x", "metadata": ' + literal + "}\n")
    array = tmp_path / "c.json"
    array.write_text('[{"id": "a", "text": "first"},\n{"id": "b", "text": "x", "metadata": ' + literal + "}]")
    problem = f"metadata field {field!r} is {name}, which JSON cannot hold"
    for read, where in ((lambda: Corpus.from_records([{"id": "a", "text": "first"}, {"id": "b", "text": "x",
                                                                                       "metadata": meta}]),
                         "<records> record 1 ('b')"),
                        (lambda: Corpus.from_jsonl(jsonl), f"{jsonl} line 2 ('b')"),
                        (lambda: read_corpus(jsonl), f"{jsonl} line 2 ('b')"),
                        (lambda: read_corpus(array), f"{array} line 2 ('b')"),
                        (lambda: Corpus(("a", "b"), ("", ""), ("first", "x"), metadata=("", literal)),
                         "<memory> passage 1 ('b')")):
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value).startswith(f"{where}: {problem}"), str(e.value)


def test_typed_csv_metadata_refuses_a_non_finite_float(tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("id,text,score\na,first,1.5\nb,second,nan\n")
    assert read_corpus(csv).meta(1) == {"score": "nan"}  # inferred: text
    with pytest.raises(InputError, match=rf"^{csv} line 3: metadata field 'score' is NaN"):
        read_corpus(csv, metadata_types={"score": "float"})


def test_ids_are_bounded_in_bytes_of_utf8_by_every_input_path(tmp_path):
    longest = "é" * (MAX_ID_BYTES // 2)  # two bytes each: exactly the limit
    assert Corpus.from_records([{"id": longest, "text": "x"}]).ids == (longest,)
    over = longest + "a"
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"id": "a", "text": "first"}) + "\n" + json.dumps({"id": over, "text": "x"}) + "\n")
    deep = tmp_path / "docs" / Path(*["d" * 250] * 4) / ("f" * 24 + ".txt")  # its id: 1032 bytes
    deep.parent.mkdir(parents=True)
    deep.write_text("a text")
    for read, where, size in ((lambda: Corpus.from_records([{"id": over, "text": "x"}]), "<records> record 0: 'id'",
                               MAX_ID_BYTES + 1),
                              (lambda: Corpus.from_jsonl(jsonl), f"{jsonl} line 2: 'id'", MAX_ID_BYTES + 1),
                              (lambda: read_corpus(jsonl), f"{jsonl} line 2: 'id'", MAX_ID_BYTES + 1),
                              (lambda: Corpus(("a", over), ("", ""), ("x", "y")), "<memory> passage 1", MAX_ID_BYTES + 1),
                              (lambda: read_corpus(tmp_path / "docs"), str(deep), 1032)):
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value).startswith(f"{where}: the id ") and \
            str(e.value).endswith(f"has {size} bytes of UTF-8; the limit is {MAX_ID_BYTES}"), str(e.value)
