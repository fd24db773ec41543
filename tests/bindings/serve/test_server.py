"""hopgraph serve: end-to-end against the real uvicorn server on loopback,
one test per request limit, API key, micro-batching, CLI, and a hypothesis fuzz."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import hopgraph  # noqa: E402
from hopgraph.client import RequestRejected, ServiceError  # noqa: E402
from hopgraph.demo import DEMO_QUESTIONS  # noqa: E402
from hopgraph.engine.embedders import CallableEmbedder, HashingEmbedder  # noqa: E402
from hopgraph.engine.pipelines import pipeline_names  # noqa: E402
from hopgraph.serve import BackgroundServer, ServeLimits, create_app  # noqa: E402
from hopgraph.serve.batcher import MicroBatcher  # noqa: E402

BASELINES = ["dense", "bm25", "hybrid"]
LIMITS = ServeLimits(max_batch=8, max_query_chars=200, max_k=20, max_body_bytes=64 * 1024)
DIM = 64


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, demo_corpus) -> Path:
    path = tmp_path_factory.mktemp("serve") / "index"
    hopgraph.Index.build(demo_corpus, embedder=f"hashing-{DIM}", pipelines=BASELINES, progress=False).save(path)
    return path


@pytest.fixture(scope="module")
def index(index_dir) -> hopgraph.Index:
    return hopgraph.Index.load(index_dir, progress=False)


@pytest.fixture(scope="module")
def server(index):
    with BackgroundServer(create_app(hopgraph.Index.load(index.path, progress=False), LIMITS)) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def client(server):
    with hopgraph.Client(server.url) as c:
        yield c


def post(http, body, content_type="application/json") -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body, allow_nan=True)
    return http.post("/search", content=content, headers={"content-type": content_type})


def questions(n: int) -> list[str]:
    return [(DEMO_QUESTIONS * (n // len(DEMO_QUESTIONS) + 1))[i] + f" variant {i}" for i in range(n)]


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("pipeline", BASELINES)
def test_client_results_equal_index_search(client, index, pipeline):
    qs = questions(6)
    assert client.search(qs, pipeline=pipeline, k=5) == index.search(qs, pipeline=pipeline, k=5)
    for q in qs[:2]:  # one question per request, given as a bare string and as {"text": ...}
        assert client.search(q, pipeline=pipeline, k=3) == index.search(q, pipeline=pipeline, k=3)
        assert client.search([{"text": q}], pipeline=pipeline, k=3) == index.search([q], pipeline=pipeline, k=3)


def test_query_time_params_per_request(http, index):
    qs = questions(3)
    r = post(http, {"queries": qs, "pipeline": "hybrid", "k": 4, "params": {"fusion_depth": 3, "rrf_k": 10}})
    assert r.status_code == 200, r.text
    want = index.search(qs, pipeline="hybrid", k=4, fusion_depth=3, rrf_k=10)
    assert [[h["id"] for h in res["hits"]] for res in r.json()["results"]] == [[h.id for h in w] for w in want]
    assert want != index.search(qs, pipeline="hybrid", k=4)
    info = http.get("/info").json()
    assert info["query_params"]["hybrid"] == {"fusion_depth": "an integer >= 1", "rrf_k": "an integer >= 1"}


def test_embedding_queries_equal_index_search(client, index):
    Q = HashingEmbedder(DIM).encode(questions(4))
    expected = index.search(Q, pipeline="dense", k=4)
    assert client.search(Q, pipeline="dense", k=4) == expected
    unnormalised = [{"embedding": (3.0 * row).tolist()} for row in Q]  # the server normalises
    got = client.search(unnormalised, pipeline="dense", k=4)
    assert [[h.id for h in hits] for hits in got] == [[h.id for h in hits] for hits in expected]


def test_run_search_is_index_search_arrays(index):
    """The batcher's run_search answers through Index.search_arrays: all texts (the pipeline
    sees the texts: bm25 needs them), all embeddings, and a mixed batch (embedded in place)."""
    from hopgraph.serve.batcher import run_search

    qs = questions(3)
    Q = index.embed_queries(qs)
    for pipeline in ("bm25", "dense"):
        hits, embed_s, search_s = run_search(index, pipeline, 4, qs)
        assert hits == index.search(qs, pipeline=pipeline, k=4) and embed_s >= 0 and search_s >= 0
    assert run_search(index, "dense", 4, list(Q))[0] == index.search(Q, pipeline="dense", k=4)
    mixed = [qs[0], Q[1], qs[2]]
    assert run_search(index, "dense", 4, mixed)[0] == index.search(Q, pipeline="dense", k=4)
    with pytest.raises(hopgraph.InputError, match="question 1 must be a non-empty string"):
        run_search(index, "dense", 4, [qs[0], "  "])


def test_response_shape_and_timing(client):
    r = client.search_response(questions(2), pipeline="bm25", k=3)
    assert r["pipeline"] == "bm25" and r["k"] == 3 and len(r["results"]) == 2
    hit = r["results"][0]["hits"][0]
    assert set(hit) == {"id", "title", "score", "rank", "text", "metadata"} and hit["rank"] == 1
    t = r["timing"]
    assert t["batch_queries"] >= 2 and t["batch_requests"] >= 1
    assert 0 <= t["search_ms"] <= t["total_ms"] and t["queue_ms"] >= 0 and t["embed_ms"] >= 0


def test_empty_batch(client):
    assert client.search([], pipeline="dense", k=3) == []


def test_health_info_openapi(http, client, index):
    assert client.health()["status"] == "ok"
    info = client.info()
    assert sorted(info["pipelines"]) == sorted(BASELINES)
    assert set(info["pipelines_needing_text"]) == {"bm25", "hybrid"}
    assert info["embedder"] == {"name": f"hashing-{DIM}", "dim": DIM}
    assert info["manifest"]["corpus"]["n_passages"] == len(index.corpus) and info["manifest"]["segments"]
    assert info["device"]["resolved"] in ("cpu", "cuda") and info["limits"]["max_k"] == LIMITS.max_k
    schema = http.get("/openapi.json").json()
    assert {"/search", "/health", "/info"} <= set(schema["paths"])
    assert "SearchRequest" in schema["components"]["schemas"]


#: questions that link no entity in the demo knowledge graph (DMAR once answered 500 to them)
UNLINKED = ["who designed the bridge in the home city of peter harlow?",
            "Which of the two tornado outbreaks killed the most people?", "what is it?", "1999"]


@pytest.mark.slow
def test_dmar_questions_linking_no_entity_answer_200(demo_corpus):
    """A server with DMAR loaded answers 200, with the index's own results, to questions that
    link no entity: alone, all together, next to a linked question, and the empty batch."""
    index = hopgraph.Index.build(demo_corpus, embedder=f"hashing-{DIM}", pipelines=["dmar"], progress=False,
                                 params={"dmar": {"gnn_steps": 2}})
    batches = [[q] for q in UNLINKED] + [UNLINKED, [DEMO_QUESTIONS[1], UNLINKED[0]], []]
    with BackgroundServer(create_app(index, LIMITS, pipelines=["dmar"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        for qs in batches:
            r = post(h, {"queries": qs, "pipeline": "dmar", "k": 5})
            assert r.status_code == 200, (qs, r.status_code, r.text)
            got = [[hit["id"] for hit in res["hits"]] for res in r.json()["results"]]
            assert got == [[hit.id for hit in hits] for hits in index.search(qs, pipeline="dmar", k=5)]
            assert all(len(ids) == 5 for ids in got)


# ---------------------------------------------------------------- limits: one test each
def _detail(r: httpx.Response) -> str:
    return r.json()["detail"]


@pytest.mark.parametrize("body, status, message", [
    ({"queries": ["q"] * 9, "pipeline": "dense"}, 422, "9 queries in one request; the limit is 8"),
    ({"queries": ["x" * 201], "pipeline": "dense"}, 422, "queries[0] has 201 characters; the limit is 200"),
    ({"queries": ["q"], "pipeline": "dense", "k": 0}, 422, "k must be between 1 and 20, got 0"),
    ({"queries": ["q"], "pipeline": "dense", "k": 21}, 422, "k must be between 1 and 20, got 21"),
    ({"queries": ["q"], "pipeline": "dense", "k": "5"}, 422, "k: Input should be a valid integer"),
    ({"queries": ["q"], "pipeline": "dense", "k": True}, 422, "k: Input should be a valid integer"),
    ({"queries": ["q"], "pipeline": "nope"}, 422, "unknown pipeline 'nope'; this server serves: "),
    ({"queries": ["q"], "pipeline": None, "k": 0}, 422, "k must be between 1 and"),  # no pipeline: the default
    ({"queries": [{"embedding": [1.0] * 3}], "pipeline": "dense"}, 422,
     "queries[0]: embedding has dimension 3, the index has 64"),
    ({"queries": [{"embedding": [0.0] * DIM}], "pipeline": "dense"}, 422, "zero vector"),
    ({"queries": [{"embedding": [math.nan] + [1.0] * (DIM - 1)}], "pipeline": "dense"}, 422,
     "queries[0].embedding[0]: Input should be a finite number"),
    ({"queries": [{"embedding": [1.0] * (DIM - 1) + [math.inf]}], "pipeline": "dense"}, 422,
     "queries[0].embedding[63]: Input should be a finite number"),
    ({"queries": [{"embedding": ["1"] * DIM}], "pipeline": "dense"}, 422, "Input should be a valid number"),
    ({"queries": [{"embedding": [1.0] * DIM}], "pipeline": "bm25"}, 422,
     "queries[0]: pipeline 'bm25' needs the question text, not only its embedding"),
    ({"queries": ["ok", {"embedding": [1.0] * DIM}], "pipeline": "hybrid"}, 422, "queries[1]: pipeline 'hybrid' needs"),
    ({"queries": ["   "], "pipeline": "dense"}, 422, "queries[0] is empty"),
    ({"queries": [7], "pipeline": "dense"}, 422, 'a query must be a string, {"text": str} or {"embedding"'),
    ({"queries": [{"text": "q", "extra": 1}], "pipeline": "dense"}, 422, "queries[0].extra: Extra inputs"),
    ({"queries": "q", "pipeline": "dense"}, 422, "queries: Input should be a valid list"),
    ({"queries": ["q"], "pipeline": "dense", "top_k": 3}, 422, "top_k: Extra inputs are not permitted"),
    ([1, 2], 422, "the request body must be a JSON object"),
    ({"queries": ["q"], "pipeline": "hybrid", "params": {"fusion_depth": 0}}, 422,
     "params: hybrid: parameter 'fusion_depth' must be an integer >= 1, got 0"),
    ({"queries": ["q"], "pipeline": "hybrid", "params": {"dpeth": 3}}, 422,
     "params: hybrid: unknown search parameter(s) 'dpeth'; known: rrf_k, fusion_depth"),
    ({"queries": ["q"], "pipeline": "bm25", "params": {"k1": 1.0}}, 422,
     "params: bm25: 'k1' are fit parameters"),
    ({"queries": ["q"], "pipeline": "hybrid", "params": []}, 422, "params: Input should be a valid dictionary"),
])
def test_bad_request_limits(http, body, status, message):
    r = post(http, body)
    assert r.status_code == status, r.text
    assert message in _detail(r)


def test_nan_literal_in_raw_json(http):
    """Python's json reads the non-standard NaN / Infinity literals: they are refused."""
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        values = ",".join(["0.5"] * (DIM - 1) + [literal])
        r = post(http, '{"queries": [{"embedding": [' + values + ']}], "pipeline": "dense"}')
        assert r.status_code == 422 and "finite number" in _detail(r), (literal, r.text)


