"""Shared-name links among a question's candidates (:mod:`hopgraph.engine.pipelines.shared_names`)."""
from __future__ import annotations

import math

import numpy as np

from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.components.extraction import extract
from hopgraph.engine.pipelines.g3rag.name_links import ChunkNames
from hopgraph.engine.pipelines.shared_names import chunk_names, shared_name_links

TEXTS = ["Zed Corp made it. Common Name was there.", "Common Name met Ann Lee.", "Ann Lee and Zed Corp met.",
         "Common Name slept.", "Zed Corp was founded in Oslo. Common Name ran it.", "Common Name left.",
         "Nothing here.", "Ann Lee sang in Oslo."]


def _extraction():
    return extract(Corpus.from_strings(TEXTS))


def _reference(ex, candidates, question):
    """The definition, name by name: the largest idf / ln N over the names two candidates both hold
    that are not a word n-gram of φ(question)."""
    from hopgraph.engine.components.extraction import canonical_name

    n = ex.n_chunks
    held = [{ex.names[int(m)] for c, m in zip(ex.node_chunk, ex.node_name) if c == p} for p in candidates]
    df = {}
    for c, m in {(int(c), int(m)) for c, m in zip(ex.node_chunk, ex.node_name)}:
        df[ex.names[m]] = df.get(ex.names[m], 0) + 1
    q = f" {canonical_name(question)} "
    out = np.zeros((len(candidates), len(candidates)))
    for a in range(len(candidates)):
        for b in range(len(candidates)):
            if a != b:
                ws = [math.log(n / df[x]) / math.log(n) for x in held[a] & held[b] if f" {x} " not in q]
                out[a, b] = max(ws, default=0.0)
    return out


def test_links_equal_the_definition_and_leave_the_questions_names_out():
    ex = _extraction()
    names = chunk_names(ex)
    for cand, question in (([0, 2, 4, 1, 7], "who?"), ([0, 2, 4, 1, 7], "Did Zed Corp hire Ann Lee?"),
                           ([6, 3, 5], "who?"), (list(range(8)), "the Oslo one")):
        got = shared_name_links(names, ex.names, np.array(cand), question)
        np.testing.assert_allclose(got, _reference(ex, cand, question), atol=1e-12)
        assert (got == got.T).all() and (np.diag(got) == 0).all() and (got >= 0).all() and (got <= 1).all()
    # 'zed corp' is held by 0, 2 and 4: linked with ln(8/3)/ln 8; 'common name' by five, weaker
    got = shared_name_links(names, ex.names, np.array([0, 4, 3]), "who?")
    assert math.isclose(got[0, 1], math.log(8 / 3) / math.log(8))
    assert 0 < got[1, 2] < got[0, 1]
    # a name the question holds links nothing; a passage without names is linked to none
    assert shared_name_links(names, ex.names, np.array([0, 4]), "What did Zed Corp do?")[0, 1] < got[0, 1]
    assert not shared_name_links(names, ex.names, np.array([6, 0, 4]), "who?")[0].any()


def test_empty_and_single_candidate_lists():
    ex = _extraction()
    names = chunk_names(ex)
    assert shared_name_links(names, ex.names, np.zeros(0, np.int64), "who?").shape == (0, 0)
    assert shared_name_links(names, ex.names, np.array([0]), "who?").tolist() == [[0.0]]


def test_the_passages_names_are_made_once_per_extraction():
    ex = _extraction()
    first = chunk_names(ex)
    assert chunk_names(ex) is first
    assert isinstance(first, ChunkNames) and first.n_chunks == len(TEXTS)
    assert _extraction().derived == {}  # a new extraction starts without


def test_an_extended_extraction_extends_the_names_instead_of_remaking_them(monkeypatch):
    from hopgraph.engine.components.extraction import extend_extraction

    old = extract(Corpus.from_strings(TEXTS[:5]))
    made = chunk_names(old)
    grown = extend_extraction(old, Corpus.from_strings(TEXTS), 5)
    expected = ChunkNames.from_extraction(grown)
    monkeypatch.setattr(ChunkNames, "from_extraction", classmethod(lambda cls, ex, titles=(): 1 / 0))
    names = chunk_names(grown)
    assert names is not made and names.n_chunks == len(TEXTS) and grown.previous_derived is None
    for field in ("indptr", "names", "idf", "title"):
        np.testing.assert_array_equal(getattr(names, field), getattr(expected, field))
    question = "Who ran it?"
    np.testing.assert_array_equal(shared_name_links(names, grown.names, np.arange(len(TEXTS)), question),
                                  shared_name_links(expected, grown.names, np.arange(len(TEXTS)), question))


def test_an_extended_extraction_whose_base_names_were_never_made_makes_them():
    from hopgraph.engine.components.extraction import extend_extraction

    grown = extend_extraction(extract(Corpus.from_strings(TEXTS[:5])), Corpus.from_strings(TEXTS), 5)
    names = chunk_names(grown)
    np.testing.assert_array_equal(names.names, ChunkNames.from_extraction(grown).names)
