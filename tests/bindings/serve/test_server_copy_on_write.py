"""hopgraph serve applies a write to a copy of the index in a writer process (or a writer thread):
searches are answered meanwhile from the last commit, the served object is never changed by the
write, and the commit is served (swapped in) before the write is answered; a writer process that
dies fails its write and changes nothing."""
from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from functools import partial

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import hopgraph  # noqa: E402
import hopgraph.serve.app as serve_app  # noqa: E402
from gated_writes import gated_add  # noqa: E402
from hopgraph.client import RequestRejected, ServiceError  # noqa: E402
from hopgraph.demo import demo_corpus  # noqa: E402
from hopgraph.serve import BackgroundServer, create_app  # noqa: E402
from hopgraph.serve.writer import ProcessWriter, ThreadWriter, process_embedder_entry  # noqa: E402

PIPES = ["dense", "bm25"]
NEW = [{"id": "cow-1", "title": "Axolotl", "text": "The axolotl regrows its limbs in the lakes of Mexico City."}]
QUESTION = "axolotl regrows limbs Mexico"


@pytest.fixture
def index_dir(tmp_path):
    c = demo_corpus()
    records = [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i]} for i in range(24)]
    path = tmp_path / "index"
    hopgraph.Index.build(records, embedder="hashing-64", pipelines=PIPES, progress=False).save(path)
    return path


def test_searches_are_answered_from_the_last_commit_while_a_writer_thread_applies_a_write(index_dir, monkeypatch):
    served = hopgraph.Index.load(index_dir, progress=False)
    entered, release, targets = threading.Event(), threading.Event(), []
    real_add = hopgraph.Index.add

    def add(self, *args, **kwargs):  # the index update of the write blocks until released
        targets.append(self)
        entered.set()
        assert release.wait(60)
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(hopgraph.Index, "add", add)
    X = served.X
    X_before = np.array(X)
    app = create_app(served, pipelines=PIPES, write_process=False)
    assert isinstance(app.state.live.writer, ThreadWriter)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        before = {p: [h.id for h in c.search(QUESTION, pipeline=p, k=5)[0]] for p in PIPES}
        state = dict(served.__dict__)

        def write() -> dict:
            with hopgraph.Client(srv.url) as w:
                return w.add(NEW)

        answer = pool.submit(write)
        assert entered.wait(60)
        try:
            for p in PIPES:  # answered while the write's update is in progress, from the last commit
                assert [h.id for h in c.search(QUESTION, pipeline=p, k=5)[0]] == before[p], p
            assert c.health()["passages"] == 24 and not answer.done()
            assert targets[0] is not served                            # the update runs on a copy
            assert served.__dict__.keys() == state.keys()              # the served object is untouched
            assert [k for k, v in state.items() if served.__dict__[k] is not v] == []
        finally:
            release.set()
        assert answer.result(60) == {"added": ["cow-1"], "replaced": [], "unchanged": [], "passages": 25,
                                     "committed": True, "commit": "commit-000002.json"}
        for p in PIPES:  # read-your-writes: the copy is served before the answer
            assert c.search(QUESTION, pipeline=p, k=1)[0][0].id == "cow-1", p
        assert app.state.live.index is served and served.n_live == 25  # the same object, swapped state
        assert served.X is not X
    np.testing.assert_array_equal(X, X_before)                         # the old arrays were never written
    assert len(targets) == 1


def wait_for(path, seconds: float = 60.0) -> str:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)
    return path.read_text()


def test_searches_are_answered_from_the_last_commit_while_the_writer_process_applies_a_write(
        index_dir, tmp_path, monkeypatch):
    served = hopgraph.Index.load(index_dir, progress=False)
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setattr(serve_app, "apply_add", partial(gated_add, gate=str(gate)))  # run by the writer process
    X = served.X
    X_before = np.array(X)
    app = create_app(served, pipelines=PIPES)
    assert isinstance(app.state.live.writer, ProcessWriter)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        before = {p: [h.id for h in c.search(QUESTION, pipeline=p, k=5)[0]] for p in PIPES}
        state = dict(served.__dict__)
        answer = pool.submit(lambda: hopgraph.Client(srv.url).add(NEW))
        pid = int(wait_for(gate / "entered"))
        try:
            assert pid != os.getpid()                                  # the update runs in another process
            for p in PIPES:  # answered while the write's update is in progress, from the last commit
                assert [h.id for h in c.search(QUESTION, pipeline=p, k=5)[0]] == before[p], p
            assert c.health()["passages"] == 24 and not answer.done()
            assert [k for k, v in state.items() if served.__dict__.get(k) is not v] == []
        finally:
            (gate / "release").touch()
        assert answer.result(60) == {"added": ["cow-1"], "replaced": [], "unchanged": [], "passages": 25,
                                     "committed": True, "commit": "commit-000002.json"}
        assert served.components.dense._index is not None             # warmed up before it was served
        for p in PIPES:  # read-your-writes: the commit is served before the answer
            assert c.search(QUESTION, pipeline=p, k=1)[0][0].id == "cow-1", p
        assert app.state.live.index is served and served.n_live == 25
    np.testing.assert_array_equal(X, X_before)
    assert hopgraph.Index.load(index_dir, progress=False).passage("cow-1")["title"] == "Axolotl"