@pytest.mark.parametrize("raw, message", [
    ('{"queries": [', "malformed JSON at character 13"),
    ("not json", "malformed JSON at character 0"),
    ('{"queries": ["a"],}', "malformed JSON"),
    ("[" * 20000 + "]" * 20000, "error parsing the body"),  # RecursionError in the JSON parser
    ('{"queries": ["a"], "pipeline": "dense", "k": ' + "9" * 5000 + "}", "error parsing the body"),  # int too long
])
def test_malformed_json(http, raw, message):
    r = post(http, raw)
    assert r.status_code == 400 and message in _detail(r), r.text
    assert http.get("/health").status_code == 200


def test_empty_body(http):
    r = post(http, "")
    assert r.status_code == 422 and "must be a JSON object" in _detail(r)


def test_lone_surrogate_and_content_type(http):
    r = post(http, '{"queries": ["\\ud800"], "pipeline": "dense"}')
    assert r.status_code == 422 and "lone surrogate" in _detail(r)
    r = post(http, json.dumps({"queries": ["q"], "pipeline": "dense"}), content_type="text/plain")
    assert r.status_code == 422 and "Content-Type: application/json" in _detail(r)


def test_body_too_large(http):
    r = post(http, json.dumps({"queries": ["word " * 20] * 2000, "pipeline": "dense"}))
    assert r.status_code == 413


