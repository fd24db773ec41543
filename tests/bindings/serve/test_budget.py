"""The budget of every request: serving bounds of the search parameters (422 naming the parameter
and the bound), the memory estimate (422 before anything is allocated), the interactive and bulk
lanes, the deadline (504, and the worker stops and takes the next request), filter sizes, huge
passages (413), and the Host / Origin checks of a server without an API key."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

import hopgraph  # noqa: E402
from hopgraph.engine.embedders import HashingEmbedder  # noqa: E402
from hopgraph.engine.errors import InputError  # noqa: E402
from hopgraph.engine.filters import MAX_WHERE_CLAUSES, MAX_WHERE_DEPTH, check_where  # noqa: E402
from hopgraph.engine.pipelines import pipeline_class, pipeline_names  # noqa: E402
from hopgraph.serve import BackgroundServer, ParamLimits, ServeLimits, create_app  # noqa: E402
from hopgraph.serve.budget import IndexShape, declared_bounds, estimate, integer_search_params  # noqa: E402
from hopgraph.serve.guard import HostOriginMiddleware, split_host  # noqa: E402

DIM = 32
PIPES = ["dense", "bm25", "hybrid", "dmar", "stitch"]


@pytest.fixture(scope="module")
def index(demo_corpus):
    return hopgraph.Index.build(demo_corpus, embedder=f"hashing-{DIM}", pipelines=PIPES, progress=False)


@pytest.fixture(scope="module")
def server(index):
    with BackgroundServer(create_app(index, ServeLimits(max_k=50))) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as c:
        yield c


def search(http, **body):
    return http.post("/search", json={"queries": ["Who designed the bridge?"], **body})


# ---------------------------------------------------------------- parameter bounds
def test_every_integer_search_parameter_has_a_serving_bound():
    for name in pipeline_names():
        missing = set(integer_search_params(name)) - set(declared_bounds(name))
        assert not missing, f"{name}: integer search parameters without a serving bound: {missing}"
        assert all(ParamLimits.default().of(name)[p] >= pipeline_class(name).SearchParams.create().to_dict()[p]
                   for p in declared_bounds(name)), f"{name}: a default above its serving bound"


@pytest.mark.filterwarnings("ignore::hopgraph.DeprecatedParameterWarning")
@pytest.mark.parametrize("pipeline, params, name, bound", [
    ("dmar", {"shapley_samples": 10**6}, "shapley_samples", 500),
    ("dmar", {"T": 10**8}, "shapley_samples", 500),                 # the old name, refused under both names
    ("dmar", {"candidate_depth": 10**9}, "candidate_depth", 500),
    ("dmar", {"second_stage_depth": 10**9}, "second_stage_depth", 500),
    ("stitch", {"region_hops": 10**6}, "region_hops", 3),
    ("hybrid", {"fusion_depth": 10**9}, "fusion_depth", 1000),
    ("hybrid", {"depth": 10**9}, "fusion_depth", 1000),
])
def test_parameter_over_its_bound_is_422_naming_both(http, pipeline, params, name, bound):
    r = search(http, pipeline=pipeline, params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert f"params.{name}" in detail and f"bound of {bound}" in detail
    assert search(http, pipeline=pipeline, params={name: bound}).status_code == 200  # at the bound: answered


def test_info_lists_the_bounds(http):
    info = http.get("/info").json()
    assert info["param_limits"]["dmar"]["shapley_samples"] == 500
    assert set(info["param_limits"]) == set(PIPES) - {"dense", "bm25"}
    assert info["limits"]["request_timeout"] == ServeLimits().request_timeout


def test_param_limits_from_file_and_flags(tmp_path):
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"dmar": {"shapley_samples": 64}, "stitch": {"region_hops": 1}}))
    limits = ParamLimits.from_sources(path, ["dmar.candidate_depth=200", "dmar.shapley_samples=80"])
    assert limits.of("dmar")["shapley_samples"] == 80 and limits.of("dmar")["candidate_depth"] == 200
    assert limits.of("dmar")["anchors"] == declared_bounds("dmar")["anchors"] == 32
    assert limits.of("stitch")["region_hops"] == 1 and limits.of("hybrid") == declared_bounds("hybrid")
    for item, message in (("dmar.no_such=3", "no search parameter 'no_such'"),
                          ("dmar.shapley_lambda=3", "not an integer parameter"),
                          ("dmar.shapley_samples=0", "must be an integer >= 1"),
                          ("dmar.shapley_samples=2.5", "must be an integer"),
                          ("nope.x=1", "unknown pipeline 'nope'")):
        with pytest.raises(InputError, match=message):
            ParamLimits.from_sources(None, [item])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="cannot read it as JSON"):
        ParamLimits.from_sources(bad)


def test_operator_bound_applies(index):
    app = create_app(index, pipelines=["hybrid"],
                     param_limits=ParamLimits.from_sources(None, ["hybrid.fusion_depth=10"]))
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        assert search(h, pipeline="hybrid", params={"fusion_depth": 10}).status_code == 200
        r = search(h, pipeline="hybrid", params={"fusion_depth": 11})
        assert r.status_code == 422 and "bound of 10" in r.json()["detail"]


# ---------------------------------------------------------------- k, memory estimate, filters
def test_k_beyond_max_k_is_422_and_within_it_is_clamped_to_the_index(http, index):
    r = search(http, pipeline="dense", k=10**9)
    assert r.status_code == 422 and "k must be between 1 and 50" in r.json()["detail"]
    r = search(http, pipeline="dense", k=50)
    assert r.status_code == 200 and len(r.json()["results"][0]["hits"]) == min(50, index.n_live)


def test_estimates_grow_with_the_parameters(index):
    shape = IndexShape(100_000, 384, {"dmar": {"max_query_entities": 8, "ego_size": 16}})
    P = pipeline_class("dmar").SearchParams
    base = estimate(shape, "dmar", P.create(), 1, 5)
    assert base.work == pytest.approx(1.0)
    for change in ({"shapley_samples": 500}, {"candidate_depth": 500}, {"union_depth": 400}):
        more = estimate(shape, "dmar", P.create(**change), 1, 5)
        assert more.work > base.work and more.memory_bytes > base.memory_bytes, change
    assert estimate(shape, "dmar", P.create(), 64, 5).work == pytest.approx(64, rel=0.01)
    S = pipeline_class("stitch").SearchParams
    hops = [estimate(shape, "stitch", S.create(region_hops=h), 1, 5).memory_bytes for h in range(4)]
    assert hops == sorted(hops) and hops[3] > hops[0]


@pytest.mark.parametrize("name", pipeline_names())
def test_no_cost_model_falls_when_a_parameter_rises_to_its_bound(name):
    """Every pipeline's declared model: each integer search parameter raised from its default to its
    serving bound never lowers the work or the memory (a bound caps what a request can cost)."""
    cls = pipeline_class(name)
    shape = IndexShape(100_000, 384, {})
    default = cls.SearchParams.create()
    base = cls.cost(shape, default, 4, 10)
    for param, bound in declared_bounds(name).items():
        more = cls.cost(shape, default.replace(**{param: bound}), 4, 10)
        assert more.work >= base.work and more.memory >= base.memory, (name, param)


@pytest.mark.parametrize("pipeline, params, work, memory", [
    ("dense", {}, 8.00000104166653, 207104),
    ("bm25", {}, 8.000399980001, 1407104),
    ("hybrid", {"fusion_depth": 300}, 8.000042597286424, 1464704),
    ("g3rag", {"candidate_depth": 200, "bridge": 0.4}, 8.009594346939314, 2070080),
    ("stitch", {"region_hops": 2, "localise": True}, 20.528361832671358, 11008064),
    ("ppr_binary", {"ppr": False}, 7.865927463650824, 1517696),
    ("dmar", {"shapley_samples": 200, "union_depth": 50}, 8.869559259196745, 16243264),
])
def test_each_pipelines_cost_model_gives_the_servers_figures(pipeline, params, work, memory):
    """The figures the server's own model gave before the pipelines declared their costs (8 questions
    searched 2 at a time, k = 10, over 100,000 passages of dimension 384), to the last bit."""
    cls = pipeline_class(pipeline)
    shape = IndexShape(100_000, 384, {"g3rag": {"n_neighbors": 32}, "dmar": {"max_query_entities": 8, "ego_size": 16}})
    got = estimate(shape, pipeline, cls.SearchParams.create(**params), 8, 10, False, 2)
    assert (got.work, got.memory_bytes) == (work, memory)


def test_memory_estimate_over_the_budget_is_422_before_running(index):
    app = create_app(index, ServeLimits(max_request_mb=1), pipelines=["dmar"])
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        batches = srv.app.state.batcher.batches
        r = h.post("/search", json={"queries": ["q"] * 8, "pipeline": "dmar",
                                    "params": {"shapley_samples": 500, "candidate_depth": 500}})
        assert r.status_code == 422 and "MiB" in r.json()["detail"] and "budget of 1 MiB" in r.json()["detail"]
        assert srv.app.state.batcher.batches == batches  # refused before any worker ran it


def _nested_not(where: dict, depth: int) -> dict:
    for _ in range(depth - 1):
        where = {"$not": where}
    return where


FIELDS_BOUND = "the bound on fields in one filter is 16"
VALUES_BOUND = "the bound on listed values is 1024"


@pytest.mark.parametrize("body, message", [
    ({"where": {f"field{i}": "x" for i in range(17)}}, FIELDS_BOUND),
    ({"where": {"year": list(range(1025))}}, VALUES_BOUND),
    ({"where": {"$and": [{f"field{i}": "x"} for i in range(17)]}}, FIELDS_BOUND),
    ({"where": {"$or": [{"year": {"$in": list(range(600))}}, {"$and": [{"year": list(range(600))}]}]}},
     VALUES_BOUND),
    ({"where": {"$or": [{"year": i} for i in range(MAX_WHERE_CLAUSES)]}},
     f"the bound on clauses in one filter is {MAX_WHERE_CLAUSES}"),
    ({"where": _nested_not({"year": 1}, MAX_WHERE_DEPTH + 1)}, f"the bound on nesting depth through $and / $or / "
                                                                f"$not is {MAX_WHERE_DEPTH}"),
])
def test_filter_sizes_are_bounded_through_the_whole_tree(http, server, body, message):
    batches = server.app.state.batcher.batches
    r = search(http, pipeline="dense", **body)
    assert r.status_code == 422 and message in r.json()["detail"], r.text
    assert server.app.state.batcher.batches == batches  # refused before any worker evaluated it


def test_a_filter_at_the_bounds_is_served(http, index):
    where = {"$and": [{"$or": [{f"field{i}": {"$in": list(range(64))}} for i in range(15)]},
                      _nested_not({"lang": ["en", *map(str, range(63))]}, MAX_WHERE_DEPTH - 1)]}
    assert check_where(where) == (15 + 1 + 1 + MAX_WHERE_DEPTH - 2 + 1, 1024, MAX_WHERE_DEPTH, 16)
    r = search(http, pipeline="dense", where=where)
    assert r.status_code == 200, r.text
    assert len(r.json()["results"]) == 1


def test_many_unknown_where_fields_do_not_grow_the_server(http, index):
    for i in range(50):
        r = search(http, pipeline="dense", where={f"fresh-{i}-{j}": "x" for j in range(16)})
        assert r.status_code == 200 and r.json()["results"][0]["hits"] == []
    assert len(index._metadata._fields) == 0


def test_huge_passage_is_413(index_dir_factory):
    with BackgroundServer(create_app(hopgraph.Index.load(index_dir_factory(), progress=False),
                                     ServeLimits(max_passage_chars=1000), pipelines=["dense"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        r = h.post("/passages", json={"passages": [{"id": "big", "text": "word " * 1000}]})
        assert r.status_code == 413 and "passages[0] ('big') has 5000 characters" in r.json()["detail"]
        assert h.post("/passages", json={"passages": [{"id": "ok", "text": "a short one"}]}).status_code == 200


@pytest.fixture
def index_dir_factory(tmp_path, demo_corpus):
    def make():
        path = tmp_path / "live"
        hopgraph.Index.build(demo_corpus, embedder=f"hashing-{DIM}", pipelines=["dense"], progress=False).save(path)
        return path
    return make


# ---------------------------------------------------------------- lanes and deadlines
class SlowEmbedder:
    """Hashing vectors, ``delay`` seconds per call; records each call's thread."""

    name, dim = "slow", DIM

    def __init__(self, delay: float) -> None:
        self.delay, self.calls, self.hashing = delay, [], HashingEmbedder(DIM)

    def encode(self, texts, batch_size=64, progress=False):
        self.calls.append(threading.current_thread().name)
        time.sleep(self.delay)
        return self.hashing.encode(texts)


