"""IVF-candidate gain-kNN graph with exact rescoring (SPEC §1 step 5)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph.engine.components.ivf import IVFIndex
from hopgraph.engine.pipelines.g3rag.ann_graph import ann_gain_knn, graph_cells, graph_recall
from hopgraph.engine.errors import InputError
from hopgraph.kernels.csr import csr_from_topk
from hopgraph.kernels import call


def dense_reference(X: np.ndarray, k: int, sim_min: float, sim_max: float, pen: np.ndarray):
    """Independent dense SPEC §1 steps 3–5: per row the k largest gain·pen in the band, j ≠ i."""
    S = X.astype(np.float64) @ X.T.astype(np.float64)
    x = np.clip(S, 0, 1)
    W = x * np.sqrt(1 - x * x) * pen[None, :]
    W[(S < sim_min) | (S > sim_max)] = -np.inf
    np.fill_diagonal(W, -np.inf)
    rows = []
    for i in range(len(X)):
        order = np.lexsort((np.arange(len(X)), -W[i]))[:k]
        rows.append([(j, W[i, j]) for j in order if np.isfinite(W[i, j])])
    return rows


def _rows(g):
    indptr, indices, data = g.indptr, g.indices, g.data
    return [list(zip(indices[indptr[i]:indptr[i + 1]].tolist(), data[indptr[i]:indptr[i + 1]].tolist()))
            for i in range(len(indptr) - 1)]


def test_probing_every_cell_gives_the_exact_graph():
    X = clustered_embeddings(400, 24, 6, seed=3)
    pen = np.random.default_rng(0).uniform(0.3, 1.0, len(X)).astype(np.float32)
    g = ann_gain_knn(X, k=7, sim_min=0.3, sim_max=0.9, target_penalty=pen, nlist=5, nprobe=5)
    assert g[0].dtype == np.int64 and g[1].dtype == np.int32 and g[2].dtype == np.float32
    ref = dense_reference(X, 7, 0.3, 0.9, pen)
    for got, want in zip(_rows(g), ref):
        assert [j for j, _ in got] == [j for j, _ in want]
        np.testing.assert_allclose([w for _, w in got], [w for _, w in want], rtol=1e-5, atol=1e-6)
    kernel = call("gain_knn", X, 7, 0.3, 0.9, pen, device="cpu")      # the exact blocked kernel
    np.testing.assert_array_equal(g.indptr, kernel.indptr)
    np.testing.assert_array_equal(g.indices, kernel.indices)
    np.testing.assert_allclose(g.data, kernel.data, rtol=1e-6)


def test_recall_against_exact_graph_on_clustered_data():
    X = clustered_embeddings(2000, 32, 10, seed=1)
    pen = np.random.default_rng(1).uniform(0.3, 1.0, len(X)).astype(np.float32)
    approx = ann_gain_knn(X, k=16, target_penalty=pen, nlist=8, nprobe=3)
    exact = ann_gain_knn(X, k=16, target_penalty=pen, nlist=8, nprobe=8)
    recall = graph_recall(approx, exact)
    assert recall >= 0.9, recall
    assert graph_recall(exact, exact) == 1.0


def test_result_does_not_depend_on_task_grouping_and_is_deterministic():
    X = clustered_embeddings(1500, 16, 8, seed=2)
    a = ann_gain_knn(X, k=8, nlist=12, nprobe=3, rows_per_task=50)
    b = ann_gain_knn(X, k=8, nlist=12, nprobe=3, rows_per_task=10**6)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_cells_partition_rows_and_probe_their_own_cell_first():
    X = clustered_embeddings(1000, 16, 5, seed=4)
    ivf = IVFIndex.build(X)
    cells = graph_cells(ivf, nlist=8, nprobe=3)
    assert sorted(cells.members.tolist()) == list(range(1000))
    assert cells.indptr[-1] == 1000 and cells.probes.shape == (8, 3)
    assert (cells.probes[:, 0] == np.arange(8)).all()
    # a graph cell is a union of whole IVF cells (X is partitioned once)
    offsets, rows = ivf.cell_rows()
    group = np.repeat(np.arange(cells.nlist), np.diff(cells.indptr))[np.argsort(cells.members)]
    for c in range(ivf.nlist):
        assert len(set(group[rows[offsets[c]:offsets[c + 1]]].tolist())) <= 1
    # asking for more cells than the IVF has keeps the IVF's cells
    same = graph_cells(ivf, nlist=10 * ivf.nlist, nprobe=3)
    assert same.nlist == ivf.nlist
    for c in range(ivf.nlist):
        np.testing.assert_array_equal(same.rows(c), np.sort(rows[offsets[c]:offsets[c + 1]]))


def test_the_graph_uses_the_ivf_it_is_given():
    X = clustered_embeddings(1200, 16, 6, seed=6)
    ivf = IVFIndex.build(X)
    given = ann_gain_knn(X, k=8, nlist=6, nprobe=2, ivf=ivf)
    own = ann_gain_knn(X, k=8, nlist=6, nprobe=2)  # trains the same IVF (same seed)
    for a, b in zip(given, own):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(InputError, match="IVF index holds 1200 rows, X 600"):
        ann_gain_knn(X[:600], k=8, ivf=ivf)


@pytest.mark.parametrize("n", [1, 3])
def test_tiny_inputs_and_k_above_n(n):
    X = clustered_embeddings(n, 8, 1, seed=5)
    indptr, indices, data, _ = ann_gain_knn(X, k=10, sim_min=-1.0, sim_max=1.0)
    assert len(indptr) == n + 1
    assert indptr[-1] <= n * (n - 1)
    assert all(i not in indices[indptr[i]:indptr[i + 1]] for i in range(n))


def test_identical_vectors_have_no_in_band_edges():
    X = np.tile(np.array([[0.6, 0.8]], np.float32), (50, 1))
    indptr, indices, data, _ = ann_gain_knn(X, k=4)
    assert indptr[-1] == 0 and len(indices) == 0


def test_bad_inputs_are_named():
    X = clustered_embeddings(20, 8, 2)
    with pytest.raises(InputError, match="float32"):
        ann_gain_knn(X.astype(np.float64))
    with pytest.raises(InputError, match="target_penalty must have shape"):
        ann_gain_knn(X, target_penalty=np.ones(3))
    with pytest.raises(InputError, match="k must be"):
        ann_gain_knn(X, k=0)


def test_graph_recall():
    nbr = np.array([[1, 2, -1], [0, -1, -1], [-1, -1, -1]])
    w = np.array([[0.5, 0.4, -np.inf], [0.3, -np.inf, -np.inf], [-np.inf] * 3], np.float32)
    g = csr_from_topk(w, nbr, 3)
    assert g.indptr.tolist() == [0, 2, 3, 3] and g.indices.tolist() == [1, 2, 0]
    half = csr_from_topk(w, np.array([[1, -1, -1], [2, -1, -1], [-1] * 3]), 3)
    assert graph_recall(half, g) == pytest.approx(1 / 3)


def test_g3rag_graph_and_dense_search_share_the_components_ivf():
    """X is clustered once per index: G3RAG's ANN graph groups the dense component's IVF cells,
    and the dense search then uses the same IVF index (no second training)."""
    from hopgraph import G3RAG
    from hopgraph.engine.components.shared import Components

    X = clustered_embeddings(1500, 16, 6, seed=11)
    comps = Components(X, dense="ann")
    pipe = G3RAG(mode="ann", n_neighbors=6, settings={"device": "cpu"}).fit(X, components=comps)
    assert len(comps.dense.ivf_builds) == 1
    comps.dense.topk(X[:3], 5)
    assert len(comps.dense.ivf_builds) == 1
    ref = ann_gain_knn(X, 6, 0.3, 0.9, pipe.penalty_, ivf=comps.dense.ivf)
    for a, b in zip(pipe.graph_, ref):
        np.testing.assert_array_equal(a, b)
