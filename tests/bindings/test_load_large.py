"""A loaded large index is searched without copying X into memory."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph.engine.components import exact_search as dense_mod
from hopgraph.engine.components.exact_search import BlockedInnerProductIndex, exact_inner_product_index, faiss_topk
from hopgraph.index import Index


@pytest.fixture
def memmapped(tmp_path):
    X = clustered_embeddings(3000, 24, 12, seed=9)
    np.save(tmp_path / "X.npy", X)
    return X, np.load(tmp_path / "X.npy", mmap_mode="r")


@pytest.mark.parametrize("k", [1, 7, 3005])
def test_blocked_scan_equals_faiss_exact_search(memmapped, k):
    X, M = memmapped
    Q = clustered_embeddings(9, 24, 3, seed=10)
    got_ids, got = faiss_topk(BlockedInnerProductIndex(M, block_rows=257), Q, k)
    want_ids, want = faiss_topk(exact_inner_product_index(X), Q, k)
    np.testing.assert_allclose(got, want, atol=1e-5)
    if k <= 7:
        np.testing.assert_array_equal(got_ids, want_ids)
    else:  # a full ranking: near-equal scores may swap, the sets agree
        np.testing.assert_array_equal(np.sort(got_ids, axis=1), np.sort(want_ids, axis=1))
    if k > len(X):
        assert (got_ids[:, len(X):] == -1).all() and np.isneginf(got[:, len(X):]).all()


def test_blocked_scan_needs_a_float32_memmap(memmapped):
    X, _ = memmapped
    with pytest.raises(TypeError, match="memmap"):
        BlockedInnerProductIndex(X)


def test_loaded_large_index_scans_the_file_and_gives_the_same_results(tmp_path, demo_corpus, monkeypatch):
    X = clustered_embeddings(len(demo_corpus), 16, 4, seed=11)
    built = Index.build(demo_corpus, embeddings=X, pipelines=["dense", "g3rag"], progress=False)
    built.save(tmp_path / "idx")
    Q = clustered_embeddings(5, 16, 2, seed=12)
    want = {p: built.search_arrays(Q, pipeline=p, k=4) for p in ("dense", "g3rag")}
    monkeypatch.setattr(dense_mod, "SCAN_MIN_N", 10)          # the demo corpus counts as "large"
    loaded = Index.load(tmp_path / "idx")
    assert isinstance(loaded.X, np.memmap)
    for p in ("dense", "g3rag"):
        assert isinstance(loaded.pipeline(p).components.dense.index,
                          BlockedInnerProductIndex)
        ids, scores = loaded.search_arrays(Q, pipeline=p, k=4)
        np.testing.assert_array_equal(ids, want[p][0])
        np.testing.assert_allclose(scores, want[p][1], atol=1e-5)


def test_gather_rows_reads_a_large_memmap_from_the_file(memmapped, monkeypatch):
    from hopgraph.engine.components.exact_search import gather_rows

    X, M = memmapped
    rows = np.array([[5, 0, 2999], [17, 17, 3]])
    monkeypatch.setattr(dense_mod, "SCAN_MIN_N", 10)
    np.testing.assert_array_equal(gather_rows(M, rows), X[rows])
    monkeypatch.setattr(dense_mod, "SCAN_MIN_N", 10**9)     # small: plain fancy indexing
    np.testing.assert_array_equal(gather_rows(M, rows), X[rows])
