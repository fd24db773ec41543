"""hopgraph.Client and AsyncClient: request encoding, error mapping and event-loop handling without a
server; the end-to-end behaviour is tested against the real server in test_server.py."""
from __future__ import annotations

import numpy as np
import pytest

import hopgraph
from hopgraph.client import RequestRejected, ServiceError, encode_queries


def test_client_is_exported():
    assert hopgraph.Client is hopgraph.client.Client
    assert "Client" in hopgraph.__all__


def test_encode_texts_and_dicts():
    assert encode_queries("one question") == ["one question"]
    assert encode_queries(["a", {"text": "b"}, {"embedding": [1.0, 2.0]}]) == \
        ["a", {"text": "b"}, {"embedding": [1.0, 2.0]}]


def test_encode_embeddings_exactly():
    Q = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    encoded = encode_queries(Q)
    assert len(encoded) == 3
    assert np.array_equal(np.asarray([e["embedding"] for e in encoded], dtype=np.float32), Q)  # lossless
    assert encode_queries(Q[0]) == [encoded[0]]  # a vector is one query
    assert encode_queries([Q[1]]) == [encoded[1]]
    assert encode_queries(np.array([[1, 2]])) == [{"embedding": [1.0, 2.0]}]


@pytest.mark.parametrize("bad", [[3], [None], np.array(["a", "b"])])
def test_encode_rejects_other_types(bad):
    with pytest.raises(hopgraph.InputError):
        encode_queries(bad)


def test_error_classes():
    e = RequestRejected(422, "k must be between 1 and 100, got 0")
    assert isinstance(e, hopgraph.InputError) and isinstance(e, ServiceError) and isinstance(e, hopgraph.HopgraphError)
    assert e.status == 422 and "HTTP 422" in str(e) and e.detail.startswith("k must")
    assert not isinstance(ServiceError(401, "no key"), hopgraph.InputError)


def test_connection_refused_is_reported():
    pytest.importorskip("httpx")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with hopgraph.Client(f"http://127.0.0.1:{port}", timeout=2) as c, pytest.raises(ServiceError) as e:
        c.health()
    assert e.value.status is None and f"127.0.0.1:{port}" in str(e.value) and "Connect" in str(e.value)


def _mock_client(cls, handler):
    httpx = pytest.importorskip("httpx")
    return cls("http://hopgraph.test", transport=httpx.MockTransport(handler))


def test_default_pipeline_asks_info_once_and_ids_are_percent_encoded():
    import asyncio
    import json

    seen: list[tuple[str, str, object]] = []

    def handler(request):
        import httpx

        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.raw_path.decode(), body))
        if request.url.path == "/info":
            return httpx.Response(200, json={"pipelines": ["hybrid", "dense"]})
        if request.url.path == "/search":
            hit = {"id": "a/b", "title": "T", "score": 1.5, "rank": 1, "metadata": {"k": 1},
                   "text": None if body.get("with_text") is False else "txt"}
            return httpx.Response(200, json={"results": [{"hits": [hit]}]})
        if request.url.path == "/passages/a/b":
            return httpx.Response(200, json={"id": "a/b", "title": "T", "text": "txt", "metadata": {}})
        return httpx.Response(404, json={"detail": "no passage with id 'x'"})

    c = _mock_client(hopgraph.Client, handler)
    assert c.search("q") == [[hopgraph.Hit("a/b", 1.5, 1, "T", "txt", {"k": 1})]]
    assert c.search("q", with_text=False)[0][0].text is None
    assert [s[1] for s in seen] == ["/info", "/search", "/search"]  # /info asked once
    assert seen[1][2] == {"queries": ["q"], "pipeline": "hybrid", "k": 5}  # no with_text sent when on
    assert seen[2][2]["with_text"] is False and seen[2][2]["pipeline"] == "hybrid"
    assert c.passage("a/b")["id"] == "a/b" and seen[-1][1] == "/passages/a%2Fb"
    with pytest.raises(KeyError):
        c.passage("x")
    with pytest.raises(hopgraph.InputError):
        c.passage("")

    async def scenario():
        ac = _mock_client(hopgraph.AsyncClient, handler)
        async with ac:
            assert await ac.search("q", pipeline="dense", k=2) == [[hopgraph.Hit("a/b", 1.5, 1, "T", "txt", {"k": 1})]]
            assert seen[-1][2]["pipeline"] == "dense" and seen[-1][2]["k"] == 2
            await ac.search("q")
            assert [s[1] for s in seen[-2:]] == ["/info", "/search"] and seen[-1][2]["pipeline"] == "hybrid"
            assert (await ac.passage("a/b"))["title"] == "T"
    asyncio.run(scenario())


