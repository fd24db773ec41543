"""Zero-token extractor and JSON-lines import (SPEC §2 "Index")."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_dataset, write_lines

from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.errors import InputError
from hopgraph.engine.components.extraction import (canonical_name, extract, load_extractions, query_names,
                                        sentence_entities, split_sentences)


def small_corpus() -> Corpus:
    return Corpus.from_records([
        {"id": "a", "title": "Journal of Physics",
         "text": "The Journal of Physics is published by the American Institute of Physics. "
                 "Its editor is George T. Solomon of the University of Copenhagen since 1963."},
        {"id": "b", "title": "George T. Solomon",
         "text": "George T. Solomon is a Danish physicist. He was born in 1941 in Copenhagen."},
        {"id": "c", "title": "", "text": "no capitals here at all"},
    ])


def test_canonical_name_rules():
    assert canonical_name("The  Beatles'") == "beatles"
    assert canonical_name("Hello Love's") == "hello love"
    assert canonical_name("ＡＢＣ") == "abc"  # NFKC
    assert canonical_name("U.S.") == "u s"
    assert canonical_name("An American") == "american"
    assert canonical_name("The") == "the"  # an article alone is kept


def test_sentences_respect_abbreviations_and_initials():
    text = "J. R. R. Tolkien was born in the U.S. in 1892. He wrote books. Mr. Smith agreed! Done"
    assert split_sentences(text) == ["J. R. R. Tolkien was born in the U.S. in 1892.", "He wrote books.",
                                     "Mr. Smith agreed!", "Done"]
    assert split_sentences("one sentence without end") == ["one sentence without end"]


def test_sentence_entities_spans_connectors_numbers():
    ents = sentence_entities("The editor is George T. Solomon of the University of Copenhagen, with 1,000 staff "
                             "in January 1963 and Smith and Jones.")
    assert ents == ["George T Solomon", "University of Copenhagen", "1,000", "1963", "Smith", "Jones"]
    assert sentence_entities("Originally it was small.", common_words={"originally"}) == []
    assert sentence_entities("Wangliang is a spirit.", common_words={"originally"}) == ["Wangliang"]
    assert sentence_entities("In 12 days.", numbers=True) == []


def test_extract_arrays_and_groups():
    c = small_corpus()
    ex = extract(c)
    assert ex.n_chunks == 3 and ex.n_topics == 5
    assert ex.topic_chunk.tolist() == [0, 0, 1, 1, 2]
    names = ex.name_ids()
    # the title of b and the mention in a share φ -> same name id, two states (not merged)
    sol = names["george t solomon"]
    assert sorted(ex.node_chunk[ex.node_name == sol].tolist()) == [0, 1]
    # title state of chunk a is in both sentences of a; its description is the embedding text
    va = np.flatnonzero((ex.node_chunk == 0) & (ex.node_name == names["journal of physics"]))[0]
    assert sorted(ex.mention_topic[ex.mention_node == va].tolist()) == [0, 1]
    assert ex.texts[ex.node_text[va]] == c.embedding_texts()[0]
    # a non-title entity's description is its sentence, shared with the topic text (stored once)
    vc = np.flatnonzero((ex.node_chunk == 0) & (ex.node_name == names["university of copenhagen"]))[0]
    assert ex.node_text[vc] == ex.topic_text[1]
    assert len(ex.texts) == len(set(ex.texts))
    # chunk c has a topic but no entity
    assert (ex.node_chunk == 2).sum() == 0
    # incidences sorted by topic then node, unique
    key = ex.mention_topic.astype(np.int64) * ex.n_nodes + ex.mention_node
    assert (np.diff(key) > 0).all()
    assert extract(c, title_entities=False).name_ids().get("journal of physics") is not None  # still in text
    assert "1963" not in extract(c, numbers=False).name_ids()


def test_extract_is_deterministic():
    c = small_corpus()
    a, b = extract(c), extract(c)
    for f in ("topic_chunk", "topic_text", "node_chunk", "node_name", "node_text", "mention_node", "mention_topic"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert a.names == b.names and a.texts == b.texts


def test_cooccurring_names_matches_bruteforce():
    ex = extract(small_corpus())
    a, b, cnt = ex.cooccurring_names()
    expect: dict[tuple[int, int], int] = {}
    for t in range(ex.n_topics):
        nm = sorted({int(ex.node_name[v]) for v in ex.mention_node[ex.mention_topic == t]})
        for i in range(len(nm)):
            for j in range(i + 1, len(nm)):
                expect[(nm[i], nm[j])] = expect.get((nm[i], nm[j]), 0) + 1
    assert dict(zip(zip(a.tolist(), b.tolist()), cnt.tolist())) == expect


def test_query_names_ngram_match():
    ex = extract(small_corpus())
    ids = query_names(["Who edits the Journal of Physics in Copenhagen?"], ex.name_ids())[0]
    assert {ex.names[i] for i in ids} == {"journal of physics", "copenhagen"}


def test_load_extractions_roundtrip(tmp_path):
    c = small_corpus()
    p = write_lines(tmp_path / "ex.jsonl", [
        {"chunk_id": "b", "topics": [{"text": "Solomon is Danish.", "entities": [
            {"name": "George Solomon", "description": "a Danish physicist"}]}]},
        {"chunk_id": "a", "topics": [
            {"text": "The journal is old.", "entities": [{"name": "The Journal", "description": "old journal"},
                                                         {"name": "George Solomon", "description": "editor"}]},
            {"text": "Solomon edits it.", "entities": [{"name": "george solomon", "description": "the editor"}]}]},
    ])
    ex = load_extractions(p, c)
    assert ex.topic_chunk.tolist() == [0, 0, 1]  # sorted by chunk order t(c)
    gs = ex.name_ids()["george solomon"]
    states = np.flatnonzero(ex.node_name == gs)
    assert ex.node_chunk[states].tolist() == [0, 1]
    assert ex.texts[ex.node_text[states[0]]] == "editor the editor"
    assert sorted(ex.mention_topic[ex.mention_node == states[0]].tolist()) == [0, 1]


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: invalid JSON"),
    ({"topics": []}, "line 2: missing field 'chunk_id'"),
    ({"chunk_id": "zz", "topics": []}, "line 2: chunk_id 'zz' is not a passage"),
    ({"chunk_id": "a", "topics": []}, "line 2: chunk_id 'a' repeated (first on line 1)"),
    ({"chunk_id": "b", "topics": {}}, "line 2: 'topics' must be a list"),
    ({"chunk_id": "b", "topics": [{"text": ""}]}, "line 2: topic 0 needs a non-empty string 'text'"),
    ({"chunk_id": "b", "topics": [{"text": "x", "entities": [{"name": "!!"}]}]}, "line 2: topic 0 entity 0 needs"),
    ({"chunk_id": "b", "topics": [{"text": "x", "entities": [{"name": "X", "description": 3}]}]},
     "'description' must be a non-empty string"),
])
def test_load_extractions_errors_name_the_line(tmp_path, line, message):
    p = write_lines(tmp_path / "bad.jsonl", [{"chunk_id": "a", "topics": []}, line])
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_extractions(p, small_corpus())


@pytest.mark.slow
def test_extract_on_shared_corpus():
    """The shared MuSiQue corpus: more topics and states than passages, and every passage has at
    least one topic and one entity state (its cost is measured by bench/bench_scale.py)."""
    corpus = Corpus.from_jsonl(shared_dataset("musique") / "corpus.jsonl")
    ex = extract(corpus)
    assert ex.n_topics > len(corpus) and ex.n_nodes > len(corpus)
    assert np.bincount(ex.topic_chunk, minlength=len(corpus)).min() >= 1
    assert np.bincount(ex.node_chunk, minlength=len(corpus)).min() >= 1


def test_loaded_strings_stay_packed_and_bad_utf8_is_refused():
    from hopgraph.engine.components.corpus import PackedStrings
    from hopgraph.engine.errors import IndexFormatError
    from hopgraph.engine.components.extraction.data import packed
    from hopgraph.engine.storage import pack_strings

    strings = ["Ångström", "", "naïve café", "plain"]
    data, offsets = pack_strings(strings)
    loaded = packed(data, offsets, "texts")
    assert isinstance(loaded, PackedStrings) and list(loaded) == strings and loaded[2] == "naïve café"
    bad = data.copy()
    bad[0] = 0xFF  # not UTF-8
    with pytest.raises(IndexFormatError, match="texts: invalid UTF-8"):
        packed(bad, offsets, "texts")
    split = offsets.copy()
    split[1] = 1  # "Å" is two bytes: the second string would start inside it
    with pytest.raises(IndexFormatError, match="inside a UTF-8 character"):
        packed(data, split, "texts")
