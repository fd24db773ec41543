"""Writes that answer honestly: a retried add succeeds naming the commit, an asynchronous write is
followed at GET /commits/{id}, a client waits for a write longer than for a search and says what a
timeout means, and the writer runs at a priority a steady search load does not starve."""
from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

import hopgraph  # noqa: E402
from hopgraph.client import RequestRejected, ServiceError  # noqa: E402
from hopgraph.demo import demo_corpus  # noqa: E402
from hopgraph.serve import BackgroundServer, create_app  # noqa: E402
from hopgraph.serve.batcher import WRITER_NICE  # noqa: E402


@pytest.fixture
def index_dir(tmp_path):
    c = demo_corpus()
    path = tmp_path / "index"
    hopgraph.Index.build([{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i]} for i in range(20)],
                         embedder="hashing-64", pipelines=["bm25"], progress=False).save(path)
    return path


def wait_for(client: hopgraph.Client, write_id: str, seconds: float = 60) -> dict:
    end = time.monotonic() + seconds
    while True:
        state = client.commit(write_id)
        if state["status"] != "pending" or time.monotonic() > end:
            return state
        time.sleep(0.05)


def test_a_repeated_add_is_a_success_naming_the_commit(index_dir):
    """The same id with the same title, text and metadata again is "unchanged" (alone: answered without
    a write); beside a new passage only the new one is added; other content under a held id is 409."""
    new = {"id": "n1", "title": "Quokka", "text": "The quokka lives on Rottnest Island.", "metadata": {"a": 1}}
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])) as srv, \
            hopgraph.Client(srv.url) as c:
        first = c.add([new])
        commits = c.health()["commit"]["commits_by_server"]
        again = c.add([new])
        assert again == {"added": [], "replaced": [], "unchanged": ["n1"], "passages": 21, "committed": True,
                         "commit": first["commit"]}
        assert c.health()["commit"]["commits_by_server"] == commits  # nothing was written
        both = c.add([new, {"id": "n2", "text": "The numbat eats termites."}])
        assert both["added"] == ["n2"] and both["unchanged"] == ["n1"] and both["passages"] == 22
        assert both["commit"] == c.health()["commit"]["name"] != first["commit"]
        with pytest.raises(RequestRejected, match="HTTP 409.*'n1'"):
            c.add([{**new, "metadata": {"a": 2}}])


def test_an_asynchronous_write_is_followed_at_its_commit_id(index_dir):
    """?wait=false: 202 and an id once the checks pass; GET /commits/{id} says pending, then committed
    with the answer a waiting write gets; a write that fails in the write path is "failed" with the
    status it would have answered; bad input and unknown ids are still refused at once."""
    app = create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"], commit_window_ms=300)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c:
        accepted = c.add([{"id": "a1", "text": "The axolotl regrows its limbs."}], wait=False)
        assert set(accepted) == {"id", "status"} and accepted["status"] == "pending"
        assert c.commit(accepted["id"])["status"] == "pending"  # inside its commit window
        state = wait_for(c, accepted["id"])
        assert state["status"] == "committed" and state["error"] is None
        assert state["result"]["added"] == ["a1"] and state["result"]["commit"] == c.health()["commit"]["name"]
        assert c.search("axolotl limbs", pipeline="bm25", k=1)[0][0].id == "a1"
        gone = c.delete("a1", wait=False)
        assert wait_for(c, gone["id"])["result"]["deleted"] == "a1"
        with pytest.raises(hopgraph.client.PassageNotFound):
            c.delete("no-such-id", wait=False)
        with httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
            bad = h.post("/passages", params={"wait": "false"}, json={"passages": [{"id": "x", "text": "  "}]})
            assert bad.status_code == 422 and "empty text" in bad.json()["detail"]
            assert h.get("/commits/nope").status_code == 404
            one, two = ({"passages": [{"id": "twice", "text": text}]} for text in ("One.", "Two."))
            first = h.post("/passages", params={"wait": "false"}, json=one)
            second = h.post("/passages", params={"wait": "false"}, json=two)  # the same new id, one window
            assert first.status_code == second.status_code == 202
        assert wait_for(c, first.json()["id"])["status"] == "committed"
        failed = wait_for(c, second.json()["id"])
        assert failed["status"] == "failed" and failed["error"]["status"] == 409 and "'twice'" in failed["error"]["detail"]
        assert c.passage("twice")["text"] == "One."