def test_server_serving_nothing_is_reported():
    def handler(request):
        import httpx
        return httpx.Response(200, json={"pipelines": []})

    with pytest.raises(ServiceError, match="serves no pipeline"):
        _mock_client(hopgraph.Client, handler).search("q")


def _echo_handler(seen: list):
    def handler(request):
        import json

        import httpx

        body = json.loads(request.content) if request.content else None
        seen.append((request.url.path, body))
        if request.url.path == "/passages":
            return httpx.Response(200, json={"added": [p["id"] for p in body["passages"]], "replaced": [],
                                             "passages": 3, "committed": True})
        return httpx.Response(200, json={"results": [{"hits": []} for _ in body["queries"]]})
    return handler


def test_async_client_serves_many_event_loops_and_synchronous_code():
    import asyncio

    from hopgraph.client import run_sync

    seen: list = []
    ac = _mock_client(hopgraph.AsyncClient, _echo_handler(seen))
    for _ in range(10):  # a new event loop each time: each gets its own connection pool
        assert asyncio.run(ac.search(["q"], pipeline="dense")) == [[]]
    for _ in range(10):  # the process's background loop, from plain synchronous code
        assert run_sync(ac.search(["q", "r"], pipeline="dense")) == [[], []]

    async def inside_a_running_loop():
        return run_sync(ac.search(["q"], pipeline="dense"))  # blocks this loop, does not deadlock
    assert asyncio.run(inside_a_running_loop()) == [[]]
    assert len(seen) == 21
    with pytest.raises(hopgraph.InputError):
        run_sync(ac.search([3], pipeline="dense"))


def test_add_takes_what_index_add_takes(tmp_path):
    import asyncio

    seen: list = []
    c = _mock_client(hopgraph.Client, _echo_handler(seen))
    assert c.add(["first text", "second text"])["added"] == ["0", "1"]
    assert seen[-1][1]["passages"][1] == {"id": "1", "title": "", "text": "second text", "metadata": {}}
    c.add("one text", upsert=True)
    assert seen[-1][1] == {"passages": [{"id": "0", "title": "", "text": "one text", "metadata": {}}], "upsert": True}
    c.add([{"id": "n1", "text": "x y", "year": 2001, "metadata": {"lang": "en"}}])
    assert seen[-1][1]["passages"][0]["metadata"] == {"lang": "en", "year": 2001}
    path = tmp_path / "more.jsonl"
    path.write_text('{"id": "p1", "title": "T", "text": "from a file"}\n')
    c.add(str(path))
    assert seen[-1][1]["passages"][0]["id"] == "p1"
    c.add(hopgraph.Corpus.from_strings(["a corpus"]))
    with pytest.raises(hopgraph.InputError, match="empty text"):
        c.add([{"id": "x", "text": " "}])
    with pytest.raises(hopgraph.InputError, match="not one record"):
        c.add({"id": "x", "text": "y"})
    ac = _mock_client(hopgraph.AsyncClient, _echo_handler(seen))
    assert asyncio.run(ac.add(["async text"]))["added"] == ["0"]
