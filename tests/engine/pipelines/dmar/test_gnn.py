"""Siamese GraphSAGE subgraph encoder (SPEC §3): batching, triplet loss, pre-training, storage."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hopgraph.engine.pipelines.dmar import gnn
from hopgraph.engine.sparse import csr_from_scipy


def toy_graph(E: int = 12, seed: int = 0):
    g = np.random.default_rng(seed)
    a = g.integers(0, E, 30)
    b = g.integers(0, E, 30)
    keep = a != b
    w = np.ones(int(keep.sum()), np.float32)
    adj = sp.coo_matrix((np.r_[w, w], (np.r_[a[keep], b[keep]], np.r_[b[keep], a[keep]])), shape=(E, E)).tocsr()
    adj.sort_indices()
    rows = np.r_[np.arange(E), np.repeat(np.arange(E), np.diff(adj.indptr))]
    ego = sp.csr_matrix((np.ones(len(rows)), (rows, np.r_[np.arange(E), adj.indices])), shape=(E, E))
    feats = g.standard_normal((E, 8)).astype(np.float32)
    return csr_from_scipy(adj), csr_from_scipy(ego), feats


def test_ego_batch_is_the_induced_subgraph():
    adj, ego, feats = toy_graph()
    centres = np.array([3, 0, 3, 7])
    batch = gnn.ego_batch(ego, adj, feats, centres)
    assert batch.n_graphs == 4
    A = adj.to_dense() > 0
    for k, c in enumerate(centres):
        nodes = ego.indices[ego.indptr[c]:ego.indptr[c + 1]]
        local = np.flatnonzero(batch.graph.numpy() == k)
        np.testing.assert_array_equal(batch.x[local].numpy(), feats[nodes])
        mask = np.isin(batch.src.numpy(), local)
        got = {(nodes[s - local[0]], nodes[d - local[0]]) for s, d in zip(batch.src.numpy()[mask],
                                                                            batch.dst.numpy()[mask])}
        expect = {(u, v) for u in nodes for v in nodes if A[u, v]}
        assert got == expect


def test_encoder_batches_like_single_subgraphs_and_is_unit():
    adj, ego, feats = toy_graph()
    torch.manual_seed(0)
    enc = gnn.SubgraphEncoder(8, hidden=16, d_out=8)
    all_ = gnn.encode_all(enc, ego, adj, feats, chunk=5)
    np.testing.assert_allclose(np.linalg.norm(all_, axis=1), 1.0, atol=1e-5)
    with torch.no_grad():
        single = enc(gnn.ego_batch(ego, adj, feats, np.array([4]))).numpy()
    np.testing.assert_allclose(all_[4], single[0], atol=1e-5)


def test_triplet_loss_formula():
    a = torch.tensor([[1.0, 0.0]])
    p = torch.tensor([[0.0, 1.0]])  # D(a,p) = 1
    n = torch.tensor([[1.0, 0.0]])  # D(a,n) = 0
    assert gnn.triplet_loss(a, p, n, 0.3).item() == pytest.approx(1.3)
    assert gnn.triplet_loss(a, n, p, 0.3).item() == pytest.approx(0.0)


def test_pretrain_is_seeded_and_learns():
    adj, ego, feats = toy_graph(E=40, seed=1)
    feats = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        enc = gnn.SubgraphEncoder(8, hidden=16, d_out=8)
        losses = gnn.pretrain(enc, ego, adj, feats, steps=40, batch_size=16, seed=3)
        runs.append((losses, gnn.encode_all(enc, ego, adj, feats)))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    losses = runs[0][0]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])


def test_weights_round_trip_and_entity_features():
    adj, ego, feats = toy_graph()
    enc = gnn.SubgraphEncoder(8, hidden=16, d_out=4)
    back = gnn.encoder_from_arrays(gnn.encoder_arrays(enc))
    np.testing.assert_allclose(gnn.encode_all(enc, ego, adj, feats), gnn.encode_all(back, ego, adj, feats))
    P = csr_from_scipy(sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0]], np.float32)))
    X = np.array([[1, 0], [0, 1]], np.float32)
    F = gnn.entity_features(P, X)
    np.testing.assert_allclose(F, [[0.70710677, 0.70710677], [0, 1], [0, 0]], atol=1e-6)
