"""One set of record rules for every corpus input: records, JSON lines, JSON arrays, CSV."""
import json

import pytest

from hopgraph import Corpus, InputError, read_corpus


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
