"""Streaming, resumable `hopgraph index`: an interrupted build resumes from its
last finished chunk and gives the same index as an uninterrupted one."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hopgraph import HashingEmbedder
from hopgraph.engine import storage
from hopgraph.engine.ingest import streaming
from hopgraph.engine.errors import InputError
from hopgraph.index import Index


class FailingEmbedder(HashingEmbedder):
    """Hashing embedder that raises on encode call number ``fail_at`` (counting from 1)."""

    def __init__(self, fail_at: int | None) -> None:
        super().__init__(32)
        self.fail_at = fail_at
        self.calls: list[int] = []

    def encode(self, texts, batch_size=64, progress=False):
        self.calls.append(len(texts))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt("simulated interruption")
        return super().encode(texts, batch_size, progress)


def _arrays(path):
    gen = storage.segment_dirs(path)[-1]
    return {p.relative_to(gen).as_posix(): np.load(p) for p in sorted(gen.rglob("*.npy"))}


def test_interrupted_build_resumes_to_the_same_index(tmp_path, demo_corpus):
    n = len(demo_corpus)
    work = tmp_path / "idx.work"
    chunk = streaming.CHUNK_BATCHES                                  # batch size 1: chunks of 16 passages
    with pytest.raises(KeyboardInterrupt):
        Index.build(demo_corpus, embedder=FailingEmbedder(fail_at=2), pipelines=["dense", "bm25", "g3rag"],
                    work_dir=work, batch_size=1, progress=False)
    state = streaming.read_state(work)
    assert state["done"] == chunk and state["chunk_size"] == chunk   # the first chunk finished

    resumed_embedder = FailingEmbedder(fail_at=None)
    index = Index.build(demo_corpus, embedder=resumed_embedder, pipelines=["dense", "bm25", "g3rag"], work_dir=work,
                        batch_size=7, resume=True, progress=False)  # chunking of the first run is kept
    assert resumed_embedder.calls == [n - chunk]                     # finished chunks are not embedded again
    index.save(tmp_path / "resumed")

    fresh = Index.build(demo_corpus, embedder=HashingEmbedder(32), pipelines=["dense", "bm25", "g3rag"],
                        work_dir=tmp_path / "fresh.work", batch_size=1, progress=False)
    fresh.save(tmp_path / "fresh")
    a, b = _arrays(tmp_path / "resumed"), _arrays(tmp_path / "fresh")
    assert a.keys() == b.keys() and "embeddings.npy" in a
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    plain = Index.build(demo_corpus, embedder=HashingEmbedder(32), pipelines=[], progress=False)
    np.testing.assert_array_equal(a["embeddings.npy"], plain.X)    # streaming = in-memory build


def test_resume_refuses_another_corpus_or_embedder(tmp_path, demo_corpus):
    work = tmp_path / "w"
    with pytest.raises(KeyboardInterrupt):
        Index.build(demo_corpus, embedder=FailingEmbedder(fail_at=2), pipelines=[], work_dir=work,
                    batch_size=1, progress=False)
    with pytest.raises(InputError, match="cannot resume: .* another build"):
        Index.build(demo_corpus, embedder="hashing-16", pipelines=[], work_dir=work, resume=True, progress=False)
    (work / streaming.STATE_FILE).write_text("{not json")
    with pytest.raises(InputError, match="corrupt"):
        Index.build(demo_corpus, embedder="hashing-32", pipelines=[], work_dir=work, resume=True, progress=False)


def test_without_resume_a_stale_work_dir_is_discarded(tmp_path, demo_corpus):
    work = tmp_path / "w"
    work.mkdir()
    np.save(work / streaming.EMBEDDINGS_FILE, np.zeros((3, 32), np.float32))
    streaming.write_state(work, {"version": 1, "key": {}, "batch_size": 1, "chunk_size": 1, "done": 3})
    Index.build(demo_corpus, embedder="hashing-32", pipelines=[], work_dir=work, progress=False)
    assert streaming.read_state(work)["done"] == len(demo_corpus)


def test_a_work_dir_holding_other_files_is_refused_and_kept(tmp_path, demo_corpus):
    work = tmp_path / "w"
    work.mkdir()
    (work / "thesis.tex").write_text("years of work")
    for resume in (False, True):
        with pytest.raises(InputError, match="not a hopgraph work directory"):
            Index.build(demo_corpus, embedder="hashing-32", pipelines=[], work_dir=work, resume=resume,
                        progress=False)
    streaming.finish(work)
    assert (work / "thesis.tex").read_text() == "years of work"


def test_cli_resume_after_interruption(tmp_path, demo_corpus, monkeypatch, capsys):
    from hopgraph import cli
    import hopgraph.engine.embedders as embedders

    corpus_path = tmp_path / "corpus.jsonl"
    demo_corpus.write_jsonl(corpus_path)
    out = tmp_path / "idx"
    args = ["index", str(corpus_path), "--out", str(out), "--embedder", "hashing-32", "--pipelines", "dense",
            "--batch-size", "1", "-q"]
    real = embedders.HashingEmbedder.encode
    calls = {"n": 0}

    def flaky(self, texts, batch_size=64, progress=False):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated")
        return real(self, texts, batch_size, progress)

    monkeypatch.setattr(embedders.HashingEmbedder, "encode", flaky)
    capsys.readouterr()
    assert cli.main(args) == cli.EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err
    assert err == "hopgraph index: interrupted; add --resume to continue from the last finished chunk\n"
    assert not out.exists()
    state = json.loads((tmp_path / "idx.work" / streaming.STATE_FILE).read_text())
    assert state["done"] == 16                                       # one chunk of 16 × batch 1
    assert cli.main(args + ["--resume"]) == 0
    assert not (tmp_path / "idx.work").exists()                       # work dir removed after the save
    monkeypatch.setattr(embedders.HashingEmbedder, "encode", real)
    X = Index.build(demo_corpus, embedder="hashing-32", pipelines=[], progress=False).X
    np.testing.assert_array_equal(Index.load(out).X, X)
