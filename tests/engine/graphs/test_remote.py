"""Graphs and row-per-node arrays whose rows the shards hold (a router's graph store): every read
through the router's proxy equals the stored graph's, whole reads are refused, the rows changed
since survive a save / load, and an index's own store refuses what it cannot read."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.engine.components.sharded import ShardMap, ShardSet
from hopgraph.engine.errors import IndexFormatError, InputError
from hopgraph.engine.graphs.remote import ShardedCSR, ShardedMatrix, owners_of, remote_base
from hopgraph.engine.graphs.router_store import RouterStore
from hopgraph.engine.graphs.store import LOCAL
from hopgraph.engine.graphs.views import OverlayCSR
from hopgraph.engine.sparse import take_rows
from hopgraph.kernels.csr import CSR


class FakeShards:
    """Shard calls served from in-memory parts (what ``hopgraph shard`` writes to ``graph-SSS``)."""

    def __init__(self, n_shards: int) -> None:
        self.n_shards = n_shards
        self.parts: list[dict[str, object]] = [{} for _ in range(n_shards)]
        self.calls = 0

    def map(self, method, calls):
        assert method == "graph_rows"
        self.calls += len(calls)
        out = {}
        for s, (name, rows) in calls.items():
            item = self.parts[s][name]
            if isinstance(item, np.ndarray):
                out[s] = item[np.asarray(rows)]
            else:
                graph, weighted = item
                sub = take_rows(graph, np.asarray(rows))
                out[s] = (np.diff(sub.indptr), sub.indices, sub.data if weighted else None)
        return out


class Sink:
    def __init__(self, shards: ShardSet, fake: FakeShards) -> None:
        self.shards, self.fake = shards, fake

    def send(self, directory, key, item, owners):
        rule = owners_of(owners, self.shards)
        name = f"{directory.name}/{key}"
        for s in range(self.fake.n_shards):
            if isinstance(item, np.ndarray):
                self.fake.parts[s][name] = item[rule.rows_of(s, len(item))]
            else:
                weighted = item[2] is not None
                data = np.asarray(item[2]) if weighted else np.zeros(len(item[1]), np.int8)
                whole = CSR(np.asarray(item[0]), np.asarray(item[1]), data, int(item[3]))
                self.fake.parts[s][name] = (take_rows(whole, rule.rows_of(s, whole.n_rows)), weighted)
        return name


def random_graph(rng, n: int, n_cols: int) -> CSR:
    lengths = rng.integers(0, 5, n)
    lengths[[0, n // 2]] = 0  # empty rows, first and inside
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return CSR(indptr, rng.integers(0, n_cols, int(indptr[-1])).astype(np.int32),
               rng.random(int(indptr[-1])).astype(np.float32), n_cols)


@pytest.fixture
def setup():
    rng = np.random.default_rng(0)
    n = 41
    owner = rng.integers(0, 3, n).astype(np.int32)
    local = np.zeros(n, np.int64)
    for s in range(3):
        local[owner == s] = np.arange(int((owner == s).sum()))
    fake = FakeShards(3)
    return rng, ShardSet(fake, ShardMap(owner, local, 3)), fake


@pytest.mark.parametrize("owners", ["passage", "modulo"])
def test_sharded_graph_reads_equal_the_stored_graph(setup, tmp_path, owners):
    rng, shards, fake = setup
    graph = random_graph(rng, 41, 41)
    assert RouterStore(shards, Sink(shards, fake)).save_graph(tmp_path, "g_", graph, owners)
    assert not (tmp_path / "g_indices.npy").exists()  # the entries are in the shards only
    with pytest.raises(IndexFormatError, match="held by the shards"):
        LOCAL.load_graph(tmp_path, "g_", 41, "g")
    remote = RouterStore(shards).load_graph(tmp_path, "g_", 41, "g")
    assert isinstance(remote, ShardedCSR) and remote_base(remote) is remote
    np.testing.assert_array_equal(remote.indptr, graph.indptr)
    pos = rng.integers(0, graph.nnz, (3, 7))
    np.testing.assert_array_equal(remote.indices[pos], graph.indices[pos])
    np.testing.assert_array_equal(remote.data[pos], graph.data[pos])
    np.testing.assert_array_equal(remote.indices[5:17], graph.indices[5:17])
    assert remote.data[-1] == graph.data[-1] and len(remote.indices[3:3]) == 0
    rows = np.array([40, 0, 3, 3, 20])
    for a, b in zip(remote.rows_csr(rows), take_rows(graph, rows)[:3]):
        np.testing.assert_array_equal(a, b)
    calls = fake.calls
    remote.indices[pos]  # rows read before come from the router's cache
    assert fake.calls == calls
    with pytest.raises(InputError, match="never"):
        np.asarray(remote.indices)
    with pytest.raises(InputError):
        remote.arrays()
    with pytest.raises(IndexError):
        remote.indices[np.array([graph.nnz])]


def test_rows_changed_since_survive_a_save_and_load(setup, tmp_path):
    rng, shards, fake = setup
    graph = random_graph(rng, 41, 41)
    RouterStore(shards, Sink(shards, fake)).save_graph(tmp_path, "", graph)
    store = RouterStore(shards)
    remote = store.load_graph(tmp_path, "", 41, "g")
    # row 5 rewritten, rows 41, 42 appended (the graph grows to 43 columns)
    over = OverlayCSR.over(remote, 43).updated(np.array([5, 41, 42]), np.array([0, 2, 2, 3]),
                                               np.array([42, 1, 7], np.int32), np.array([.5, .25, 1.], np.float32), 43)
    later = tmp_path / "later"
    later.mkdir()
    assert store.save_graph(later, "", over)
    assert not (later / "indices.npy").exists()
    back = store.load_graph(later, "", 43, "g")
    assert isinstance(back, OverlayCSR) and remote_base(back) is not None
    np.testing.assert_array_equal(back.indptr, over.indptr)
    everything = np.arange(back.nnz)
    np.testing.assert_array_equal(back.indices[everything], over.indices[everything])
    np.testing.assert_array_equal(back.data[everything], over.data[everything])


def test_sharded_matrix_rows(setup, tmp_path):
    rng, shards, fake = setup
    M = rng.random((29, 6)).astype(np.float32)
    assert RouterStore(shards, Sink(shards, fake)).save_matrix(tmp_path, "emb", M)
    assert not (tmp_path / "emb.npy").exists()
    with pytest.raises(IndexFormatError, match="held by the shards"):
        LOCAL.load_matrix(tmp_path, "emb")
    remote = RouterStore(shards).load_matrix(tmp_path, "emb")
    assert isinstance(remote, ShardedMatrix) and remote.shape == M.shape and len(remote) == 29
    rows = np.array([[28, 0], [3, 3]])
    np.testing.assert_array_equal(remote[rows], M[rows])
    np.testing.assert_array_equal(remote[4], M[4])
    np.testing.assert_array_equal(remote[-1], M[-1])
    np.testing.assert_array_equal(remote[2:9:3], M[2:9:3])
    assert remote[np.zeros(0, np.int64)].shape == (0, 6)
    with pytest.raises(InputError):
        np.asarray(remote)
    with pytest.raises(IndexError):
        remote[np.array([29])]
    plain = tmp_path / "plain"
    plain.mkdir()
    assert not RouterStore(shards).save_matrix(plain, "emb", M)  # no sink: a whole matrix saved whole
    np.testing.assert_array_equal(LOCAL.load_matrix(plain, "emb"), M)


def test_forget_rows_drops_what_the_router_kept(setup, tmp_path):
    rng, shards, fake = setup
    graph = random_graph(rng, 41, 41)
    sending = RouterStore(shards, Sink(shards, fake))
    sending.save_graph(tmp_path, "", graph)
    sending.save_matrix(tmp_path, "emb", rng.random((41, 3)).astype(np.float32))
    store = RouterStore(shards)
    remote, emb = store.load_graph(tmp_path, "", 41, "g"), store.load_matrix(tmp_path, "emb")
    rows = np.array([1, 2, 3, 39])
    remote.rows_csr(rows), emb[rows]
    calls = fake.calls
    remote.rows_csr(rows), emb[rows]
    assert fake.calls == calls
    shards.forget_rows()
    remote.rows_csr(rows), emb[rows]
    assert fake.calls > calls


def test_an_unweighted_graph_stores_no_weights_in_the_shards(setup, tmp_path):
    rng, shards, fake = setup
    graph = random_graph(rng, 41, 41)
    ones = CSR(graph.indptr, graph.indices, np.ones(graph.nnz, np.float32), 41)
    RouterStore(shards, Sink(shards, fake)).save_graph(tmp_path, "", ones, weighted=False)
    assert not any(weighted for part in fake.parts for _, weighted in part.values())
    remote = RouterStore(shards).load_graph(tmp_path, "", 41, "g")
    pos = np.arange(graph.nnz)
    np.testing.assert_array_equal(remote.indices[pos], graph.indices)
    np.testing.assert_array_equal(remote.data[pos], np.ones(graph.nnz, np.float32))
    assert remote.data[pos].dtype == np.float32