def test_pipeline_not_served_or_not_implemented(http):
    for name in pipeline_names():
        if name not in BASELINES:
            r = post(http, {"queries": ["q"], "pipeline": name})
            assert r.status_code == 422 and "not loaded by this server" in _detail(r)
    from hopgraph.engine.pipelines import _REGISTRY

    for name in set(_REGISTRY) - set(pipeline_names()):
        r = post(http, {"queries": ["q"], "pipeline": name})
        assert r.status_code == 422 and "not implemented" in _detail(r)


def test_client_raises_on_rejection(client):
    with pytest.raises(RequestRejected, match="HTTP 422.*k must be between") as e:
        client.search("q", pipeline="dense", k=0)
    assert isinstance(e.value, hopgraph.InputError) and e.value.status == 422


def test_bad_requests_do_not_change_answers_to_others(server, index):
    """Good and bad requests sent at the same time: the good ones get Index.search's answer."""
    qs = questions(8)
    expected = {q: index.search([q], pipeline="dense", k=5) for q in qs}
    bad = [{"queries": [{"embedding": [0.0] * DIM}], "pipeline": "dense"}, {"queries": ["q"], "pipeline": "x"},
           {"queries": [{"embedding": [1.0] * 5}], "pipeline": "dense"}]
    failures: list[str] = []

    def good_worker(i: int) -> None:
        with hopgraph.Client(server.url) as c:
            for j in range(6):
                q = qs[(i + j) % len(qs)]
                if c.search([q], pipeline="dense", k=5) != expected[q]:
                    failures.append(q)

    def bad_worker(i: int) -> None:
        with httpx.Client(base_url=server.url, trust_env=False) as h:
            for j in range(6):
                if post(h, bad[(i + j) % len(bad)]).status_code != 422:
                    failures.append("bad request not refused")

    threads = [threading.Thread(target=good_worker, args=(i,)) for i in range(6)]
    threads += [threading.Thread(target=bad_worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---------------------------------------------------------------- micro-batching
def test_micro_batcher_batches_and_isolates_failures(demo_corpus):
    """Queued requests run as one batch; a request that fails inside the batch is re-run
    alone, and the others still get their answers."""
    hashing = HashingEmbedder(DIM)

    def embed(texts):
        if any("boom" in t for t in texts):
            raise RuntimeError("embedder failed on 'boom'")
        return hashing.encode(texts)

    index = hopgraph.Index.build(demo_corpus, embedder=CallableEmbedder(embed, "boom-embedder", DIM),
                                 pipelines=["dense"], progress=False)
    qs = questions(5)

    async def scenario():
        batcher = MicroBatcher(index, ServeLimits())
        await batcher.start()
        try:
            jobs = [batcher.submit("dense", 3, [q]) for q in qs] + [batcher.submit("dense", 3, ["boom"])]
            return await asyncio.gather(*jobs, return_exceptions=True), batcher.batches
        finally:
            await batcher.stop()

    results, batches = asyncio.run(scenario())
    assert isinstance(results[-1], RuntimeError) and "boom" in str(results[-1])
    for q, r in zip(qs, results):
        assert r.hits == index.search([q], pipeline="dense", k=3)
        assert r.timing["batch_requests"] == 1  # re-run alone after the shared batch failed
    assert batches == 1

    async def good_only():
        batcher = MicroBatcher(index, ServeLimits())
        await batcher.start()
        try:
            return await asyncio.gather(*[batcher.submit("dense", 3, [q]) for q in qs])
        finally:
            await batcher.stop()

    results = asyncio.run(good_only())
    assert all(r.timing["batch_requests"] == len(qs) and r.timing["batch_queries"] == len(qs) for r in results)
    assert [r.hits[0] for r in results] == index.search(qs, pipeline="dense", k=3)


def test_micro_batcher_embeds_only_in_its_worker_threads(demo_corpus):
    """warm_up embeds in both worker threads (each thread's torch settings are its own), a light
    search in the interactive one; embedders without the packed path get limits.embed_batch_size."""
    hashing = HashingEmbedder(DIM)
    calls: list[tuple[str, int]] = []

    class Recording:
        name, dim = "recording", DIM

        def encode(self, texts, batch_size=64, progress=False):
            calls.append((threading.current_thread().name, batch_size))
            return hashing.encode(texts)

    index = hopgraph.Index.build(demo_corpus, embedder=Recording(), pipelines=["dense"], progress=False)
    calls.clear()
    batcher = MicroBatcher(index, ServeLimits(embed_batch_size=3))
    batcher.warm_up()

    async def scenario():
        await batcher.start()
        try:
            return await batcher.submit("dense", 3, questions(2))
        finally:
            await batcher.stop()

    result = asyncio.run(scenario())
    assert [name for name, _ in calls] == ["hopgraph-search_0", "hopgraph-search-bulk_0", "hopgraph-search_0"]
    assert all(bs == 3 for _, bs in calls)
    assert result.hits == index.search(questions(2), pipeline="dense", k=3)


def test_queue_full_answers_503(index):
    limits = ServeLimits(max_pending=2)
    with BackgroundServer(create_app(index, limits, pipelines=["dense"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False) as h:
        r = post(h, {"queries": ["a", "b", "c"], "pipeline": "dense"})
        assert r.status_code == 503 and "limit 2" in _detail(r)
        assert post(h, {"queries": ["a", "b"], "pipeline": "dense"}).status_code == 200


# ---------------------------------------------------------------- API key
def test_api_key(index, tmp_path):
    key = "s3cret-key"
    with BackgroundServer(create_app(index, api_key=key, pipelines=["dense"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False) as h:
        assert h.get("/health").status_code == 200
        assert h.get("/openapi.json").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-API-Key": key + "x"}, {"Authorization": key}):
            r = h.post("/search", json={"queries": ["q"], "pipeline": "dense"}, headers=headers)
            assert r.status_code == 401 and "API key" in _detail(r), headers
            assert h.get("/info", headers=headers).status_code == 401
        assert post(h, "{malformed").status_code == 401  # refused before the body is read
        for headers in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}):
            r = h.post("/search", json={"queries": ["q"], "pipeline": "dense"}, headers=headers)
            assert r.status_code == 200
        with pytest.raises(ServiceError, match="HTTP 401"):
            hopgraph.Client(srv.url).search("q", pipeline="dense")
        assert hopgraph.Client(srv.url, api_key=key).search("q", pipeline="dense", k=2) == \
            index.search("q", pipeline="dense", k=2)


# ---------------------------------------------------------------- CLI
@pytest.mark.slow
def test_cli_serve_subprocess(index_dir, index, tmp_path):
    """`hopgraph serve INDEX --port 0 --api-key-file F` in a real subprocess."""
    key_file = tmp_path / "key"
    key_file.write_text("cli-key\n")
    cmd = [sys.executable, "-m", "hopgraph", "serve", str(index_dir), "--port", "0", "--api-key-file",
           str(key_file), "--log-level", "warning", "-q", "--max-k", "7"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+) \(API key required\)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        with hopgraph.Client(m.group(1), api_key="cli-key") as c:
            assert c.search(questions(3), pipeline="hybrid", k=7) == index.search(questions(3), pipeline="hybrid", k=7)
            with pytest.raises(RequestRejected, match="between 1 and 7"):
                c.search("q", pipeline="dense", k=8)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_cli_serve_errors(index_dir, tmp_path):
    from hopgraph.cli import main

    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main(["serve", str(index_dir), "--api-key-file", str(empty)]) == 2
    assert main(["serve", str(index_dir), "--max-k", "0"]) == 2
    assert main(["serve", str(index_dir), "--pipelines", "nope", "--port", "0"]) == 2


def test_cli_serve_param_limit_errors_are_one_line(index_dir, tmp_path, capsys):
    from hopgraph.cli import main

    bad = tmp_path / "limits.json"
    bad.write_text('{"dmar": {"shapley_samples": "many"}}')
    for argv, message in ((["--param-limits", str(bad)], "the bound of dmar.shapley_samples must be an integer"),
                          (["--param-limit", "hybrid.rrf=3"], "'hybrid' has no search parameter 'rrf'"),
                          (["--param-limits", str(tmp_path / "missing.json")], "cannot read it as JSON"),
                          (["--request-timeout", "0"], "request_timeout must be a positive number")):
        assert main(["serve", str(index_dir), "--port", "0", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err, err


# ---------------------------------------------------------------- fuzz
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
_floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
_query = st.one_of(
    st.text(max_size=40),
    st.text(max_size=250).map(lambda t: {"text": t}),
    st.lists(_floats, min_size=DIM, max_size=DIM).map(lambda e: {"embedding": e}),
    st.lists(st.floats(-1, 1), min_size=0, max_size=DIM + 2).map(lambda e: {"embedding": e}),
    _json,
)
_pipeline = st.one_of(st.sampled_from(BASELINES), st.sampled_from(BASELINES + ["g3rag", "stitch", "dmar", "", "DENSE"]),
                      st.text(max_size=6))
_k = st.one_of(st.integers(1, LIMITS.max_k), st.integers(-3, 30), st.integers(), _json)
_well_formed_query = st.one_of(  # reaches the search worker: random texts and vectors
    st.text(min_size=1, max_size=60),
    st.lists(st.floats(-2, 2, width=32), min_size=DIM, max_size=DIM).map(lambda e: {"embedding": e}),
)
_request = st.one_of(
    st.fixed_dictionaries({"queries": st.lists(_well_formed_query, max_size=LIMITS.max_batch),
                           "pipeline": st.sampled_from(BASELINES), "k": st.integers(1, LIMITS.max_k)}),
    st.fixed_dictionaries({"queries": st.lists(_query, max_size=10), "pipeline": _pipeline, "k": _k},
                          optional={"extra": _json}),
    _json,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_request | st.binary(max_size=120))
def test_fuzz_request_schema_never_5xx(http, index, body):
    r = post(http, body if isinstance(body, bytes) else json.dumps(body, allow_nan=True))
    assert r.status_code < 500, (body, r.status_code, r.text)
    assert r.status_code in (200, 400, 413, 422), r.status_code
    if r.status_code == 200:
        assert len(r.json()["results"]) == len(body["queries"])


def test_server_healthy_and_unchanged_after_fuzz(http, client, index):
    # runs after the fuzz test in file order; also fine alone
    assert http.get("/health").json()["status"] == "ok"
    qs = questions(4)
    for p in BASELINES:
        assert client.search(qs, pipeline=p, k=5) == index.search(qs, pipeline=p, k=5)


def test_listening_socket_gets_tcp_nodelay_connections():
    """asyncio sets TCP_NODELAY on accepted connections only for sockets created with
    proto=IPPROTO_TCP; without it every answer stalls ~40 ms on a delayed ACK."""
    import socket

    from hopgraph.serve.runner import bind_socket

    with bind_socket("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[1] > 0
    with pytest.raises(ValueError, match="--port"):
        bind_socket("127.0.0.1", 70000)


def test_precomputed_index_answers_embeddings_refuses_texts(demo_corpus):
    X = HashingEmbedder(DIM).encode(demo_corpus.embedding_texts())
    index = hopgraph.Index.build(demo_corpus, embeddings=X, pipelines=["dense"], progress=False)
    Q = HashingEmbedder(DIM).encode(questions(2))
    with BackgroundServer(create_app(index)) as srv, hopgraph.Client(srv.url) as c:
        assert c.search(Q, pipeline="dense", k=3) == index.search(Q, pipeline="dense", k=3)
        with pytest.raises(RequestRejected, match="precomputed embeddings"):
            c.search("a question", pipeline="dense", k=3)
        assert c.health()["status"] == "ok"


# ---------------------------------------------------------------- one status per kind of fault
@pytest.mark.parametrize("error, status, detail", [
    (hopgraph.IndexFormatError("pipeline dense: stored array X is damaged"), 422, "stored array X is damaged"),
    (hopgraph.InputError("batched_ppr: P must be column-stochastic"), 422, "P must be column-stochastic"),
    (NotImplementedError("not in this version"), 422, "not in this version"),
    (ValueError("numpy said no"), 500, "internal error while searching (ValueError)"),
    (RuntimeError("boom"), 500, "internal error while searching (RuntimeError)"),
])
def test_search_errors_map_to_one_status_per_kind(index_dir, monkeypatch, caplog, error, status, detail):
    from hopgraph.serve.app import search_error_status

    assert search_error_status(error) == status
    served = hopgraph.Index.load(index_dir, progress=False)
    app = create_app(served, LIMITS, pipelines=["dense"])

    def failing_search(*args, **kwargs):
        raise error

    monkeypatch.setattr(served.pipeline("dense"), "search", failing_search)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as http:
        with caplog.at_level(logging.ERROR, logger="hopgraph.serve"):
            r = post(http, {"queries": ["q"], "pipeline": "dense"})
        assert r.status_code == status, r.text
        assert detail in _detail(r)
        logged = [rec for rec in caplog.records if rec.name == "hopgraph.serve"]
        assert bool(logged) == (status == 500)  # internal errors are logged with their traceback
        if status == 500:
            assert "boom" not in _detail(r) and "numpy said no" not in _detail(r)
            assert logged[0].exc_info is not None
        monkeypatch.undo()
        assert post(http, {"queries": ["q"], "pipeline": "dense"}).status_code == 200  # still serving


# ---------------------------------------------------------------- text and metadata
@pytest.fixture(scope="module")
def meta_index(tmp_path_factory, demo_corpus) -> hopgraph.Index:
    from meta_corpus import write_meta_corpus

    d = tmp_path_factory.mktemp("meta")
    path = write_meta_corpus(demo_corpus, d / "meta.jsonl")
    hopgraph.Index.build(path, embedder=f"hashing-{DIM}", pipelines=BASELINES, progress=False).save(d / "index")
    return hopgraph.Index.load(d / "index", progress=False)


META_KEY = "meta-key"


@pytest.fixture(scope="module")
def meta_server(meta_index):
    with BackgroundServer(create_app(meta_index, LIMITS, api_key=META_KEY)) as srv:
        yield srv


def _row(pid: str) -> int:
    return int(pid.split(" ")[1].split("#")[0])


def test_search_returns_text_and_metadata(meta_server, meta_index, demo_corpus):
    from meta_corpus import meta_of

    with httpx.Client(base_url=meta_server.url, trust_env=False, headers={"X-API-Key": META_KEY}) as h:
        body = {"queries": ["Who founded Orbis Computing?", "comet"], "pipeline": "bm25", "k": 4}
        r = h.post("/search", json=body)
        assert r.status_code == 200, r.text
        hits = [hit for res in r.json()["results"] for hit in res["hits"]]
        assert len(hits) >= 5 and r.json()["results"][0]["hits"][0]["title"] == "Orbis Computing"
        for hit in hits:
            assert hit["text"] == demo_corpus.texts[_row(hit["id"])] and hit["metadata"] == meta_of(_row(hit["id"]), hit["id"])
        bare = h.post("/search", json={**body, "with_text": False}).json()
        assert [[x["id"] for x in res["hits"]] for res in bare["results"]] == \
            [[x["id"] for x in res["hits"]] for res in r.json()["results"]]
        assert all(x["text"] is None and x["metadata"] for res in bare["results"] for x in res["hits"])
        for bad in ("no", 0, None):
            r = h.post("/search", json={**body, "with_text": bad})
            assert r.status_code == 422 and "with_text" in _detail(r)
        schema = h.get("/openapi.json").json()
        assert "/passages/{pid}" in schema["paths"]
        hit_schema = schema["components"]["schemas"]["HitOut"]["properties"]
        assert {"text", "metadata"} <= set(hit_schema)
        assert "with_text" in schema["components"]["schemas"]["SearchRequest"]["properties"]


def test_get_passage_by_id_with_slash_and_404(meta_server, demo_corpus):
    from urllib.parse import quote

    from meta_corpus import meta_id, meta_of

    with httpx.Client(base_url=meta_server.url, trust_env=False) as h:
        pid = meta_id(5)  # "wiki/doc 5#p?2": a '/', a space, '#' and '?'
        want = {"id": pid, "title": demo_corpus.titles[5], "text": demo_corpus.texts[5], "metadata": meta_of(5, pid)}
        assert h.get("/passages/" + quote(pid, safe="")).status_code == 401  # the key check as elsewhere
        auth = {"Authorization": f"Bearer {META_KEY}"}
        assert h.get("/passages/" + quote(pid, safe=""), headers=auth).json() == want   # '/' as %2F
        assert h.get("/passages/" + quote(pid, safe="/"), headers=auth).json() == want  # '/' literal
        r = h.get("/passages/" + quote("wiki/nope", safe=""), headers=auth)
        assert r.status_code == 404 and "wiki/nope" in _detail(r)
        assert h.get("/passages/", headers=auth).status_code == 404
        assert h.get("/passages/" + quote(meta_id(5)[:-1], safe=""), headers=auth).status_code == 404


def test_client_and_async_client_text_metadata_and_passage(meta_server, meta_index):
    from hopgraph.client import PassageNotFound
    from meta_corpus import meta_id

    qs = ["Who founded Orbis Computing?", "comet discovered at Cerro Alto"]
    with hopgraph.Client(meta_server.url, api_key=META_KEY) as c:
        first = c.info()["pipelines"][0]
        want = meta_index.search(qs, pipeline=first, k=3)
        assert want[0][0].text and want[0][0].metadata
        assert c.search(qs, pipeline="bm25", k=3) == meta_index.search(qs, pipeline="bm25", k=3)
        assert c.search(qs, k=3) == want  # pipeline=None: the server's first served pipeline
        bare = c.search(qs, pipeline="dense", k=3, with_text=False)
        assert bare == meta_index.search(qs, pipeline="dense", k=3, with_text=False) and bare[0][0].text is None
        assert c.search(qs, pipeline="hybrid", k=3, params={"rrf_k": 10}) == \
            meta_index.search(qs, pipeline="hybrid", k=3, rrf_k=10)
        assert c.passage(meta_id(2)) == meta_index.passage(meta_id(2))
        with pytest.raises(PassageNotFound, match="HTTP 404") as e:
            c.passage("wiki/none")
        assert isinstance(e.value, KeyError) and isinstance(e.value, ServiceError)

    async def scenario():
        async with hopgraph.AsyncClient(meta_server.url, api_key=META_KEY) as ac:
            assert (await ac.health())["status"] == "ok" and (await ac.info())["pipelines"][0] == first
            got = await asyncio.gather(*(ac.search(q, k=3) for q in qs))  # concurrent requests
            assert [g[0] for g in got] == want
            assert await ac.search(qs, pipeline="bm25", k=3, with_text=False) == \
                meta_index.search(qs, pipeline="bm25", k=3, with_text=False)
            raw = await ac.search_response(qs, pipeline="dense", k=3)
            assert raw["pipeline"] == "dense" and "timing" in raw
            assert await ac.passage(meta_id(7)) == meta_index.passage(meta_id(7))
            with pytest.raises(PassageNotFound):
                await ac.passage("wiki/none")
            with pytest.raises(RequestRejected, match="k must be between"):
                await ac.search(qs, pipeline="dense", k=0)
        async with hopgraph.AsyncClient(meta_server.url) as anonymous:
            with pytest.raises(ServiceError, match="HTTP 401"):
                await anonymous.search(qs, pipeline="dense")
    asyncio.run(scenario())


def test_client_default_pipeline_is_served_by_a_baseline_server(server, index):
    """The README's server serves dense,bm25,hybrid: the default pipeline must be one of them."""
    with hopgraph.Client(server.url) as c:
        served = c.info()["pipelines"]
        assert c.search("Orbis", k=2) == index.search("Orbis", pipeline=served[0], k=2)


# ---------------------------------------------------------------- group_by_document
@pytest.fixture(scope="module")
def chunked_index(demo_corpus) -> hopgraph.Index:
    """The demo corpus split into 8-word passages (2 shared): several passages per document."""
    index = hopgraph.Index.build(demo_corpus, embedder=f"hashing-{DIM}", pipelines=BASELINES, progress=False,
                                 chunk_tokens=8, chunk_overlap=2)
    assert len(index.corpus) > 2 * len(demo_corpus)
    return index


def _documents(index: hopgraph.Index, hits) -> list[str]:
    return [index.corpus.meta(index.corpus.position(h.id))["document"] for h in hits]


def test_group_by_document_over_http_and_clients(chunked_index):
    qs = ["Who designed the Clifton Suspension Bridge in Bristol?", "comet discovered by an amateur astronomer"]
    k = 5
    with BackgroundServer(create_app(chunked_index, LIMITS)) as srv, hopgraph.Client(srv.url) as c:
        for pipeline in BASELINES:
            flat = c.search(qs, pipeline=pipeline, k=k)
            assert flat == chunked_index.search(qs, pipeline=pipeline, k=k)
            assert any(len(set(_documents(chunked_index, hits))) < k for hits in flat)  # the test can fail
            grouped = c.search(qs, pipeline=pipeline, k=k, group_by_document=True)
            assert grouped == chunked_index.search(qs, pipeline=pipeline, k=k, group_by_document=True)
            for hits in grouped:
                docs = _documents(chunked_index, hits)
                assert len(set(docs)) == len(docs)  # each document once
                assert len(hits) == k or pipeline == "bm25"  # BM25 returns only passages sharing a word
                assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
        assert c.search(qs, pipeline="hybrid", k=3, group_by_document=True, with_text=False,
                        params={"rrf_k": 10}) == \
            chunked_index.search(qs, pipeline="hybrid", k=3, group_by_document=True, with_text=False, rrf_k=10)

        async def concurrently() -> list:
            async with hopgraph.AsyncClient(srv.url) as ac:  # grouped and flat requests batched side by side
                return await asyncio.gather(*(ac.search(q, pipeline="dense", k=k, group_by_document=g)
                                              for q in qs for g in (True, False)))
        got = asyncio.run(concurrently())
        for i, q in enumerate(qs):
            assert got[2 * i] == chunked_index.search(q, pipeline="dense", k=k, group_by_document=True)
            assert got[2 * i + 1] == chunked_index.search(q, pipeline="dense", k=k)
        with httpx.Client(base_url=srv.url, trust_env=False) as h:
            for bad in ("yes", 1, None, [True]):
                r = post(h, {"queries": qs, "pipeline": "dense", "group_by_document": bad})
                assert r.status_code == 422 and "group_by_document" in _detail(r), r.text
            r = post(h, {"queries": qs, "pipeline": "dense", "k": 0, "group_by_document": True})
            assert r.status_code == 422 and "k must be between" in _detail(r)
            schema = h.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]["properties"]
            assert schema["group_by_document"]["default"] is False


def test_micro_batcher_keeps_grouped_and_flat_requests_apart(chunked_index):
    qs = ["Clifton Suspension Bridge", "Orbis Computing founder"]

    async def run():
        batcher = MicroBatcher(chunked_index, ServeLimits(batch_wait_ms=20))
        await batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit("bm25", 4, [q], group_by_document=g)
                                          for g in (False, True) for q in qs))
        finally:
            await batcher.stop()

    results = asyncio.run(run())
    for i, (g, q) in enumerate((g, q) for g in (False, True) for q in qs):
        assert results[i].hits[0] == chunked_index.search(q, pipeline="bm25", k=4, group_by_document=g)[0]
