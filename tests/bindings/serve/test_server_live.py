"""hopgraph serve with a live index: POST /passages, DELETE /passages/{id}, filters in
POST /search, writes behind the API key, read-only mode; the writes are committed to the index."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

import hopgraph  # noqa: E402
from hopgraph.client import PassageNotFound, RequestRejected, ServiceError  # noqa: E402
from hopgraph.demo import demo_corpus  # noqa: E402
from hopgraph.serve import BackgroundServer, create_app  # noqa: E402

PIPES = ["dense", "bm25", "hybrid", "stitch"]


def records() -> list[dict]:
    c = demo_corpus()
    return [{"id": c.ids[i], "title": c.titles[i], "text": c.texts[i], "metadata": {"part": i % 3}}
            for i in range(len(c))]


@pytest.fixture
def index_dir(tmp_path):
    path = tmp_path / "index"
    hopgraph.Index.build(records()[:24], embedder="hashing-64", pipelines=PIPES, progress=False).save(path)
    return path


def test_add_delete_and_filtered_search_over_http_are_committed(index_dir):
    new = [{"id": "n1", "title": "Quokka", "text": "The quokka is a small marsupial from Rottnest Island.",
            "metadata": {"part": 9}}]
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=PIPES)) as srv, \
            hopgraph.Client(srv.url) as c:
        assert c.health()["passages"] == 24
        r = c.add(new)
        assert r == {"added": ["n1"], "replaced": [], "unchanged": [], "passages": 25, "committed": True,
                     "commit": c.health()["commit"]["name"]}
        for p in PIPES:
            hits = c.search(["quokka marsupial Rottnest"], pipeline=p, k=3)[0]
            assert hits[0].id == "n1" and hits[0].metadata == {"part": 9}, p
            hits = c.search(["quokka marsupial Rottnest"], pipeline=p, k=3, where={"part": 9})[0]
            assert [h.id for h in hits] == ["n1"], p
        again = c.add(new)  # the same passage again (a retried add): a success naming the commit, nothing written
        assert again == {"added": [], "replaced": [], "unchanged": ["n1"], "passages": 25, "committed": True,
                         "commit": r["commit"]}
        with pytest.raises(RequestRejected, match="HTTP 409.*'n1'"):
            c.add([{**new[0], "metadata": {"part": 10}}])
        assert c.add([{**new[0], "text": "Quokkas smile."}], upsert=True)["replaced"] == ["n1"]
        assert c.passage("n1")["text"] == "Quokkas smile."
        hits = c.search("who designed the bridge", pipeline="dense", k=4, allowed_ids=["demo-7", "demo-8"])[0]
        assert sorted(h.id for h in hits) == ["demo-7", "demo-8"]
        with pytest.raises(RequestRejected, match="HTTP 422.*allowed_ids.*'nope'"):
            c.search("x", pipeline="dense", allowed_ids=["nope"])
        with pytest.raises(RequestRejected, match="HTTP 422.*filter values"):
            c.search("x", pipeline="dense", where={"part": {"nested": 1}})
        for p in PIPES:  # the filter language over HTTP, k hits whenever k pass
            hits = c.search("who designed the bridge", pipeline=p, k=5,
                            where={"$or": [{"part": {"$gte": 2}}, {"part": {"$lt": 1}}]})[0]
            assert len(hits) == 5 and all(h.metadata["part"] != 1 for h in hits), p
        with pytest.raises(RequestRejected, match=r"HTTP 422.*unknown operator '\$regex'"):
            c.search("x", pipeline="dense", where={"part": {"$regex": "1"}})
        with httpx.Client(base_url=srv.url, trust_env=False) as h:
            r = h.post("/search", json={"queries": ["x"], "pipeline": "bm25", "where": {"part": {"$gt": 100}}})
            assert r.status_code == 200 and r.json()["results"] == [{"hits": []}]
            assert r.json()["warnings"] == ['the filter where={"part": {"$gt": 100}} passes no passage of the index: '
                                            'no results']
            r = h.post("/search", json={"queries": ["x"], "pipeline": "bm25"})
            assert r.json()["warnings"] == []
        gone = c.delete("n1")
        assert gone == {"deleted": "n1", "passages": 24, "committed": True, "commit": c.health()["commit"]["name"]}
        with pytest.raises(PassageNotFound):
            c.delete("n1")
        with pytest.raises(PassageNotFound):
            c.passage("n1")
        for p in PIPES:
            assert all(h.id != "n1" for h in c.search(["quokka"], pipeline=p, k=10)[0])
        with pytest.raises(hopgraph.InputError, match="holds no passages"):  # checked as Index.add checks it
            c.add([])
        with httpx.Client(base_url=srv.url, trust_env=False) as h:
            bad = h.post("/passages", json={"passages": [{"id": "x", "text": 5}]})
            assert bad.status_code == 422 and "text" in bad.json()["detail"]
            bad = h.post("/passages", json={"passages": [{"id": "x", "text": "   "}]})
            assert bad.status_code == 422 and "empty" in bad.json()["detail"]
    # the writes were committed: a fresh load has them
    loaded = hopgraph.Index.load(index_dir, progress=False)
    assert loaded.n_live == 24 and len(loaded.X) == 26
    with pytest.raises(KeyError):
        loaded.passage("n1")


@pytest.mark.parametrize("metadata, field, name", [
    ('{"score": NaN}', "score", "NaN"),
    ('{"range": [1, Infinity]}', "range[1]", "Infinity"),
    ('{"a": {"b": -Infinity}}', "a.b", "-Infinity"),
])
def test_metadata_json_cannot_hold_is_refused_with_422(index_dir, metadata, field, name):
    """NaN and the infinities (which Python's json reads) in an added passage's metadata, at any depth,
    are a 422 naming the passage and the field; nothing is added, and every answer stays JSON."""
    body = ('{"passages": [{"id": "ok-1", "text": "A fine passage."}, '
            '{"id": "nan-1", "text": "A passage about a bad number.", "metadata": ' + metadata + '}]}')
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        r = h.post("/passages", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "record 1 ('nan-1')" in detail and f"metadata field {field!r} is {name}" in detail, detail
        assert h.get("/passages/nan-1").status_code == 404 and h.get("/passages/ok-1").status_code == 404
        r = h.post("/search", json={"queries": ["bad number passage"], "pipeline": "bm25", "k": 30})
        assert r.status_code == 200 and len(r.json()["results"][0]["hits"]) == 24
        assert h.get("/health").json()["passages"] == 24


def test_refused_writes_never_enter_the_write_path(index_dir, monkeypatch):
    """Writes the served index refuses — ids it holds, a malformed passage, metadata JSON cannot hold,
    one id twice in a request, deleting an id it does not hold — are answered without entering the
    one write path, where writes wait for each other; a valid write after them enters it."""
    import concurrent.futures

    app = create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])
    live, writes = app.state.live, []
    real_write = live.write

    async def write(op):
        writes.append(op)
        return await real_write(op)

    monkeypatch.setattr(live, "write", write)
    refused = [({"passages": [{"id": "demo-1", "text": "Already there."}]}, 409, "'demo-1'"),
               ({"passages": [{"id": "x", "text": "A new one."}, {"id": "demo-2", "text": "Old."}]}, 409, "'demo-2'"),
               ({"passages": [{"id": "x", "text": "   "}]}, 422, "empty text"),
               ({"passages": [{"id": "x", "text": "a"}, {"id": "x", "text": "b"}]}, 422, "duplicate id 'x'"),
               ({"passages": [{"id": "x", "text": "a", "metadata": {"v": float("nan")}}]}, 422, "'v' is NaN")]
    with BackgroundServer(app) as srv:
        def post(i: int) -> tuple[int, str, int, str]:
            body, status, detail = refused[i % len(refused)]
            with httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
                r = h.request("POST", "/passages", content=__import__("json").dumps(body),
                              headers={"Content-Type": "application/json"})
                return r.status_code, r.json()["detail"], status, detail

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(post, range(50)))
        assert all(got == want and detail in text for got, text, want, detail in answers), answers
        with hopgraph.Client(srv.url) as c:
            with pytest.raises(PassageNotFound):
                c.delete("no-such-id")
            assert writes == []
            assert c.add([{"id": "after", "text": "A valid write after the refused ones."}])["committed"] is True
            assert len(writes) == 1 and c.passage("after")["text"].startswith("A valid write")
            assert c.health()["passages"] == 25


def test_writes_after_another_process_commits_are_checked_by_the_write_path(index_dir):
    """When another process committed since the served commit, a write the served index alone would
    refuse (re-adding an id deleted there, deleting an id added there) goes to the write path, which
    takes that commit in first."""
    extra = index_dir.parent / "extra.jsonl"
    extra.write_text('{"id": "cli-2", "text": "The kakapo is a flightless parrot."}\n')
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])) as srv, \
            hopgraph.Client(srv.url) as c:
        _cli("delete", str(index_dir), "demo-3")
        assert c.add([{"id": "demo-3", "text": "Demo three, added again."}])["added"] == ["demo-3"]
        _cli("add", str(index_dir), str(extra), "-q")
        assert c.delete("cli-2")["deleted"] == "cli-2"
        assert c.passage("demo-3")["text"] == "Demo three, added again."


def _at_most(pattern: str, size: int) -> str:
    """``pattern`` repeated and cut at a character boundary, then padded with 'x' to exactly ``size``
    bytes of UTF-8."""
    out = ""
    while len((out + pattern).encode()) <= size:
        out += pattern
    for ch in pattern:
        if len((out + ch).encode()) > size:
            break
        out += ch
    return out + "x" * (size - len(out.encode()))


def test_every_accepted_id_round_trips_over_http_and_longer_ones_are_refused(index_dir):
    """Ids of the maximum length with '/', '%', spaces, '?', '#' and non-ASCII characters, and the ids
    '.' and '..', are added, found, fetched and deleted by their percent-encoded path; a longer id is
    a 422 naming the limit."""
    from urllib.parse import quote

    from hopgraph.engine.components.records import MAX_ID_BYTES

    ids = [_at_most(pattern, MAX_ID_BYTES) for pattern in ("a/b%2Fc d?e#f&g+h=", "é/%ü 😀?#", "%%//  ??##")]
    ids += [".", "..", "./..", "%2E"]
    assert all(len(pid.encode()) == MAX_ID_BYTES for pid in ids[:3])
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["bm25"])) as srv, \
            hopgraph.Client(srv.url) as c, httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        added = c.add([{"id": pid, "text": f"Marmot passage {i} about alpine marmots."} for i, pid in enumerate(ids)])
        assert added["added"] == ids
        assert {hit.id for hit in c.search("alpine marmots", pipeline="bm25", k=len(ids))[0]} == set(ids)
        for i, pid in enumerate(ids):
            assert c.passage(pid)["text"] == f"Marmot passage {i} about alpine marmots.", pid
            r = h.get("/passages/" + quote(pid, safe="").replace(".", "%2E"))  # as any client may encode it
            assert r.status_code == 200 and r.json()["id"] == pid
        for pid in ids[::2]:
            assert c.delete(pid)["deleted"] == pid
        for pid in ids[1::2]:
            assert h.delete("/passages/" + quote(pid, safe="").replace(".", "%2E")).json()["deleted"] == pid
        assert c.health()["passages"] == 24
        over = ids[0] + "y"
        r = h.post("/passages", json={"passages": [{"id": over, "text": "One byte too long."}]})
        assert r.status_code == 422 and f"has {MAX_ID_BYTES + 1} bytes of UTF-8; the limit is {MAX_ID_BYTES}" in \
            r.json()["detail"]
        assert c.health()["passages"] == 24


def test_async_client_writes(index_dir):
    async def run(url: str) -> tuple[dict, dict, list]:
        async with hopgraph.AsyncClient(url) as c:
            added = await c.add([{"id": "a1", "text": "Zebrafish regenerate their fins."}])
            hits = await c.search("zebrafish fins", pipeline="bm25", k=2, where={"part": [0, 1, 2]})
            gone = await c.delete("a1")
            return added, gone, hits

    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=PIPES)) as srv:
        added, gone, hits = asyncio.run(run(srv.url))
    assert added["added"] == ["a1"] and gone["deleted"] == "a1"
    assert all(h.id != "a1" for h in hits[0])  # a1 has no 'part': the filter excludes it


def test_writes_need_the_api_key_and_read_only_refuses_them(index_dir):
    index = hopgraph.Index.load(index_dir, progress=False)
    with BackgroundServer(create_app(index, api_key="k3y", pipelines=["dense"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:  # the first write starts the writer
        r = h.post("/passages", json={"passages": [{"id": "z", "text": "zz"}]})
        assert r.status_code == 401
        assert h.delete("/passages/demo-1").status_code == 401
        assert h.delete("/passages/demo-1", headers={"X-API-Key": "k3y"}).status_code == 200
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["dense"],
                                     read_only=True)) as srv, hopgraph.Client(srv.url) as c:
        with pytest.raises(ServiceError, match="HTTP 403.*read-only"):
            c.add([{"id": "z", "text": "zz"}])
        with pytest.raises(ServiceError, match="HTTP 403"):
            c.delete("demo-2")
        assert c.info()["read_only"] is True and c.health()["passages"] == 23


# ---------------------------------------------------------------------- the write path (segments)
def _cli(*argv: str) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "hopgraph", *argv], check=True, capture_output=True, text=True)


def test_server_and_cli_writes_are_all_kept(index_dir, tmp_path):
    import json

    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"id": "cli-1", "title": "Okapi", "text": "The okapi lives in the Ituri forest."})
                     + "\n")
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=PIPES)) as srv, \
            hopgraph.Client(srv.url) as c:
        before = c.health()
        assert before["segments"] == 1 and before["commit"]["name"].startswith("commit-")
        _cli("add", str(index_dir), str(extra), "-q")                 # another process commits an add
        hits = c.search(["okapi Ituri forest"], pipeline="bm25", k=1)[0]
        assert hits[0].id == "cli-1"                                   # taken in before the next search
        assert c.add([{"id": "srv-1", "text": "Servers write too: a narwhal."}])["committed"] is True
        _cli("delete", str(index_dir), "demo-3")                       # another process deletes
        assert all(h.id != "demo-3" for h in c.search(["anything about demo"], pipeline="dense", k=30)[0])
        assert c.delete("srv-1")["committed"] is True                  # the server's write after it
        health = c.health()
        assert health["passages"] == 24 and health["segments"] >= 2
    loaded = hopgraph.Index.load(index_dir, progress=False)
    assert loaded.passage("cli-1")["title"] == "Okapi"                 # no write was lost
    with pytest.raises(KeyError):
        loaded.passage("demo-3")
    with pytest.raises(KeyError):
        loaded.passage("srv-1")
    assert loaded.n_live == 24


def test_writes_within_the_window_share_a_commit_and_small_segments_are_merged(index_dir):
    import concurrent.futures

    app = create_app(hopgraph.Index.load(index_dir, progress=False), pipelines=["dense", "bm25"],
                     commit_window_ms=300)
    with BackgroundServer(app) as srv:
        def add(i: int) -> dict:
            with hopgraph.Client(srv.url) as c:
                return c.add([{"id": f"w{i}", "text": f"Window write number {i} about ibis {i}."}])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(add, range(8)))
        assert all(a["committed"] for a in answers)
        assert app.state.live.commits < 8                              # several writes a commit
        with hopgraph.Client(srv.url) as c:
            for i in range(8, 30):                                     # one commit each: segments pile up
                c.add([{"id": f"w{i}", "text": f"Later write {i} about ibis."}])
            deadline = __import__("time").time() + 60
            while app.state.live.merges == 0 and __import__("time").time() < deadline:
                __import__("time").sleep(0.2)
            assert app.state.live.merges >= 1                          # merged in the background
            assert {h.id for h in c.search(["ibis"], pipeline="bm25", k=40)[0]} >= {f"w{i}" for i in range(30)}
    loaded = hopgraph.Index.load(index_dir, progress=False)
    assert loaded.n_live == 24 + 30 and len(loaded.manifest["segments"]) < 30


def test_added_passages_are_embedded_in_the_writer_process(index_dir):
    """POST /passages embeds and adds in the writer process (searches go on meanwhile); the
    passages get the embeddings an add computes."""
    import os

    import numpy as np

    from hopgraph.serve.writer import ProcessWriter

    index = hopgraph.Index.load(index_dir, progress=False)
    new = [{"id": "n2", "title": "Numbat", "text": "The numbat eats termites in Western Australia."}]
    app = create_app(index, pipelines=PIPES)
    with BackgroundServer(app) as srv, hopgraph.Client(srv.url) as c:
        assert c.add(new)["added"] == ["n2"]
        assert c.search("numbat termites", pipeline="dense", k=1)[0][0].id == "n2"
        writer = app.state.live.writer
        assert isinstance(writer, ProcessWriter) and writer._process.pid != os.getpid()
    np.testing.assert_array_equal(index.X[-1:], index.embed_passages(new))
    from hopgraph.engine.errors import InputError

    with pytest.raises(InputError, match="batch_size"):
        index.embed_passages(new, batch_size=0)
