"""Incremental zero-token extraction for live indexes (SPEC §2 "Index" steps 1–4)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_dataset

from hopgraph.engine.components.extraction import builder as build_module
from hopgraph.engine.components.corpus import Corpus, read_corpus
from hopgraph.engine.errors import InputError
from hopgraph.engine.components.extraction import Extraction, extend_extraction, extract, lower_words
from hopgraph.engine.components.extraction.builder import ExtractionBuilder, read_passages
from hopgraph.engine.components.extraction.data import merge_names


def assert_same(a: Extraction, b: Extraction) -> None:
    for f in Extraction.ARRAYS:
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.n_chunks == b.n_chunks
    assert list(a.names) == list(b.names)
    assert list(a.texts) == list(b.texts)


def records(texts: list[tuple[str, str]], prefix: str = "p") -> list[dict]:
    return [{"id": f"{prefix}{i}", "title": t, "text": x} for i, (t, x) in enumerate(texts)]


OLD = [
    ("Alpha Centre", "Alpha Centre was founded by Maria Lopez in 1931. Maria Lopez later ran Alpha Centre."),
    ("Maria Lopez", "Maria Lopez is a chemist from Bravo City. She studied at Alpha Centre."),
    ("", "Bravo City is on the Delta River. Bravo City has a port."),
]
NEW = [
    ("Bravo City", "Bravo City is a port on the Delta River. Maria Lopez was born in Bravo City."),
    ("Zeta Prize", "The Zeta Prize was given to Maria Lopez in 1950."),
    ("", "Bravo City is on the Delta River. Bravo City has a port."),  # a repeated old passage
]


def grown(old: list, new: list) -> tuple[Corpus, Corpus]:
    full = Corpus.from_records(records(old + new))
    return full.take(np.arange(len(old))), full


def test_extend_equals_extract_when_no_new_common_word(demo_corpus):
    for start in (1, 10, 21, len(demo_corpus) - 1):
        old = extract(demo_corpus.take(np.arange(start)))
        assert_same(extend_extraction(old, demo_corpus, start), extract(demo_corpus))
    old_c, full = grown(OLD, NEW)
    old = extract(old_c)
    # joined descriptions (a state named in two sentences) exist in the old part, so the text ids
    # of the full extraction are prefix-stable only thanks to the builder's text order
    topic_or_title = set(old.topic_text.tolist()) | {old.texts.index(t) for t in old_c.embedding_texts()
                                                      if t in old.texts}
    assert set(old.node_text.tolist()) - topic_or_title
    ext = extend_extraction(old, full, len(OLD))
    assert_same(ext, extract(full))
    assert ext.texts[:len(old.texts)] == old.texts


def test_extend_reads_only_the_new_passages(monkeypatch):
    old_c, full = grown(OLD, NEW)
    old = extract(old_c)
    read: list[str] = []
    real = build_module.split_sentences
    monkeypatch.setattr(build_module, "split_sentences", lambda text: read.append(text) or real(text))
    extend_extraction(old, full, len(OLD))
    assert read == [x for _, x in NEW]


def test_old_sentence_initial_span_is_kept_until_compaction():
    """The documented approximation: a new passage writing ``traditional`` in lower case makes
    :func:`extract` drop the one-word span ``Traditional`` opening an old sentence; the
    extension keeps it (the old passages are not re-read). New passages follow the grown corpus."""
    old_c, full = grown([("", "Traditional music is played in Kora Town.")],
                        [("", "They sing traditional songs."), ("", "Traditional dances are rare.")])
    old = extract(old_c)
    ext, exact = extend_extraction(old, full, 1), extract(full)
    name = lambda ex, v: ex.names[ex.node_name[v]]  # noqa: E731
    states = lambda ex: [(int(ex.node_chunk[v]), name(ex, v)) for v in range(ex.n_nodes)]  # noqa: E731
    assert states(ext) == [(0, "kora town"), (0, "traditional")]
    assert states(exact) == [(0, "kora town")]  # chunk 2's "Traditional" is dropped by both
    # the same as extracting the old passages with their own words and the new ones with all words
    b = ExtractionBuilder(len(full))
    read_passages(b, old_c, 0, True, True, lower_words(old_c.texts), False)
    read_passages(b, full, 1, True, True, lower_words(full.texts), False)
    assert_same(ext, b.build())


def test_nothing_new_returns_an_equal_extraction(demo_corpus):
    ex = extract(demo_corpus)
    same = extend_extraction(ex, demo_corpus, len(demo_corpus))
    assert_same(same, extract(demo_corpus))
    with pytest.raises(InputError, match="covers 30 passages, start is 29"):
        extend_extraction(ex, demo_corpus, 29)


def test_known_title_and_shared_texts_across_old_and_new():
    old_c, full = grown(OLD, NEW)
    old = extract(old_c)
    snapshot = {f: getattr(old, f).copy() for f in Extraction.ARRAYS}
    names, texts = list(old.names), list(old.texts)
    ext = extend_extraction(old, full, len(OLD))
    # the old extraction is untouched
    assert all(np.array_equal(getattr(old, f), snapshot[f]) for f in Extraction.ARRAYS)
    assert old.names == names and old.texts == texts
    # old chunks: same states (names remapped), topics, mentions, descriptions
    V, T = old.n_nodes, old.n_topics
    assert [ext.names[i] for i in ext.node_name[:V]] == [old.names[i] for i in old.node_name]
    assert np.array_equal(ext.node_text[:V], old.node_text) and np.array_equal(ext.topic_text[:T], old.topic_text)
    # "bravo city" (a name of the old passages) is the title of new passage 3: one name, states in 2, 3, 5
    bravo = ext.name_ids()["bravo city"]
    assert ext.node_chunk[ext.node_name == bravo].tolist() == [1, 2, 3, 5]
    assert "zeta prize" in ext.name_ids() and ext.names == sorted(ext.names)
    # passage 5 repeats passage 2: its topics and descriptions point at the old texts
    assert np.array_equal(ext.topic_text[ext.topic_chunk == 5], ext.topic_text[ext.topic_chunk == 2])
    assert len(ext.texts) == len(set(ext.texts))
    assert_same(ext, extract(full))


def test_loaded_extraction_without_cached_words(demo_corpus):
    start = 20
    old = extract(demo_corpus.take(np.arange(start)))
    loaded = Extraction.from_arrays({k: v for k, v in old.arrays().items() if not k.startswith("common_")}, start)
    assert loaded.common_words is None
    assert_same(extend_extraction(loaded, demo_corpus, start), extract(demo_corpus))
    saved = Extraction.from_arrays(old.arrays(), start)  # saved with the corpus's words: none rescanned
    assert set(saved.common_words) == old.common_words
    assert_same(extend_extraction(saved, demo_corpus, start), extract(demo_corpus))


def test_successive_adds_equal_one_add(demo_corpus):
    ex = extract(demo_corpus.take(np.arange(10)))
    for stop in (17, 25, 30):
        ex = extend_extraction(ex, demo_corpus.take(np.arange(stop)), ex.n_chunks)
    assert_same(ex, extract(demo_corpus))


def test_merge_names():
    names, a, b = merge_names(["b", "d", "f"], ["a", "d", "e", "g"])
    assert names == ["a", "b", "d", "e", "f", "g"]
    assert a.tolist() == [1, 2, 4] and b.tolist() == [0, 2, 3, 5]
    assert merge_names(["x"], [])[0] == ["x"] and merge_names([], ["x"])[2].tolist() == [0]


@pytest.mark.slow
def test_musique_extension_matches_the_documented_rule():
    """On a real corpus (80 % + 20 %) the extension is exactly the old passages extracted with their
    own words and the new ones with the grown corpus's words, and close to a full re-extraction."""
    corpus = read_corpus(shared_dataset("musique") / "corpus.jsonl")
    start = int(0.8 * len(corpus))
    old_c = corpus.take(np.arange(start))
    ext = extend_extraction(extract(old_c), corpus, start)
    b = ExtractionBuilder(len(corpus))
    read_passages(b, old_c, 0, True, True, lower_words(old_c.texts), False)
    read_passages(b, corpus, start, True, True, lower_words(corpus.texts), False)
    assert_same(ext, b.build())
    full = extract(corpus)
    assert full.n_nodes <= ext.n_nodes <= full.n_nodes * 1.001