class SlowWrites(BaseHTTPRequestHandler):
    """A stand-in service whose writes take ``delay`` seconds and whose searches answer at once."""

    delay = 2.0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/passages"):
            time.sleep(self.delay)
        body = b'{"results": [{"hits": []}]}' if self.path == "/search" else b'{"added": []}'
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            pass

    def log_message(self, *args) -> None:
        pass


def test_the_client_waits_longer_for_writes_and_says_what_a_timeout_means():
    """A write slower than the client's write timeout is reported as no answer in N s that may still
    commit — not as an unreachable service; searches keep their own (shorter) timeout; a server that
    is not there is still "cannot reach"."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowWrites)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with hopgraph.Client(url, timeout=0.5, write_timeout=5) as c:
            assert c.add(["a text"]) == {"added": []}  # 2 s: beyond the search timeout, within the write one
            assert c.search("q", pipeline="bm25") == [[]]
        with hopgraph.Client(url, timeout=30, write_timeout=0.5) as c:
            with pytest.raises(ServiceError) as e:
                c.add(["a text"])
            message = str(e.value)
            assert f"no answer from the hopgraph service at {url} to POST /passages in 0.5 s" in message
            assert "the write may still commit" in message and "cannot reach" not in message
        assert hopgraph.Client(url).write_timeout == hopgraph.client.WRITE_TIMEOUT >= 900
    finally:
        server.shutdown()
        server.server_close()
    with hopgraph.Client(url, timeout=2) as c, pytest.raises(ServiceError, match="cannot reach"):
        c.add(["a text"])


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="thread priorities are Linux's")
def test_the_writer_runs_below_the_searches_but_not_at_the_lowest_priority(index_dir):
    """The writer thread's niceness is WRITER_NICE: above the searches', below the bulk lane's 19 (a lone
    write under a steady search load gets a share of the CPU instead of what is left)."""
    app = create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"], write_process=False)
    with BackgroundServer(app):
        import asyncio

        writer = app.state.live.writer
        nice = asyncio.run(writer.call(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    assert 0 < WRITER_NICE == nice < 19


def test_a_commit_is_retried_while_another_process_holds_the_write_lock(monkeypatch):
    """The lock retry (tenacity): a commit that finds the lock held is tried again until it goes
    through, or raises IndexLockedError once LOCK_RETRY_SECONDS have passed."""
    import asyncio

    from hopgraph.engine.errors import IndexLockedError
    from hopgraph.serve import commits

    tries = []

    async def held_twice() -> None:
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise IndexLockedError("held by another process")

    asyncio.run(commits._retry_locked(held_twice))
    assert len(tries) == 3
    monkeypatch.setattr(commits, "LOCK_RETRY_SECONDS", 0.3)

    async def always_held() -> None:
        raise IndexLockedError("held by another process")

    t0 = time.monotonic()
    with pytest.raises(IndexLockedError):
        asyncio.run(commits._retry_locked(always_held))
    assert 0.3 <= time.monotonic() - t0 < 5


def test_raw_search_without_a_pipeline_uses_the_servers_first(index_dir):
    """POST /search without "pipeline" searches with the server's default (GET /info's pipelines[0])."""
    app = create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        r = h.post("/search", json={"queries": ["bridge"], "k": 2})
        assert r.status_code == 200 and r.json()["pipeline"] == h.get("/info").json()["pipelines"][0] == "bm25"
        assert len(r.json()["results"][0]["hits"]) == 2
