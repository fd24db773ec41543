"""The graph store interface: the same graph and row matrix saved through the index's own store
(:class:`LocalStore`) and through a router's (:class:`RouterStore`, rows sent by ``hopgraph shard``'s
writer to the shards' files and served by :class:`ShardRows`) read back the same rows, the same
entries by position, the same whole graph, the same masked top-k; an update kept over the stored
rows reads as the new graph; a save means the same thing whoever calls it."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.engine.components.dense import DenseIndex
from hopgraph.engine.components.sharded import ShardMap, ShardSet
from hopgraph.engine.graphs.remote import matrix_topk, remote_base
from hopgraph.engine.graphs.router_store import RouterStore
from hopgraph.engine.graphs.shard import ShardRows
from hopgraph.engine.graphs.store import (LOCAL, NODE_ROWS, PASSAGE_ROWS, CSRReader, GraphStore, LocalStore,
                                          RowMatrixReader, saved_by_reference, whole_graph)
from hopgraph.engine.sparse import take_rows
from hopgraph.kernels.csr import CSR
from hopgraph.shards.layout import graph_dir_name
from hopgraph.shards.split import GraphRowWriter

N_SHARDS, N = 3, 53


class ShardCalls:
    """The router's calls answered by each shard's :class:`ShardRows`, in this process."""

    def __init__(self, held: list[ShardRows]) -> None:
        self.held, self.n_shards = held, len(held)

    def map(self, method, calls):
        how = {"graph_rows": "rows", "matrix_topk": "topk"}[method]
        return {s: getattr(self.held[s], how)(*args) for s, args in calls.items()}


def random_graph(rng, n: int, n_cols: int) -> CSR:
    lengths = rng.integers(0, 6, n)
    lengths[[0, n // 3, n - 1]] = 0  # empty rows: first, inside, last
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return CSR(indptr, rng.integers(0, n_cols, int(indptr[-1])).astype(np.int32),
               rng.random(int(indptr[-1])).astype(np.float32), n_cols)


@pytest.fixture
def stores(tmp_path):
    """(the graph, the matrix, its mask, a local store's directory, the router's store and directory)."""
    rng = np.random.default_rng(7)
    owner = rng.integers(0, N_SHARDS, N).astype(np.int32)
    local = np.zeros(N, np.int64)
    for s in range(N_SHARDS):
        local[owner == s] = np.arange(int((owner == s).sum()))
    shard_map = ShardMap(owner, local, N_SHARDS)
    graph, M = random_graph(rng, N, N), rng.standard_normal((N, 8)).astype(np.float32)
    M /= np.linalg.norm(M, axis=1, keepdims=True)
    mask = (rng.random((N, 1)) < 0.7).astype(np.uint8)
    whole = tmp_path / "index"
    whole.mkdir()
    for store in (LOCAL, RouterStore()):  # without a sink, a router saves a whole graph as the index does
        assert not store.save_graph(whole, "p_", graph, PASSAGE_ROWS)
    assert not LOCAL.save_graph(whole, "n_", graph, NODE_ROWS) and not LOCAL.save_matrix(whole, "emb", M)
    out = tmp_path / "sharded"
    at = out / "router-000000" / "pipelines" / "toy"
    at.mkdir(parents=True)
    writer = GraphRowWriter(out, shard_map)
    sending = RouterStore(sink=writer)
    assert sending.save_graph(at, "p_", graph, PASSAGE_ROWS) and sending.save_graph(at, "n_", graph, NODE_ROWS)
    assert sending.save_matrix(at, "emb", M, NODE_ROWS) and sending.save_matrix(at, "mask", mask, NODE_ROWS)
    writer.finish()
    held = [ShardRows(out / graph_dir_name(s)) for s in range(N_SHARDS)]
    router = RouterStore(ShardSet(ShardCalls(held), shard_map))
    return rng, graph, M, mask, whole, router, at


@pytest.mark.parametrize("prefix", ["p_", "n_"])
def test_local_and_router_stores_read_the_same_rows(stores, prefix):
    rng, graph, _, _, whole, router, at = stores
    a = LOCAL.load_graph(whole, prefix, N, "local")
    b = router.load_graph(at, prefix, N, "router")
    assert saved_by_reference(at, prefix) and not saved_by_reference(whole, prefix)
    assert not (at / f"{prefix}indices.npy").exists() and remote_base(b) is not None
    for g in (a, b):
        assert isinstance(g, CSRReader) and (g.n_rows, g.n_cols, g.nnz) == (N, N, graph.nnz)
    np.testing.assert_array_equal(a.indptr, b.indptr)
    rows = np.array([N - 1, 0, 5, 5, N // 3, 17])
    for x, y, z in zip(take_rows(a, rows)[:3], b.rows_csr(rows), take_rows(graph, rows)[:3]):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(y, z)
    pos = rng.integers(0, graph.nnz, (4, 9))
    np.testing.assert_array_equal(a.indices[pos], b.indices[pos])
    np.testing.assert_array_equal(a.data[pos], b.data[pos])
    for x, y in zip(whole_graph(a), whole_graph(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert whole_graph(a) is a  # a graph in this process's arrays is read as it is


def test_local_and_router_stores_read_the_same_matrix_rows_and_top_k(stores):
    rng, _, M, mask, whole, router, at = stores
    a, b = LOCAL.load_matrix(whole, "emb"), router.load_matrix(at, "emb")
    for m in (a, b):
        assert isinstance(m, RowMatrixReader) and m.shape == M.shape and m.dtype == M.dtype
    rows = rng.integers(0, N, (3, 5))
    np.testing.assert_array_equal(a[rows], b[rows])
    np.testing.assert_array_equal(b[rows], M[rows])
    Q = rng.standard_normal((4, 8)).astype(np.float32)
    exclude = np.array([1, 2, 30])
    allowed = mask[:, 0] != 0
    allowed[exclude] = False
    want = DenseIndex(M, mode="exact").topk(Q, 6, allowed)
    got = matrix_topk(b, router.load_matrix(at, "mask"), Q, 6, exclude)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6)


def test_an_update_kept_over_the_stored_rows_reads_as_the_new_graph(stores, tmp_path):
    rng, graph, _, _, whole, router, at = stores
    new = random_graph(rng, N + 4, N + 4)  # every row may differ; 4 rows appended
    changed = lambda: np.arange(N, dtype=np.int64)  # noqa: E731  (the rows that may differ)
    assert LOCAL.keep_rows(LOCAL.load_graph(whole, "p_", N, "local"), new, changed) is new
    kept = router.keep_rows(router.load_graph(at, "p_", N, "router"), new, changed)
    assert remote_base(kept) is not None
    for x, y in zip(whole_graph(kept), new):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    later = tmp_path / "later"
    later.mkdir()
    assert router.by_reference(kept) and router.save_graph(later, "p_", kept)  # the stored rows by reference
    back = router.load_graph(later, "p_", N + 4, "later")
    for x, y in zip(whole_graph(back), new):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_every_store_is_a_graph_store_and_a_local_save_never_depends_on_its_caller(tmp_path, stores):
    _, graph, M, _, _, router, _ = stores
    assert all(isinstance(s, GraphStore) for s in (LOCAL, LocalStore(), router, RouterStore()))
    assert not LOCAL.by_reference(graph) and not router.by_reference(graph)  # a whole graph stays whole
    for i in range(2):
        d = tmp_path / f"save-{i}"
        d.mkdir()
        LOCAL.save_graph(d, "", graph)
        assert sorted(p.name for p in d.iterdir()) == ["data.npy", "indices.npy", "indptr.npy"]
    unweighted = tmp_path / "unweighted"
    unweighted.mkdir()
    LOCAL.save_graph(unweighted, "kg_", graph, weighted=False, entries="nodes")
    assert sorted(p.name for p in unweighted.iterdir()) == ["kg_indptr.npy", "kg_nodes.npy"]
    back = LOCAL.load_graph(unweighted, "kg_", N, "kg", weighted=False, entries="nodes")
    np.testing.assert_array_equal(np.asarray(back.data), np.ones(graph.nnz, np.float32))
