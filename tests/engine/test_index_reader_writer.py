"""The engine writes and opens an index directory by itself (no façade): SegmentInfos as the commit
file holds it, IndexWriter commits (whole, then changes), IndexReader searches what was committed,
and a merge by a custom MergePolicy changes how the index is stored, never what a search returns."""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pytest

from hopgraph.engine import storage
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.components.shared import Components
from hopgraph.engine.embedders import resolve_embedder
from hopgraph.engine.errors import InputError
from hopgraph.engine.index import Committed, IndexContent, IndexReader, IndexWriter, merge_segments
from hopgraph.engine.params import RunSettings
from hopgraph.engine.pipelines import pipeline_class
from hopgraph.engine.storage import MergePolicy, SegmentInfos, TieredMergePolicy

PIPELINES = ("dense", "bm25", "g3rag")
QUESTIONS = ["Who designed the bridge in Bristol?", "Which club plays at Millbrook Park?"]


def passages(start: int, stop: int) -> Corpus:
    words = ["bridge", "river", "club", "park", "novel", "writer", "company", "engineer", "city", "team"]
    return Corpus.coerce([{"id": f"p{i}", "title": f"Topic {i % 7}",
                           "text": f"The {words[i % 10]} and the {words[(3 * i) % 10]} of place {i % 5}."}
                          for i in range(start, stop)])


def built(n: int) -> IndexContent:
    """An index of ``n`` passages built with the engine's parts alone."""
    embedder = resolve_embedder("hashing-64")
    corpus = passages(0, n)
    X = embedder.encode(corpus.embedding_texts())
    components = Components(X, corpus, embedder, None, False)
    settings = RunSettings(device="cpu")
    pipes = {name: pipeline_class(name)({}, settings=settings).fit(X, progress=False, components=components)
             for name in PIPELINES}
    return IndexContent(corpus, X, components, pipes, {}, embedder, embedder.name, settings=settings)


def appended(content: IndexContent, new: Corpus) -> None:
    """``new`` appended to ``content`` in place (every component and pipeline updated)."""
    start = len(content.X)
    X = storage.stack_rows([content.X, content.embedder.encode(new.embedding_texts())])
    corpus = content.corpus.concat(new)
    content.components.extend(X, corpus, start)
    content.X, content.corpus = X, corpus
    for pipe in content.pipelines.values():
        pipe.add(start, progress=False)


def search(content: IndexContent, pipeline: str) -> tuple[np.ndarray, np.ndarray]:
    Q = content.embedder.encode(QUESTIONS)
    return content.pipelines[pipeline].search(Q, 5, QUESTIONS)


def committed(written: SegmentInfos, content: IndexContent) -> Committed:
    return Committed.of(written.name, written.manifest(), content, infos=written)


def test_the_engine_writes_and_opens_an_index_directory(tmp_path):
    path = tmp_path / "idx"
    content = built(20)
    with IndexWriter(path) as w:
        since = committed(w.write_whole(content), content)
    appended(content, passages(20, 26))
    content.components.deleted = np.zeros(26, bool)
    content.components.deleted[[2, 21]] = True
    with IndexWriter(path, overwrite=True) as w:
        assert not w.conflicts(since)
        written = w.commit_changes(content, since)
    infos = SegmentInfos.read(path)
    assert infos == written and infos.name == storage.read_current(path)[0]
    assert infos.manifest() == json.loads((path / infos.name).read_text())
    assert infos.sizes == [20, 6] and infos.n_deleted == 2 and infos.content == infos.generation == 2
    assert infos.parent == "commit-000001.json" and infos.fields["corpus"]["n_live"] == 24
    with IndexReader.open(path, embedder="hashing-64") as reader:
        assert reader.infos == infos and reader.committed.n_rows == 26
        assert list(reader.content.corpus.ids) == list(content.corpus.ids)
        np.testing.assert_array_equal(reader.content.components.deleted, content.components.deleted)
        Q = content.embedder.encode(QUESTIONS)
        for name in PIPELINES:
            rows, scores = reader.search(Q, 5, name, QUESTIONS)
            want_rows, want_scores = search(content, name)
            np.testing.assert_array_equal(rows, want_rows)
            np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-7)
            assert not np.isin(rows, [2, 21]).any()
        rows, _ = reader.search(QUESTIONS, 5, "bm25")  # texts, embedded with the reader's embedder
        np.testing.assert_array_equal(rows, search(content, "bm25")[0])
        with pytest.raises(InputError, match="no fitted pipeline 'stitch'"):
            reader.search(Q, 5, "stitch")
    with IndexReader.open(path) as reader, pytest.raises(InputError, match="opened without an embedder"):
        reader.search(QUESTIONS, 5, "bm25")
    assert reader.closed


def test_a_writer_finds_another_writers_commit(tmp_path):
    path = tmp_path / "idx"
    content = built(12)
    with IndexWriter(path) as w:
        since = committed(w.write_whole(content), content)
    with IndexWriter(path, overwrite=True) as w:
        w.write_whole(content)  # another writer's whole commit: new content
    with IndexWriter(path, overwrite=True) as w:
        assert w.conflicts(since)
        assert "commit-000002.json" in str(w.stale(since, "a test"))


class NewestPair(MergePolicy):
    """Merge the two newest segments while more than two remain (never the base)."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def find_merge(self, sizes: Sequence[int], max_segments: int | None = None) -> tuple[int, int] | None:
        self.seen.append(list(sizes))
        return (len(sizes) - 2, len(sizes) - 1) if len(sizes) > 2 else None


def test_a_custom_merge_policy_decides_the_merges(tmp_path):
    path = tmp_path / "idx"
    content = built(12)
    with IndexWriter(path) as w:
        since = committed(w.write_whole(content), content)
    for start in (12, 15, 18, 21):
        appended(content, passages(start, start + 3))
        with IndexWriter(path, overwrite=True) as w:
            since = committed(w.commit_changes(content, since), content)
    assert SegmentInfos.read(path).sizes == [12, 3, 3, 3, 3]
    assert TieredMergePolicy(4).find_merge([12, 3, 3, 3, 3]) == (1, 4)  # the default would take all four
    policy = NewestPair()
    merges = merge_segments(path, policy)
    infos = SegmentInfos.read(path)
    assert policy.seen == [[12, 3, 3, 3, 3], [12, 3, 3, 6], [12, 3, 9], [12, 12]]
    assert [names for names, _ in merges] == [["seg-000004", "seg-000005"], ["seg-000003", merges[0][1]],
                                              ["seg-000002", merges[1][1]]]
    assert infos.sizes == [12, 12] and infos.content == since.content  # a merge keeps the content id
    assert infos.fields["merged"] == ["seg-000002", merges[1][1]]
    with IndexReader.open(path, embedder="hashing-64") as reader:
        for name in PIPELINES:
            rows, scores = reader.search(content.embedder.encode(QUESTIONS), 5, name, QUESTIONS)
            want_rows, want_scores = search(content, name)
            np.testing.assert_array_equal(rows, want_rows)
            np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-7)


def test_the_tiered_policy_refuses_a_bad_factor():
    for bad in (1, 0, 2.5, True):
        with pytest.raises(InputError, match="factor must be an integer >= 2"):
            TieredMergePolicy(bad)