def test_deadline_answers_504_and_frees_the_worker(demo_corpus):
    slow = SlowEmbedder(0.4)
    index = hopgraph.Index.build(demo_corpus, embedder=slow, pipelines=["dense"], progress=False)
    limits = ServeLimits(request_timeout=1.0, heavy_cost=4, bulk_batch_size=8)
    with BackgroundServer(create_app(index, limits)) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        slow.calls.clear()
        t0 = time.monotonic()
        r = h.post("/search", json={"queries": [f"question {i}" for i in range(256)], "pipeline": "dense"})
        elapsed = time.monotonic() - t0
        assert r.status_code == 504 and "request timeout (1 s)" in r.json()["detail"], r.text
        assert elapsed < 1.0 + 0.3
        time.sleep(0.6)  # the worker reaches its next checkpoint and stops: 3 of the 4 chunks never run
        assert slow.calls == ["hopgraph-search-bulk_0"] * 3 or slow.calls == ["hopgraph-search-bulk_0"] * 2
        r = h.post("/search", json={"queries": ["one question"], "pipeline": "dense"})
        assert r.status_code == 200 and r.json()["timing"]["lane"] == "interactive"
        r = h.post("/search", json={"queries": [f"q{i}" for i in range(8)], "pipeline": "dense"})
        assert r.status_code == 200 and r.json()["timing"]["lane"] == "bulk"  # 8 questions > heavy_cost 4


