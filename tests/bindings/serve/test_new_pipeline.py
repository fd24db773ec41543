"""A pipeline defined outside hopgraph is served like the built-in ones once registered: the server
reads its serving bounds from its parameter domains and its cost from its own model (nothing in
``hopgraph.serve`` names it), unsharded and through a sharded index's router (shards in this
process), answering what ``Index.search`` answers; its state (a row per passage, held by the router)
follows adds and deletes through the router."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

import hopgraph  # noqa: E402
from hopgraph.engine.components.query_batch import QueryBatch  # noqa: E402
from hopgraph.engine.cost import LIST_ENTRY, Cost, IndexShape, dense_scan_cost  # noqa: E402
from hopgraph.engine.errors import IndexFormatError  # noqa: E402
from hopgraph.engine.params import FitParams, SearchParams, integer, real  # noqa: E402
from hopgraph.engine.pipelines import Pipeline, pipeline_class, register_pipeline, unregister_pipeline  # noqa: E402
from hopgraph.engine.ranking import PAD_ID, PAD_SCORE  # noqa: E402
from hopgraph.engine.storage import load_arrays, save_arrays  # noqa: E402
from hopgraph.engine.timing import StageTimer  # noqa: E402
from hopgraph.serve import BackgroundServer, ParamLimits, ServeLimits, create_app  # noqa: E402
from hopgraph.serve.budget import estimate  # noqa: E402
from hopgraph.shards import LocalShards, open_router, shard_index  # noqa: E402

NAME = "centrality"
QUESTIONS = ["Who designed the bridge?", "Which prize did the lighthouse novel win?", "river city bridge"]
BOUND = 200


@dataclass(frozen=True)
class CentralityFit(FitParams):
    """``centroids``: how many centroids (of the rows ``i % centroids == j``) a passage is compared with."""

    pipeline = NAME
    centroids: int = integer(2, low=1)


@dataclass(frozen=True)
class CentralitySearch(SearchParams):
    """``candidate_depth``: the dense list rescored; ``prior_weight``: the weight of the centrality."""

    pipeline = NAME
    candidate_depth: int = integer(30, low=1, serving_bound=BOUND)
    prior_weight: float = real(0.5, low=0.0)


class Centrality(Pipeline[CentralityFit, CentralitySearch]):
    """A toy pipeline: the dense top ``candidate_depth`` rescored by cosine + ``prior_weight`` · the
    passage's largest cosine to a centroid (a row per passage, fitted, saved and loaded)."""

    name = NAME
    FitParams = CentralityFit
    SearchParams = CentralitySearch
    components_used = ("dense",)
    stages = ("dense", "prior")

    def _fit(self, progress: bool) -> None:
        X = np.asarray(self.components.X, np.float32)
        c = self.fit_params.centroids
        centroids = np.stack([X[j::c].mean(0) if len(X[j::c]) else np.zeros(X.shape[1], np.float32)
                              for j in range(c)])
        norms = np.linalg.norm(centroids, axis=1, keepdims=True)
        self.centroids_ = (centroids / np.where(norms > 0, norms, 1)).astype(np.float32)
        self.prior_ = (X @ self.centroids_.T).max(1).astype(np.float32)

    def _add(self, start: int, progress: bool) -> None:
        """The new rows' priors against the fitted centroids (read by rows: a sharded index's router
        never holds all of X)."""
        X = self.components.X
        new = np.asarray(X[np.arange(start, len(X))], np.float32)
        self.prior_ = np.concatenate([self.prior_[:start], (new @ self.centroids_.T).max(1).astype(np.float32)])

    def _save(self, directory) -> None:
        save_arrays(directory, {"prior": self.prior_, "centroids": self.centroids_})

    def _load(self, directory) -> None:
        arrays = load_arrays(directory, ["prior", "centroids"], mmap=False)
        if len(arrays["prior"]) != self._stored_rows:
            raise IndexFormatError(f"{directory}: {len(arrays['prior'])} priors for {self._stored_rows} passages")
        self.prior_, self.centroids_ = arrays["prior"], arrays["centroids"]

    def _search_batch(self, batch: QueryBatch, k: int, params: CentralitySearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        with timer("dense"):
            ids, scores = batch.dense_topk(max(k, params.candidate_depth))
        with timer("prior"):
            valid = ids >= 0
            rescored = np.where(valid, scores + params.prior_weight * self.prior_[np.maximum(ids, 0)], -np.inf)
            order = np.lexsort((ids, -rescored), axis=1)[:, :k]
            top, top_scores = np.take_along_axis(ids, order, 1), np.take_along_axis(rescored, order, 1)
            ok = np.isfinite(top_scores)
            return (np.where(ok, top, PAD_ID).astype(np.int64),
                    np.where(ok, top_scores, PAD_SCORE).astype(np.float32))

    @classmethod
    def cost(cls, shape: IndexShape, params: CentralitySearch, batch: int, k: int, grouped: bool = False) -> Cost:
        """The dense scan, then the ``candidate_depth`` list rescored and sorted, and the priors."""
        n, depth = max(shape.n, 1), cls.cost_depth(shape, params, k, grouped)
        D = max(params.candidate_depth, depth)
        return super().cost(shape, params, batch, k, grouped) + Cost(batch * D * 4, 4 * n + batch * D * LIST_ENTRY)


@pytest.fixture(scope="module")
def registered():
    register_pipeline(Centrality)
    yield Centrality
    unregister_pipeline(NAME)


@pytest.fixture(scope="module")
def saved(registered, demo_corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("centrality") / "index"
    hopgraph.Index.build(demo_corpus, embedder="hashing-32", pipelines=["dense", NAME], progress=False).save(path)
    return path


@pytest.fixture(scope="module")
def single(saved):
    return hopgraph.Index.load(saved, progress=False)


@pytest.fixture(scope="module")
def router(single, tmp_path_factory):
    """The router of ``single`` split in two shards (reached in this process: ``router.local``)."""
    out = shard_index(single, 2, tmp_path_factory.mktemp("centrality-shards") / "shards")
    local = LocalShards.open(out)
    index = open_router(out, local)
    index.local = local
    return index


def hits(response) -> tuple[list[list[str]], list[float]]:
    results = response.json()["results"]
    return [[h["id"] for h in r["hits"]] for r in results], [h["score"] for r in results for h in r["hits"]]


def check_served_like_the_index(index, want, limits: ServeLimits | None = None) -> None:
    """``index`` served over HTTP answers ``want`` (an Index.search of the unsharded index) for the
    toy pipeline, and refuses a parameter over its declared bound or an operator's."""
    for bounds, bound in ((None, BOUND), (ParamLimits.from_sources(None, [f"{NAME}.candidate_depth=40"]), 40)):
        app = create_app(index, limits, pipelines=[NAME], param_limits=bounds, write_process=False)
        with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
            info = h.get("/info").json()
            assert info["param_limits"] == {NAME: {"candidate_depth": bound}}
            assert set(info["query_params"][NAME]) == {"candidate_depth", "prior_weight"}
            r = h.post("/search", json={"queries": QUESTIONS, "pipeline": NAME, "k": 6,
                                        "params": {"candidate_depth": bound, "prior_weight": 0.25}})
            assert r.status_code == 200, r.text
            ids, scores = hits(r)
            assert ids == [[x.id for x in row] for row in want]
            np.testing.assert_allclose(scores, [x.score for row in want for x in row], rtol=1e-6)
            r = h.post("/search", json={"queries": QUESTIONS, "pipeline": NAME, "params": {"candidate_depth": bound + 1}})
            assert r.status_code == 422 and f"params.candidate_depth = {bound + 1}" in r.json()["detail"]
            assert f"bound of {bound} for pipeline {NAME!r}" in r.json()["detail"]


def test_served_unsharded(single):
    want = single.search(QUESTIONS, pipeline=NAME, k=6, candidate_depth=BOUND, prior_weight=0.25)
    check_served_like_the_index(single, want)


def test_served_through_a_sharded_router(single, router):
    want = single.search(QUESTIONS, pipeline=NAME, k=6, candidate_depth=BOUND, prior_weight=0.25)
    got = router.search(QUESTIONS, pipeline=NAME, k=6, candidate_depth=BOUND, prior_weight=0.25)
    assert [[x.id for x in row] for row in got] == [[x.id for x in row] for row in want]
    before = router.local.calls.get("dense_topk", 0)
    check_served_like_the_index(router, want)
    assert router.local.calls["dense_topk"] > before  # the served searches read the shards


def test_the_server_charges_the_pipelines_own_cost(single):
    """The memory check and the lanes read the toy's model: a request over the memory budget only by
    its rescored lists is refused, one over ``heavy_cost`` goes to the bulk worker (which searches
    ``bulk_batch_size`` = all its questions at once, so its memory is the whole request's)."""
    cls = pipeline_class(NAME)
    shape = IndexShape(len(single.X), int(single.X.shape[1]), {NAME: single.pipeline(NAME).fit_params})
    P = cls.SearchParams
    small, large = P.create(candidate_depth=10), P.create(candidate_depth=BOUND)
    B = 64
    lists = dense_scan_cost(shape, B, cls.cost_depth(shape, large, 5, False))
    assert cls.cost(shape, large, B, 5) == lists + Cost(B * BOUND * 4, 4 * len(single.X) + B * BOUND * LIST_ENTRY)
    low, high = estimate(shape, NAME, small, B, 5).memory_bytes, estimate(shape, NAME, large, B, 5).memory_bytes
    assert low < high
    budget_mb = (low + high) / 2 / (1 << 20)
    app = create_app(single, ServeLimits(max_request_mb=budget_mb, heavy_cost=4, bulk_batch_size=B), pipelines=[NAME], write_process=False)
    with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
        body = {"queries": ["q"] * B, "pipeline": NAME}
        r = h.post("/search", json={**body, "params": {"candidate_depth": BOUND}})
        assert r.status_code == 422 and "per-request budget" in r.json()["detail"]
        r = h.post("/search", json={**body, "params": {"candidate_depth": 10}})
        assert r.status_code == 200 and r.json()["timing"]["lane"] == "bulk"
        r = h.post("/search", json={"queries": ["q"], "pipeline": NAME})
        assert r.status_code == 200 and r.json()["timing"]["lane"] == "interactive"


def test_registration_refuses_what_it_cannot_serve(registered):
    from hopgraph.engine.errors import InputError
    from hopgraph.engine.pipelines import pipeline_names
    from hopgraph.engine.pipelines.dense import Dense

    assert NAME in pipeline_names() and pipeline_class(NAME) is Centrality
    assert register_pipeline(Centrality) is Centrality  # the same class again: nothing changes

    class Other(Centrality):
        """Another class under a taken name."""

    with pytest.raises(InputError, match=f"the name {NAME!r} is taken"):
        register_pipeline(Other)
    with pytest.raises(InputError, match="'dense' is taken"):
        register_pipeline(type("Shadow", (Dense,), {}))
    with pytest.raises(InputError, match="expected a Pipeline subclass"):
        register_pipeline(CentralitySearch)
    with pytest.raises(InputError, match="it is built in"):
        unregister_pipeline("dense")


def test_writes_through_the_router_equal_the_same_writes_on_the_single_index(saved, tmp_path):
    """The toy's incremental add reads only the new rows, so adds and deletes through a router (and
    its reopened commit) answer what the same writes on the unsharded index answer."""
    single = hopgraph.Index.load(saved, progress=False)
    out = shard_index(hopgraph.Index.load(saved, progress=False), 2, tmp_path / "shards")
    router = open_router(out, LocalShards.open(out))
    new = [{"id": f"new-{i}", "title": f"Harbor Bridge {i}", "text": f"The Harbor Bridge {i} over the river was "
            "designed by Marisol Venn."} for i in range(5)]
    E = single.embed_passages(new)
    for index in (single, router):
        index.add(new, embeddings=E)
        index.delete([single.corpus.ids[1], "new-3"])
    questions = QUESTIONS + ["Harbor Bridge Marisol Venn"]
    want = single.search_arrays(questions, NAME, k=8)
    assert {int(j) for j in want[0].ravel()} & set(range(len(single.X) - 5, len(single.X)))  # the new rows rank
    for index in (router, open_router(out, LocalShards.open(out))):
        got = index.search_arrays(questions, NAME, k=8)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6)


def test_a_parameter_without_a_serving_bound_is_not_served(registered, single):
    """A pipeline whose integer search parameter declares no bound is refused when the server starts,
    naming the parameter, unless the operator bounds it."""
    from hopgraph.engine.errors import InputError

    @dataclass(frozen=True)
    class UnboundedSearch(CentralitySearch):
        pipeline = "unbounded"
        candidate_depth: int = integer(30, low=1)

    class Unbounded(Centrality):
        name = "unbounded"
        SearchParams = UnboundedSearch

    register_pipeline(Unbounded)
    try:
        with pytest.raises(InputError, match="'candidate_depth' declares no serving bound.*unbounded.candidate_depth=N"):
            create_app(single, pipelines=["unbounded"], write_process=False)
        app = create_app(single, pipelines=["unbounded"], write_process=False,
                         param_limits=ParamLimits.from_sources(None, ["unbounded.candidate_depth=20"]))
        with BackgroundServer(app) as srv, httpx.Client(base_url=srv.url, trust_env=False, timeout=60) as h:
            r = h.post("/search", json={"queries": ["q"], "pipeline": "unbounded", "params": {"candidate_depth": 21}})
            assert r.status_code == 422 and "bound of 20" in r.json()["detail"]
    finally:
        unregister_pipeline("unbounded")