def test_merged_names_read_a_stored_vocabulary_without_copying_it():
    from hopgraph.engine.components.corpus import PackedStrings
    from hopgraph.engine.components.extraction.data import MergedStrings
    from hopgraph.engine.storage import pack_strings

    stored = PackedStrings(*pack_strings(["b", "d", "f"]))
    names, a, b = merge_names(stored, ["a", "d", "e", "g"])
    assert isinstance(names, MergedStrings) and list(names) == ["a", "b", "d", "e", "f", "g"]
    assert [names[i] for i in range(len(names))] == list(names) and names[-1] == "g"
    again, a2, b2 = merge_names(names, ["c", "h"])           # a second insertion flattens
    assert list(again) == ["a", "b", "c", "d", "e", "f", "g", "h"] and again.base is stored
    assert a.tolist() == [1, 2, 4] and b2.tolist() == [2, 7]


def test_successive_adds_to_a_stored_extraction_never_build_a_dict_of_every_text(demo_corpus, monkeypatch):
    """The stored texts' hash table travels with each extension: no add reads every text again."""
    ex = extract(demo_corpus.take(np.arange(10)))
    loaded = Extraction.from_arrays(ex.arrays(), 10)
    assert loaded.text_index is not None and loaded.text_index.table is not None
    monkeypatch.setattr(Extraction, "text_lookup", lambda self: pytest.fail("a dict over every text was built")
                        if self.text_index is None else self.text_index)
    for stop in (17, 25, 30):
        loaded = extend_extraction(loaded, demo_corpus.take(np.arange(stop)), loaded.n_chunks)
        assert loaded.text_index is not None and loaded.text_index.table is not None
    assert_same(loaded, extract(demo_corpus))