def test_a_writer_process_killed_during_a_write_fails_it_and_changes_nothing(index_dir, tmp_path, monkeypatch):
    served = hopgraph.Index.load(index_dir, progress=False)
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setattr(serve_app, "apply_add", partial(gated_add, gate=str(gate)))
    app = create_app(served, pipelines=PIPES)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(lambda: hopgraph.Client(srv.url).add(NEW))
        os.kill(int(wait_for(gate / "entered")), signal.SIGKILL)
        with pytest.raises(ServiceError, match="HTTP 500.*POST /passages.*WriterProcessDied"):
            answer.result(60)
        assert c.health()["passages"] == 24 and c.search(QUESTION, pipeline="bm25", k=1)[0][0].id != "cow-1"
        assert hopgraph.Index.load(index_dir, progress=False).n_live == 24
        monkeypatch.undo()                                             # a new writer process takes the next write
        assert c.add(NEW) == {"added": ["cow-1"], "replaced": [], "unchanged": [], "passages": 25, "committed": True,
                              "commit": c.health()["commit"]["name"]}
        assert c.search(QUESTION, pipeline="bm25", k=1)[0][0].id == "cow-1"
    assert hopgraph.Index.load(index_dir, progress=False).n_live == 25


@pytest.mark.parametrize("write_process", [False, True])
def test_each_commit_loads_a_fresh_copy_and_a_failed_write_changes_nothing(index_dir, monkeypatch, write_process):
    served = hopgraph.Index.load(index_dir, progress=False)
    app = create_app(served, pipelines=PIPES, commit_window_ms=400, write_process=write_process)
    writer, copies = app.state.live.writer, []
    real_load = writer._load

    def load():  # the writer thread's copies (the writer process loads its own)
        copies.append(real_load())
        return copies[-1]

    monkeypatch.setattr(writer, "_load", load)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c:
        assert c.add(NEW)["committed"] is True
        assert c.delete("demo-1")["committed"] is True
        assert len(copies) == 2 and copies[0] is not copies[1]         # a fresh copy each commit (or its load)
        assert all(copy is not served for copy in copies)
        state = dict(served.__dict__)
        with pytest.raises(RequestRejected, match="HTTP 409.*'cow-1'"):
            c.add([{**NEW[0], "text": "Another text."}])               # a failing write: 409, nothing changed
        assert all(served.__dict__[k] is v for k, v in state.items()) and served.n_live == 24

        def write(records: list[dict]) -> dict:
            with hopgraph.Client(srv.url) as w:
                return w.add(records)

        with concurrent.futures.ThreadPoolExecutor(2) as pool:       # one window: a good write, then a bad one
            good = pool.submit(write, [{"id": "cow-2", "text": "A tardigrade survives the vacuum of space."}])
            time.sleep(0.15)                                           # the same new id, not yet committed:
            bad = pool.submit(write, [{"id": "cow-2", "text": "Already there."}])  # refused in the write path
            with pytest.raises(RequestRejected, match="HTTP 409.*'cow-2'"):
                bad.result(60)
            assert good.result(60)["committed"] is True              # applied again to a fresh copy
        assert c.search("tardigrade vacuum space", pipeline="bm25", k=1)[0][0].id == "cow-2"
        assert c.health()["passages"] == 25
    loaded = hopgraph.Index.load(index_dir, progress=False)
    assert loaded.n_live == 25 and loaded.passage("cow-2")["text"].startswith("A tardigrade")


def test_two_writes_of_one_new_id_the_second_is_refused_in_the_write_path(index_dir, monkeypatch):
    """Both writes pass the check before the write path (the id is not committed yet); the write path
    refuses the second (409) and commits the first."""
    served = hopgraph.Index.load(index_dir, progress=False)
    entered, release = threading.Event(), threading.Event()
    real_add = hopgraph.Index.add

    def add(self, *args, **kwargs):  # the first write's update blocks until released
        entered.set()
        assert release.wait(60)
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(hopgraph.Index, "add", add)
    app = create_app(served, pipelines=PIPES, write_process=False)
    live, writes, both_in = app.state.live, [], threading.Event()
    real_write = live.write

    async def write(op):  # counts the writes that enter the write path
        writes.append(op)
        if len(writes) == 2:
            both_in.set()
        return await real_write(op)

    monkeypatch.setattr(live, "write", write)
    with BackgroundServer(app) as srv, concurrent.futures.ThreadPoolExecutor(2) as pool:
        def post(text: str) -> dict:
            with hopgraph.Client(srv.url) as c:
                return c.add([{"id": "twice-1", "text": text}])

        first = pool.submit(post, "A pangolin rolls into a ball.")
        assert entered.wait(60)
        second = pool.submit(post, "A second pangolin passage.")
        assert both_in.wait(60)                                        # past the check: into the write path
        release.set()
        assert first.result(60)["added"] == ["twice-1"]
        with pytest.raises(RequestRejected, match="HTTP 409.*'twice-1'"):
            second.result(60)
    assert len(writes) == 2
    assert hopgraph.Index.load(index_dir, progress=False).passage("twice-1")["text"].startswith("A pangolin")


def test_an_index_in_memory_is_written_in_place(index_dir):
    c = demo_corpus()
    index = hopgraph.Index.build([{"id": c.ids[i], "text": c.texts[i]} for i in range(12)], embedder="hashing-64",
                                 pipelines=["bm25"], progress=False)
    with BackgroundServer(create_app(index, pipelines=["bm25"])) as srv, hopgraph.Client(srv.url) as client:
        assert client.add(NEW) == {"added": ["cow-1"], "replaced": [], "unchanged": [], "passages": 13,
                                   "committed": False, "commit": None}
        assert client.search(QUESTION, pipeline="bm25", k=1)[0][0].id == "cow-1"
    assert index.n_live == 13