def test_heavy_requests_do_not_queue_in_front_of_light_ones(demo_corpus):
    slow = SlowEmbedder(0.25)
    index = hopgraph.Index.build(demo_corpus, embedder=slow, pipelines=["dense"], progress=False)
    with BackgroundServer(create_app(index, ServeLimits(request_timeout=10, heavy_cost=4))) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        heavy = threading.Thread(target=lambda: h.post("/search", json={
            "queries": [f"q{i}" for i in range(64 * 6)], "pipeline": "dense"}))
        heavy.start()
        time.sleep(0.3)  # the bulk worker is busy for ~1.5 s
        t0 = time.monotonic()
        r = h.post("/search", json={"queries": ["light"], "pipeline": "dense"})
        assert r.status_code == 200 and time.monotonic() - t0 < 1.0
        heavy.join()


def test_bulk_lane_answers_equal_index_search(index):
    """The bulk worker searches bulk_batch_size queries at a time: the answers are the same."""
    qs = [f"Who designed the bridge {i}?" for i in range(11)]
    limits = ServeLimits(heavy_cost=4, bulk_batch_size=3)
    with BackgroundServer(create_app(index, limits, pipelines=["hybrid", "dmar"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        for pipeline in ("hybrid", "dmar"):
            r = h.post("/search", json={"queries": qs, "pipeline": pipeline, "k": 4})
            assert r.status_code == 200 and r.json()["timing"]["lane"] == "bulk"
            want = index.search(qs, pipeline=pipeline, k=4)
            got = r.json()["results"]
            assert [[x["id"] for x in res["hits"]] for res in got] == [[w.id for w in row] for row in want]
            np.testing.assert_allclose([x["score"] for res in got for x in res["hits"]],
                                       [w.score for row in want for w in row], rtol=1e-6)


def test_bulk_checkpoints_wait_while_the_interactive_worker_runs():
    import asyncio

    from hopgraph.engine.cancel import SearchCancelled
    from hopgraph.serve.batcher import GroupToken, SearchJob

    loop = asyncio.new_event_loop()
    try:
        job = SearchJob("dense", 5, ["q"], loop.create_future(), time.monotonic() + 0.6)
        busy = threading.Event()  # cleared: the interactive worker runs a group
        threading.Timer(0.2, busy.set).start()
        t0 = time.monotonic()
        GroupToken([job], busy).check()  # waits until the interactive worker is idle, then passes
        assert 0.15 < time.monotonic() - t0 < 0.5
        busy.clear()
        with pytest.raises(SearchCancelled, match="deadline"):  # never past the deadline, though
            GroupToken([job], busy).check()
        assert time.monotonic() - t0 < 1.0
    finally:
        loop.close()


def test_engine_cancellation_stops_a_search_at_a_checkpoint(index):
    from hopgraph.engine.cancel import CancelToken, SearchCancelled, cancellable

    Q = index.embed_queries(["a question"] * 4)
    with pytest.raises(SearchCancelled, match="deadline"), cancellable(CancelToken.after(0)):
        pass  # an expired token is refused on entry
    token = CancelToken()
    with cancellable(token):
        token.cancel("before the batch")
        with pytest.raises(SearchCancelled, match="before the batch"):
            index.pipeline("dense").search(Q, 3)  # the per-batch checkpoint of Pipeline.search
    index.pipeline("dense").search(Q, 3)  # no token outside the block
    token = CancelToken()
    stages = []
    pipe = index.pipeline("stitch")
    original = pipe.relevance_rows

    def cancelled_after_relevance(*args, **kwargs):
        out = original(*args, **kwargs)
        token.cancel("by the test")
        stages.append("relevance")
        return out

    pipe.relevance_rows = cancelled_after_relevance
    try:
        with cancellable(token), pytest.raises(SearchCancelled, match="by the test"):
            pipe.search(Q, 3, ["a question"] * 4)
    finally:
        del pipe.relevance_rows
    assert stages == ["relevance"] and pipe.timings["ppr"] == 0.0  # stopped before the walk


# ---------------------------------------------------------------- Host / Origin
def test_split_host():
    assert split_host("127.0.0.1:8080") == ("127.0.0.1", "8080")
    assert split_host("[::1]:80") == ("::1", "80") and split_host("LocalHost") == ("localhost", "")


@pytest.mark.parametrize("host, ok", [("127.0.0.1:8080", True), ("localhost", True), ("[::1]:9", True),
                                      ("app.localhost:1", True), ("evil.example:8080", False),
                                      ("127.0.0.1.nip.io", False), ("", False)])
def test_only_loopback_hosts_without_allow_host(host, ok):
    guard = HostOriginMiddleware(None)
    assert (guard.problem("GET", {"host": host}) is None) == ok
    assert HostOriginMiddleware(None, ["evil.example"]).problem("GET", {"host": "evil.example:8080"}) is None
    assert HostOriginMiddleware(None, ["*"]).problem("GET", {"host": "anything"}) is None


def test_host_and_origin_over_http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as h:
        own = server.url.split("//")[1]
        r = h.get("/health", headers={"Host": "attacker.example"})
        assert r.status_code == 403 and "--allow-host attacker.example" in r.json()["detail"]
        body = {"queries": ["q"], "pipeline": "dense"}
        r = h.post("/search", json=body, headers={"Origin": "http://attacker.example"})
        assert r.status_code == 403 and "cross-origin POST" in r.json()["detail"]
        r = h.delete("/passages/demo-1", headers={"Origin": "http://localhost:3000"})
        assert r.status_code == 403
        assert h.post("/search", json=body, headers={"Origin": f"http://{own}"}).status_code == 200
        assert h.get("/info", headers={"Origin": "http://attacker.example"}).status_code == 200  # a read
        assert h.post("/search", json=body).status_code == 200  # no browser headers: curl, clients


def test_api_key_server_skips_the_host_check(index):
    with BackgroundServer(create_app(index, api_key="k3y", pipelines=["dense"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        assert h.get("/health", headers={"Host": "api.example.com"}).status_code == 200
    with BackgroundServer(create_app(index, pipelines=["dense"], allowed_hosts=["api.example.com"])) as srv, \
            httpx.Client(base_url=srv.url, trust_env=False, timeout=30) as h:
        assert h.get("/health", headers={"Host": "api.example.com"}).status_code == 200
        assert h.get("/health", headers={"Host": "other.example.com"}).status_code == 403


def test_abuse_leaves_answers_unchanged(http, index):
    """After every refused request above, a normal search still equals Index.search."""
    qs = ["Who designed the bridge?", "Which prize did the lighthouse novel win?"]
    r = http.post("/search", json={"queries": qs, "pipeline": "hybrid", "k": 4})
    assert r.status_code == 200
    want = index.search(qs, pipeline="hybrid", k=4)
    assert [[h["id"] for h in res["hits"]] for res in r.json()["results"]] == [[h.id for h in w] for w in want]
    np.testing.assert_allclose([h["score"] for h in r.json()["results"][0]["hits"]], [h.score for h in want[0]])
