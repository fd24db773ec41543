"""The pipeline contract, checked on every registered pipeline (as scikit-learn's ``check_estimator``):
fit / search shapes and order, fitted state, batch independence, filters, k beyond N, empty and hostile
input, per-call search parameters, run settings, save / load, add / delete, clone."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph import Index, InputError, NotFittedError, RunSettings
from hopgraph.demo import DEMO_QUESTIONS
from hopgraph.engine.params import InvalidParameter
from hopgraph.engine.pipelines import pipeline_class, pipeline_names
from ranking_asserts import assert_same_up_to_ties

PIPELINES = pipeline_names()
K = 5


@pytest.fixture(scope="module")
def index(demo_corpus, hashing_embedder):
    return Index.build(demo_corpus, embedder=hashing_embedder, pipelines=PIPELINES, device="cpu", progress=False)


@pytest.fixture(scope="module")
def queries(index):
    return index.embed_queries(DEMO_QUESTIONS), list(DEMO_QUESTIONS)


def check_ranked(ids: np.ndarray, scores: np.ndarray, n: int, k: int, rows: int) -> None:
    """Shapes, dtypes, ids in range, no repeats, padding last, scores non-increasing."""
    assert ids.shape == (rows, k) and scores.shape == (rows, k)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    for row, sc in zip(ids, scores):
        valid = row >= 0
        assert valid.sum() == 0 or valid[:valid.sum()].all(), "padding only at the end"
        assert ((row[valid] >= 0) & (row[valid] < n)).all()
        assert len(set(row[valid].tolist())) == valid.sum(), "an id twice in one row"
        assert np.all(np.diff(sc[valid]) <= 1e-6), "scores decrease down the list"
        assert np.all(np.isneginf(sc[~valid]))


@pytest.mark.parametrize("name", PIPELINES)
def test_fit_marks_fitted_and_search_before_fit_refuses(name, index, queries):
    pipe = pipeline_class(name)()
    assert not pipe.is_fitted
    with pytest.raises(NotFittedError, match="not fitted"):
        pipe.search(queries[0], K, queries[1])
    fitted = index.pipeline(name)
    assert fitted.is_fitted and fitted.name == name
    clone = fitted.clone()
    assert not clone.is_fitted and clone.fit_params == fitted.fit_params
    assert clone.search_defaults == fitted.search_defaults


@pytest.mark.parametrize("name", PIPELINES)
def test_search_shapes_order_and_k_beyond_n(name, index, queries):
    pipe, (Q, texts), n = index.pipeline(name), queries, len(index.X)
    ids, scores = pipe.search(Q, K, texts)
    check_ranked(ids, scores, n, K, len(Q))
    assert (ids[:, 0] >= 0).all()
    ids, scores = pipe.search(Q[:2], n + 7, texts[:2])  # k beyond N: clamped to the live passages
    check_ranked(ids, scores, n, n, 2)
    ids, scores = pipe.search(Q[:1], 10**12, texts[:1])  # never allocated
    check_ranked(ids, scores, n, n, 1)
    empty_ids, empty_scores = pipe.search(Q[:0], K, [])
    assert empty_ids.shape == (0, K) and empty_scores.shape == (0, K)


@pytest.mark.parametrize("name", PIPELINES)
def test_batch_independence_and_run_settings(name, index, queries):
    pipe, (Q, texts) = index.pipeline(name), queries
    together = pipe.search(Q, K, texts)
    for i in (0, len(Q) - 1):
        alone = pipe.search(Q[i:i + 1], K, texts[i:i + 1])
        assert_same_up_to_ties(alone[0][0], alone[1][0], together[0][i], together[1][i], 1e-5, f"{name}: row {i}")
    one_by_one = pipe.with_settings(batch_size=1).search(Q, K, texts)
    for i in range(len(Q)):  # the batch size is a run setting, not a result
        assert_same_up_to_ties(one_by_one[0][i], one_by_one[1][i], together[0][i], together[1][i], 1e-5,
                               f"{name}: row {i} one by one")


@pytest.mark.parametrize("name", PIPELINES)
def test_filter_returns_only_allowed_and_k_when_k_pass(name, index, queries):
    pipe, (Q, texts), n = index.pipeline(name), queries, len(index.X)
    allowed = np.zeros(n, bool)
    allowed[::3] = True
    ids, scores = pipe.search(Q, K, texts, allowed=allowed)
    assert allowed[ids[ids >= 0]].all()
    assert ((ids >= 0).sum(1) == K).all(), "k results whenever k passages pass"
    with pytest.raises(InputError, match="boolean mask"):
        pipe.search(Q, K, texts, allowed=np.ones(n + 1, bool))


@pytest.mark.parametrize("name", [p for p in PIPELINES if p != "bm25"])
def test_k_hits_whenever_k_pass_beyond_the_candidate_pools(name, index, queries):
    """k beyond every default pool depth (DMAR's second stage, the title bridge's list): k hits."""
    pipe, (Q, texts), n = index.pipeline(name), queries, len(index.X)
    k = min(n, 45)
    ids, _ = pipe.search(Q, k, texts)
    assert ((ids >= 0).sum(1) == k).all(), "k results whenever k passages pass"


def test_k_is_clamped_to_the_live_passages(demo_corpus, hashing_embedder, queries):
    idx = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["dense"], device="cpu", progress=False)
    n = len(idx.X)
    idx.delete([demo_corpus.ids[0], demo_corpus.ids[1]])
    ids, scores = idx.pipeline("dense").search(queries[0][:2], 10**12)
    assert ids.shape == scores.shape == (2, n - 2) and (ids >= 0).all()
    assert [len(h) for h in idx.search(queries[1][:2], pipeline="dense", k=10**12)] == [n - 2] * 2
    assert len(idx.search(queries[1][:1], pipeline="dense", k=10**12, group_by_document=True)[0]) == n - 2


@pytest.mark.parametrize("name", PIPELINES)
def test_search_parameters_are_per_call(name, index, queries):
    pipe, (Q, texts) = index.pipeline(name), queries
    defaults = pipe.search_defaults
    for field in type(defaults).names():
        pipe.search(Q[:1], K, texts[:1], **{field: getattr(defaults, field)})
    assert pipe.search_defaults is defaults
    with pytest.raises(InvalidParameter, match="unknown search parameter"):
        pipe.search(Q[:1], K, texts[:1], no_such_parameter=1)
    for fit_name in type(pipe.fit_params).names():
        with pytest.raises(InvalidParameter, match="fit parameter"):
            pipe.search(Q[:1], K, texts[:1], **{fit_name: getattr(pipe.fit_params, fit_name)})


@pytest.mark.parametrize("name", PIPELINES)
def test_hostile_input_is_refused_naming_it(name, index, queries):
    pipe, (Q, texts) = index.pipeline(name), queries
    bad = Q[:2].copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError, match="query embeddings"):
        pipe.search(bad, K, texts[:2])
    with pytest.raises(InputError, match="dimension"):
        pipe.search(Q[:, :-1], K, texts)
    for k in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="k must be a positive integer"):
            pipe.search(Q, k, texts)
    with pytest.raises(InputError, match="query texts for"):
        pipe.search(Q, K, texts[:-1])
    with pytest.raises(InputError, match="list of strings"):
        pipe.search(Q[:1], K, texts[0])
    if pipe.needs.query_texts:
        with pytest.raises(InputError, match="needs the query texts"):
            pipe.search(Q, K)
    with pytest.raises(InvalidParameter):
        pipeline_class(name)(no_such_parameter=1)
    with pytest.raises(InvalidParameter):
        pipeline_class(name)(settings=RunSettings(device="tpu"))


@pytest.mark.parametrize("name", PIPELINES)
def test_save_load_round_trip(name, index, queries, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"contract-{name}") / "idx"
    index.save(path)
    loaded = Index.load(path, embedder=index.embedder)
    try:
        Q, texts = queries
        want = index.pipeline(name).search(Q, K, texts)
        got = loaded.pipeline(name).search(Q, K, texts)
        assert loaded.pipeline(name).is_fitted
        assert np.array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    finally:
        loaded.close()


def test_add_and_delete_reach_every_pipeline(demo_corpus, hashing_embedder, queries):
    idx = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=PIPELINES, device="cpu", progress=False)
    Q, texts = queries
    first = {name: idx.search(texts, pipeline=name, k=K)[0][0].id for name in PIPELINES}
    idx.delete(sorted(set(first.values())))
    for name in PIPELINES:
        hits = idx.search(texts, pipeline=name, k=K)
        assert not {h.id for row in hits for h in row} & set(first.values()), name
    idx.add([{"id": "new-1", "title": "Zanzibar lighthouse", "text": texts[0]}])
    for name in PIPELINES:
        assert "new-1" in {h.id for h in idx.search(texts[:1], pipeline=name, k=K)[0]}, name


def test_a_pipeline_builds_only_the_components_it_declares(demo_corpus, hashing_embedder):
    from hopgraph.engine.pipelines.dense import Dense

    class Greedy(Dense):
        """A pipeline that builds BM25 without declaring it."""

        def _fit(self, progress: bool) -> None:
            self.components.bm25(who=self.name)

    X = hashing_embedder.encode(demo_corpus.embedding_texts())
    with pytest.raises(RuntimeError, match=r"does not declare in components_used: \['bm25'\]"):
        Greedy().fit(X, demo_corpus)

    class Unknown(Dense):
        """A pipeline that declares a kind of shared component that does not exist."""

        components_used = ("dense", "graph")

    with pytest.raises(RuntimeError, match=r"declares components_used \['graph'\] that are no kind"):
        Unknown().fit(X, demo_corpus)
    for name in PIPELINES:  # every registered pipeline's declaration covers what its fit builds
        cls = pipeline_class(name)
        cls().fit(X, demo_corpus, hashing_embedder)
