"""BM25 on the device (:mod:`hopgraph.engine.components.device_bm25`, on CPU tensors: a
``DeviceStore("cpu")``) against the host's :meth:`BM25Index.topk` and :meth:`scores_at_batch`: the
same ids and the same score bits (the same float64 operations on the same values, the float32 sums
in the same token order), on random and adversarial token lists — unknown tokens only, repeats,
empty queries, k beyond the matches, many exact ties, filters passing none or few, several parts
after an add, a shard's statistics, blocks of queries; a query's results never depend on its
batch; a search moves the query side in and the ids and scores out; the host path runs when the
postings do not fit the store."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from hopgraph import HashingEmbedder, Index
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.components.bm25 import BM25Index, BM25Params, TermStats
from hopgraph.engine.components.device_bm25 import DeviceBM25
from hopgraph.engine.graphs.device_store import DeviceMemoryWarning, DeviceStore
from hopgraph.kernels.tensors import as_numpy, as_tensor
from hopgraph.kernels.transfers import counting_transfers

WORDS = "bridge river city tower prize novel harbour poet mayor castle".split()


def random_texts(n: int, seed: int, words: list[str] = WORDS) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(n)]


def random_queries(n: int, seed: int) -> list[list[str]]:
    """Token lists with repeats, unknown tokens and empty lists."""
    rng = np.random.default_rng(seed)
    pool = WORDS + ["unknown", "zebra"]
    return [list(rng.choice(pool, rng.integers(0, 12))) for _ in range(n)]


ADVERSARIAL = [[], ["unknown"], ["unknown", "zebra", "unknown"], ["bridge"], ["bridge", "bridge", "bridge"],
               ["river", "unknown", "river", "poet"], WORDS, WORDS[::-1] + WORDS]


def grown_index(seed: int) -> BM25Index:
    """An index of three parts (two adds of passages beyond the join size)."""
    index = BM25Index.build(random_texts(120, seed), BM25Params())
    for step in range(2):
        index = index.extended(random_texts(70, seed + 1 + step), join_below=0)
    assert len(index.parts) == 3
    return index


def device_topk(index: BM25Index, tokens, k, allowed=None, block_entries=None, store=None):
    resident = DeviceBM25.of(index, store or DeviceStore("cpu"))
    query = resident.query(tokens) if block_entries is None else resident.query(tokens, block_entries)
    ids, scores = resident.topk(query, k, None if allowed is None else torch.from_numpy(allowed))
    return as_numpy(ids), as_numpy(scores)


def assert_same(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1].view(np.int32), want[1].view(np.int32))  # the bits


@pytest.fixture(scope="module")
def grown():
    return grown_index(3)


@pytest.mark.parametrize("k", [1, 3, 10, 500])
@pytest.mark.parametrize("seed", range(3))
def test_topk_equals_the_host(k, seed):
    index = grown_index(seed)
    tokens = random_queries(20, seed) + ADVERSARIAL
    assert_same(device_topk(index, tokens, k), index.topk(tokens, k))


def test_ties_break_toward_the_lower_passage():
    index = BM25Index.build(["bridge river"] * 40 + ["castle"] * 5 + ["bridge river"] * 40, BM25Params())
    tokens = [["bridge"], ["river", "bridge"], ["castle", "bridge"]]
    got = device_topk(index, tokens, 50)
    assert_same(got, index.topk(tokens, 50))
    assert (got[1][0, :80] == got[1][0, 0]).all() and list(got[0][0, :45]) == list(range(40)) + [45, 46, 47, 48, 49]


@pytest.mark.parametrize("kept", [0, 1, 7, "half"])
def test_filter(grown, kept):
    rng = np.random.default_rng(5)
    allowed = np.zeros(grown.n_docs, bool)
    allowed[rng.choice(grown.n_docs, grown.n_docs // 2 if kept == "half" else kept, replace=False)] = True
    tokens = random_queries(15, 1) + ADVERSARIAL
    for k in (1, 5, 40):
        assert_same(device_topk(grown, tokens, k, allowed), grown.topk(tokens, k, allowed))


def test_blocks_of_queries_and_batch_independence(grown):
    tokens = random_queries(30, 2) + ADVERSARIAL
    want = grown.topk(tokens, 8)
    for block_entries in (1, 50, 400):  # a query over the block size is a block of its own
        assert_same(device_topk(grown, tokens, 8, block_entries=block_entries), want)
    alone = [device_topk(grown, [t], 8) for t in tokens[:10]]
    for b, (ids, scores) in enumerate(alone):
        assert_same((ids[0], scores[0]), (want[0][b], want[1][b]))


def test_a_shards_statistics(grown):
    tokens = random_queries(10, 4) + ADVERSARIAL
    other = BM25Index.build(random_texts(90, 9), BM25Params())
    stats = grown.term_stats(tokens).plus(other.term_stats(tokens))
    assert isinstance(stats, TermStats)
    shard = grown.with_stats(stats)
    assert_same(device_topk(shard, tokens, 12), shard.topk(tokens, 12))


def test_other_parameters(grown):
    index = grown.with_params(BM25Params(k1=0.9, b=0.3))
    tokens = random_queries(10, 6)
    assert_same(device_topk(index, tokens, 10), index.topk(tokens, 10))


@pytest.mark.parametrize("seed", range(3))
def test_scores_at_candidates_equal_the_host(grown, seed):
    rng = np.random.default_rng(seed)
    tokens = random_queries(12, 10 + seed) + ADVERSARIAL
    cand = rng.integers(-1, grown.n_docs, (len(tokens), 17))
    cand[0] = -1
    resident = DeviceBM25.of(grown, DeviceStore("cpu"))
    got = as_numpy(resident.scores_at(resident.query(tokens), torch.from_numpy(cand)))
    want = grown.scores_at_batch(tokens, cand)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    empty = resident.scores_at(resident.query(tokens), torch.zeros((len(tokens), 0), dtype=torch.int64))
    assert empty.shape == (len(tokens), 0)


def test_empty_batch_and_no_hits(grown):
    for tokens in ([], [[]], [["unknown"], []]):
        ids, scores = device_topk(grown, tokens, 4)
        assert ids.shape == (len(tokens), 4) and (ids == -1).all() and np.isneginf(scores).all()
    assert device_topk(grown, [["bridge"]], 0)[0].shape == (1, 0)


def test_postings_held_once_and_host_path_when_refused(grown):
    store = DeviceStore("cpu")
    a, b = DeviceBM25.of(grown, store), DeviceBM25.of(grown.with_params(BM25Params(k1=1.0)), store)
    assert all(x is y for pa, pb in zip(a.parts, b.parts) for x, y in zip(pa, pb))
    assert [name for name, _ in store.placed] == ["bm25 postings"] * 3
    small = DeviceStore("cpu", budget=16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert DeviceBM25.of(grown, small) is None
    assert any(issubclass(w.category, DeviceMemoryWarning) and "bm25 postings" in str(w.message) for w in caught)
    assert DeviceBM25.of(grown, None) is None


@pytest.fixture(scope="module")
def demo_readers(tmp_path_factory):
    from hopgraph.engine.graphs.store import LocalStore
    from hopgraph.engine.index import IndexReader

    embedder = HashingEmbedder(64)
    path = tmp_path_factory.mktemp("device-bm25") / "index"
    Index.build(demo_corpus(), embedder=embedder, pipelines=["bm25", "dmar"], progress=False).save(path)
    files = IndexReader.open(path, embedder, device="cpu", graphs=LocalStore())
    resident = IndexReader.open(path, embedder, device="cpu", graphs=DeviceStore("cpu"))
    yield files, resident
    files.close()
    resident.close()


def test_bm25_search_moves_the_query_side_in_and_ids_and_scores_out(demo_readers):
    files, resident = demo_readers
    questions = DEMO_QUESTIONS * 2
    want = files.search(questions, 10, "bm25")
    resident.search(questions, 10, "bm25")  # the postings move on their first device use
    with counting_transfers() as count:
        got = resident.search(questions, 10, "bm25")
    assert_same(got, want)
    assert [c.name for c in count.to_device] == ["bm25 query postings"]
    assert count.dtoh == 2
    allowed = np.zeros(len(files.content.components.X), bool)
    allowed[::4] = True  # a filter passing few: the lists are completed on the host (score 0)
    with counting_transfers() as count:
        got = resident.search(questions, 10, "bm25", allowed=allowed)
    assert_same(got, files.search(questions, 10, "bm25", allowed=allowed))
    assert sorted(c.name for c in count.to_device) == ["bm25 query postings", "filter"]


def test_query_batch_on_the_device_equals_the_host(demo_readers):
    from hopgraph.engine.components.query_batch import QueryBatch

    files, resident = demo_readers
    texts = DEMO_QUESTIONS + ["", "zzz unknown words"]
    Q = np.zeros((len(texts), 4), np.float32)
    rng = np.random.default_rng(0)
    for allowed in (None, rng.random(len(files.content.components.X)) < 0.4):
        host = QueryBatch(files.content.components, Q, texts, allowed)
        dev = QueryBatch(resident.content.components, Q, texts, allowed)
        assert host.device is None and dev.device is not None
        ids_t, scores_t = dev.bm25_topk_tensors(20)
        assert ids_t.dtype == torch.int64 and scores_t.dtype == torch.float32
        with counting_transfers() as count:  # a shorter list and the host form: sliced, brought back
            ids, scores = dev.bm25_topk(7)
            dev.bm25_topk_tensors(7)
        assert count.htod == 0 and count.dtoh == 2
        assert_same((ids, scores), host.bm25_topk(7))
        assert_same((as_numpy(ids_t), as_numpy(scores_t)), host.bm25_topk(20))
        cand = np.asarray(host.bm25_topk(20)[0])
        cand[:, ::3] = rng.integers(-1, len(Q), cand[:, ::3].shape)
        got = as_numpy(dev.bm25_of_tensors(as_tensor(cand)))
        np.testing.assert_array_equal(got.view(np.int32), host.bm25_of(cand).view(np.int32))


def test_an_index_grown_by_adds_and_deletes_searches_as_on_its_files(tmp_path):
    """Segments: the base postings memory-mapped and the added passages' joined in memory (two
    parts), a deleted passage as the batch's filter; the bm25 pipeline and the batch's lists equal
    the index's own files."""
    from hopgraph.engine.components.query_batch import QueryBatch
    from hopgraph.engine.graphs.store import LocalStore
    from hopgraph.engine.index import IndexReader

    embedder = HashingEmbedder(64)
    path = tmp_path / "index"
    Index.build(demo_corpus(), embedder=embedder, pipelines=["bm25"], progress=False).save(path)
    for step in range(2):
        with Index.updating(path, embedder=embedder, progress=False) as index:
            index.add([{"id": f"new-{step}-{i}", "title": f"Extra {i}", "text": text}
                       for i, text in enumerate(random_texts(6, step) + [DEMO_QUESTIONS[step]])])
            index.delete([f"demo-{step + 3}"])
    files = IndexReader.open(path, embedder, device="cpu", graphs=LocalStore())
    resident = IndexReader.open(path, embedder, device="cpu", graphs=DeviceStore("cpu"))
    try:
        components = resident.content.components
        assert len(components.bm25().parts) >= 2 and components.deleted is not None
        questions = DEMO_QUESTIONS + ["bridge river poet"]
        assert_same(resident.search(questions, 12, "bm25"), files.search(questions, 12, "bm25"))
        allowed = ~components.deleted
        host = QueryBatch(files.content.components, np.zeros((len(questions), 4), np.float32), questions, allowed)
        dev = QueryBatch(components, np.zeros((len(questions), 4), np.float32), questions, allowed)
        assert_same(dev.bm25_topk(40), host.bm25_topk(40))
    finally:
        files.close()
        resident.close()
