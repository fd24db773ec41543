"""G3RAG incremental add (SPEC §1 index steps 1-5): with the penalty vector held
fixed, extending a graph equals building it (``extend_gain_graph`` against ``gain_knn``), the
new passages' density / penalty, the pipeline's ``add`` and ``Index.add`` then ``compact``.

Exact equality of the CSR data needs the similarity of a pair to be the same float in the
build's tiles and in the update's row blocks. The adversarial cases use dyadic embeddings
(every product and sum exact in float32), so they hold under any BLAS; the random-float cases
rely on the GEMM returning the same dot product whatever the tile shape, which MKL's sgemm
does for tiles of at least 16 rows at these widths (hence ``start`` = 1 or >= 32 there: a
build of 2-15 rows is itself a small-tile product).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph import G3RAG, Index
from hopgraph.engine.errors import InputError
from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
from hopgraph.kernels.csr import CSR
from hopgraph.engine.pipelines.g3rag.graph_update import added_density, added_penalty, extend_gain_graph
from hopgraph.kernels import call
from hopgraph.kernels.density import sample_columns


def gain_knn(X, k, band, pen) -> CSR:
    return call("gain_knn", X, k=k, sim_min=band[0], sim_max=band[1], penalty=pen, device="cpu")


def assert_same_graph(got: CSR, want: CSR) -> None:
    assert got.indptr.dtype == np.int64 and got.indices.dtype == np.int32 and got.data.dtype == np.float32
    assert got.n_cols == want.n_cols
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


def check_extension(X, pen, k, band, start, block_entries=1 << 24) -> CSR:
    """extend(gain_knn(X[:start])) == gain_knn(X); ``k=None``: mode "exact" (k = N − 1, k_old = start − 1)."""
    n = len(X)
    k_full = max(n - 1, 1) if k is None else k
    k_old = max(start - 1, 1) if k is None else k
    want = gain_knn(X, k_full, band, pen)
    old = gain_knn(X[:start], k_old, band, pen[:start])
    got = extend_gain_graph(old, X, start, pen, k_full, *band, block_entries=block_entries)
    assert_same_graph(got, want)
    return got


# ---------------------------------------------------------------------- extension == build
@pytest.mark.parametrize("d,k,band", [(24, 8, (0.3, 0.9)), (64, 16, (0.2, 0.95)), (24, None, (0.0, 1.0))])
@pytest.mark.parametrize("frac", [0.0, 0.5, 0.8, 0.99, 1.0])
@pytest.mark.parametrize("block_entries", [1 << 24, 2000])
def test_extension_equals_build_on_random_data(d, k, band, frac, block_entries):
    n = 240
    X = clustered_embeddings(n, d, 6, seed=d)
    pen = np.random.default_rng(d).uniform(0.2, 1.0, n).astype(np.float32)
    start = {0.0: 1, 0.99: n - 1, 1.0: n}.get(frac, int(frac * n))
    got = check_extension(X, pen, k, band, start, block_entries)
    assert got.nnz > 0


def dyadic_data(seed: int = 0) -> np.ndarray:
    """Rows with entries in {−1, −3/4, …, 1}/2 (d = 8): every similarity exact in float32. Holds
    duplicate rows (equal weights: ties), a zero row and a negated row (no eligible neighbour),
    and pairs with s = 0 and s = 1 exactly (zero gain)."""
    g = np.random.default_rng(seed)
    base = g.integers(-3, 4, (30, 8)).astype(np.float32) / 8.0
    base[3] = 0.0                                    # no neighbour in any band
    base[7] = -base[8]                               # similarity −|x|² with its twin
    e = np.eye(8, dtype=np.float32)
    special = np.stack([e[0], e[0], e[1], e[0] + 0 * e[1], 0.5 * e[0] + 0.5 * e[1]])  # s = 1, s = 0, ties
    X = np.concatenate([base, base[[0, 0, 1, 2, 2, 2, 5]], special, base[[9, 10]]])
    return X[g.permutation(len(X))]


def dense_weights(X: np.ndarray, pen: np.ndarray, band) -> np.ndarray:
    """The weight matrix of SPEC §1 steps 3-5 in float64 (0 where not eligible)."""
    S = X.astype(np.float64) @ X.T.astype(np.float64)
    x = np.clip(S, 0, 1)
    W = np.where((S >= band[0]) & (S <= band[1]), x * np.sqrt(1 - x * x), 0.0) * pen[None, :]
    np.fill_diagonal(W, 0.0)
    return W


@pytest.mark.parametrize("k,band", [(3, (0.3, 0.9)), (5, (0.0, 1.0)), (100, (0.1, 1.0)), (None, (0.0, 1.0))])
def test_extension_equals_build_on_adversarial_data(k, band):
    X = dyadic_data()
    n = len(X)
    pen = np.random.default_rng(1).choice(np.array([0.0, 0.25, 0.5, 1.0], np.float32), n)
    W = dense_weights(X, pen, band)
    S = X @ X.T
    np.fill_diagonal(S, np.nan)
    # the data really is adversarial: no-neighbour rows, zero-weight eligible edges, ties
    assert (W.max(1) == 0).any()
    assert ((S >= band[0]) & (S <= band[1]) & (W == 0)).any()
    if k is not None and k < n:
        kth = -np.sort(-W, axis=1)
        assert ((kth[:, k - 1] == kth[:, k]) & (kth[:, k] > 0)).any()  # a tie at the k-th place
    for start in (1, 2, 3, n // 3, n - 2, n - 1, n):
        check_extension(X, pen, k, band, start)
        check_extension(X, pen, k, band, start, block_entries=1)


def test_extension_keeps_unchanged_rows_and_adds_reverse_edges():
    X = clustered_embeddings(200, 24, 5, seed=3)
    pen = np.ones(200, np.float32)
    old = gain_knn(X[:150], 6, (0.3, 0.9), pen[:150])
    new = extend_gain_graph(old, X, 150, pen, 6, 0.3, 0.9)
    changed = [i for i in range(150) if not np.array_equal(new.indices[new.indptr[i]:new.indptr[i + 1]],
                                                            old.indices[old.indptr[i]:old.indptr[i + 1]])]
    assert changed  # some existing rows take edges into the new passages
    for i in changed:
        assert (new.indices[new.indptr[i]:new.indptr[i + 1]] >= 150).any()
    assert len(changed) < 150  # and the others are kept as they were


def test_extension_refuses_bad_input():
    X = clustered_embeddings(40, 8, 2, seed=4)
    pen = np.ones(40, np.float32)
    old = gain_knn(X[:30], 4, (0.3, 0.9), pen[:30])
    with pytest.raises(InputError, match="start = 31 rows"):
        extend_gain_graph(old, X, 31, pen, 4, 0.3, 0.9)
    with pytest.raises(InputError, match="start must be an integer"):
        extend_gain_graph(old, X, 41, pen, 4, 0.3, 0.9)
    with pytest.raises(InputError, match="more than k = 2"):
        extend_gain_graph(old, X, 30, pen, 2, 0.3, 0.9)
    with pytest.raises(InputError, match="penalty must have shape"):
        extend_gain_graph(old, X, 30, pen[:30], 4, 0.3, 0.9)


# ---------------------------------------------------------------------- density and penalty
def test_added_density_exact_and_sampled():
    X = clustered_embeddings(300, 16, 4, seed=5)
    np.testing.assert_allclose(added_density(X, 200), call("density", X, device="cpu")[200:], rtol=1e-5)
    np.testing.assert_allclose(added_density(X, 200, block_entries=1), call("density", X, device="cpu")[200:],
                               rtol=1e-5)
    cols = sample_columns(150, 64, 0)  # the sample a 150-passage build drew
    want = np.maximum(X[200:] @ X[cols].T, 0).mean(1)
    np.testing.assert_allclose(added_density(X, 200, "sampled", n_build=150, n_samples=64), want, rtol=1e-5)
    with pytest.raises(InputError, match="needs n_build"):
        added_density(X, 200, "sampled")
    with pytest.raises(InputError, match="exceeds start"):
        added_density(X, 200, "sampled", n_build=250)


def test_added_penalty_uses_the_build_normalisation():
    dens = np.array([0.1, 0.25, 0.4, 0.3], np.float32)
    built = hub_penalty(dens, 1.5)
    low, high = float(dens.min()), float(dens.max())  # as the build records them (float32 values)
    got = added_penalty(np.array([0.25, 0.4, 0.1, 0.05, 0.9], np.float32), low, high, 1.5)
    np.testing.assert_array_equal(got[:3], built[[1, 2, 0]])  # same density, same penalty
    assert got[3] == np.float32(1.0) and got[4] == built[2]  # clipped to the build's range
    with pytest.raises(InputError, match="low <= high"):
        added_penalty(dens, 0.5, 0.1)


# ---------------------------------------------------------------------- the pipeline
def grown(pipe: G3RAG, X: np.ndarray, start: int) -> G3RAG:
    pipe.components.extend(X, None, start)
    pipe.add(start)
    return pipe


@pytest.mark.parametrize("mode", ["knn", "exact"])
@pytest.mark.parametrize("density", ["exact", "sampled"])
def test_pipeline_add_equals_a_build_with_the_kept_penalties(mode, density):
    X = clustered_embeddings(260, 24, 6, seed=6)
    start = 208
    before = G3RAG(mode=mode, density=density, density_samples=50, settings={"device": "cpu"}).fit(X[:start])
    old_pen = before.penalty_.copy()
    pipe = grown(before, X, start)
    assert len(pipe.penalty_) == 260 and pipe.graph_.n_rows == 260
    np.testing.assert_array_equal(pipe.penalty_[:start], old_pen)  # existing rows keep theirs
    mode_dens = "exact" if density == "exact" else "sampled"
    want_dens = added_density(X, start, mode_dens, n_build=start, n_samples=50)
    np.testing.assert_array_equal(pipe.penalty_[start:], added_penalty(want_dens, pipe.density_build_.low,
                                                                      pipe.density_build_.high))
    k, band = (259, (0.0, 1.0)) if mode == "exact" else (32, (0.3, 0.9))
    assert_same_graph(pipe.graph_, gain_knn(X, k, band, pipe.penalty_))
    # a second add builds on the first (same build range, penalties kept)
    Y = np.concatenate([X, clustered_embeddings(20, 24, 6, seed=7)])
    pipe = grown(pipe, Y, 260)
    assert pipe.density_build_.n == start
    k = 279 if mode == "exact" else 32
    assert_same_graph(pipe.graph_, gain_knn(Y, k, band, pipe.penalty_))
    ids, _ = pipe.search(Y[-3:], k=5)
    assert ids.shape == (3, 5) and (ids >= 0).all() and (ids < 280).all()


def test_ann_mode_adds_exact_new_rows_and_keeps_old_edges():
    X = clustered_embeddings(600, 16, 8, seed=8)
    pipe = G3RAG(mode="ann", n_neighbors=6, settings={"device": "cpu"}).fit(X[:500])
    old = pipe.graph_
    pipe = grown(pipe, X, 500)
    exact = gain_knn(X, 6, (0.3, 0.9), pipe.penalty_)
    g = pipe.graph_
    np.testing.assert_array_equal(g.indices[g.indptr[500]:], exact.indices[exact.indptr[500]:])
    np.testing.assert_array_equal(g.data[g.indptr[500]:], exact.data[exact.indptr[500]:])
    for i in range(500):  # an existing row: its old edges that survive, in order, then none lost above them
        row, was = g.indices[g.indptr[i]:g.indptr[i + 1]], old.indices[old.indptr[i]:old.indptr[i + 1]]
        kept = row[row < 500]
        np.testing.assert_array_equal(kept, was[:len(kept)])


def test_add_after_save_and_load(tmp_path):
    X = clustered_embeddings(150, 16, 4, seed=9)
    pipe = G3RAG(mode="knn", n_neighbors=8, settings={"device": "cpu"}).fit(X[:120])
    pipe.save(tmp_path / "g")
    loaded = G3RAG.load(tmp_path / "g", pipe.fit_params, pipe.components)
    assert loaded.density_build_ == pipe.density_build_
    np.testing.assert_array_equal(loaded.penalty_, pipe.penalty_)
    a, b = grown(pipe, X, 120), grown(loaded, X, 120)
    assert_same_graph(b.graph_, a.graph_)
    # an index saved before the penalty was kept: the add refits
    pipe = G3RAG(mode="knn", n_neighbors=8, settings={"device": "cpu"}).fit(X[:120])
    pipe.save(tmp_path / "old")
    (tmp_path / "old" / "penalty.npy").unlink()
    (tmp_path / "old" / "density_build.npy").unlink()
    legacy = G3RAG.load(tmp_path / "old", pipe.fit_params, pipe.components)
    assert legacy.penalty_ is None
    legacy = grown(legacy, X, 120)
    assert_same_graph(legacy.graph_, G3RAG(mode="knn", n_neighbors=8, settings={"device": "cpu"}).fit(X).graph_)


# ---------------------------------------------------------------------- Index.add / compact
def test_index_add_then_compact_equals_a_full_build(demo_corpus, hashing_embedder):
    from hopgraph.demo import DEMO_QUESTIONS

    n = len(demo_corpus)
    cut = int(0.8 * n)
    questions = list(DEMO_QUESTIONS) + list(demo_corpus.titles)
    full = Index.build(demo_corpus, embedder=hashing_embedder, pipelines=["g3rag"], progress=False)
    idx = Index.build(demo_corpus.take(np.arange(cut)), embedder=hashing_embedder, pipelines=["g3rag"],
                      progress=False)
    idx.add(demo_corpus.take(np.arange(cut, n)))
    assert idx.pipelines["g3rag"].graph_.n_rows == n
    before = idx.search(questions, pipeline="g3rag", k=5)
    want = full.search(questions, pipeline="g3rag", k=5)
    for hits in before:  # valid before compaction: k distinct passages of the grown corpus
        assert len(hits) == 5 and len({h.id for h in hits}) == 5
        assert all(h.id in set(demo_corpus.ids) for h in hits)
    for scoring in ("fused", "mask"):  # the default and the published query
        got = idx.search(questions, pipeline="g3rag", k=5, scoring=scoring)
        ref = full.search(questions, pipeline="g3rag", k=5, scoring=scoring)
        differ = sum(len({h.id for h in a} - {h.id for h in b}) for a, b in zip(got, ref))
        # before compact only the stale density rule separates the two: at most 1 id in 50 differs
        assert differ <= 5 * len(ref) // 50, f"{scoring}: {differ} of {5 * len(ref)} top-5 ids differ"
    idx.compact()
    assert idx.search(questions, pipeline="g3rag", k=5) == want
    np.testing.assert_array_equal(idx.pipelines["g3rag"].penalty_, full.pipelines["g3rag"].penalty_)


@pytest.mark.parametrize("k", [2, 8])
def test_extension_equals_build_when_pending_reverse_edges_are_reduced(monkeypatch, k):
    """The per-row reduction of held reverse-edge candidates (and the raised thresholds) between
    row blocks, which a large add triggers, forced here after every block."""
    from hopgraph.engine.pipelines.g3rag import graph_update

    monkeypatch.setattr(graph_update, "MAX_PENDING", 0)
    X = clustered_embeddings(240, 24, 3, seed=11)
    pen = np.random.default_rng(2).uniform(0.2, 1.0, 240).astype(np.float32)
    for start in (40, 120):
        check_extension(X, pen, k, (0.2, 0.95), start, block_entries=1)
    Xd = dyadic_data(seed=3)
    pend = np.random.default_rng(3).choice(np.array([0.0, 0.5, 1.0], np.float32), len(Xd))
    check_extension(Xd, pend, k, (0.0, 1.0), 10, block_entries=1)


@pytest.mark.parametrize("column_block", [32, 100])
def test_extension_read_in_column_blocks_equals_one_block(monkeypatch, column_block):
    """X is read in column blocks (a large or segmented X is never held whole): the graph and the
    added densities are the same, bit for bit, for blocks of at least MIN_GEMM_ROWS rows (smaller
    products take another BLAS kernel, which may round the last bit otherwise)."""
    from hopgraph.engine.pipelines.g3rag import graph_update

    X = clustered_embeddings(300, 16, 6, seed=21)
    pen = np.random.default_rng(2).uniform(0.5, 1.0, 300).astype(np.float32)
    old = gain_knn(X[:230], 6, (0.2, 0.95), pen[:230])
    want = extend_gain_graph(old, X, 230, pen, 6, 0.2, 0.95)
    want_d = added_density(X, 230, "exact")
    monkeypatch.setattr(graph_update, "COLUMN_BLOCK", column_block)
    got = extend_gain_graph(old, X, 230, pen, 6, 0.2, 0.95)
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(added_density(X, 230, "exact"), want_d, rtol=1e-6)


# ---------------------------------------------------------------------- candidates from the build's cells
def test_extension_with_every_row_a_candidate_equals_the_exact_one():
    X = clustered_embeddings(240, 24, 6, seed=12)
    pen = np.random.default_rng(12).uniform(0.2, 1.0, len(X)).astype(np.float32)
    old = gain_knn(X[:200], 8, (0.3, 0.9), pen[:200])

    def everything(X, rows, start):  # three groups of rows, each a candidate of every added row
        for part in np.array_split(np.arange(len(X), dtype=np.int64), 3):
            yield part, rows, rows

    got = extend_gain_graph(old, X, 200, pen, 8, 0.3, 0.9, candidates=everything)
    assert_same_graph(got, gain_knn(X, 8, (0.3, 0.9), pen))


def test_added_rows_take_the_candidates_of_the_builds_cells():
    """An add by the build's cells gives the new rows the edges an ANN build over the grown IVF
    gives them (same groups, same probes, exact rescoring), and the old rows only edges that
    the reverse scan found (each a true gain weight above the row's former k-th)."""
    from hopgraph.engine.components.ivf import IVFIndex
    from hopgraph.engine.pipelines.g3rag.ann_graph import AddedRowCandidates, ann_gain_knn

    X = clustered_embeddings(1530, 16, 8, seed=13)  # 3 groups before and after the add
    pen = np.random.default_rng(13).uniform(0.3, 1.0, len(X)).astype(np.float32)
    ivf = IVFIndex.build(X[:1500], nlist=24)
    old = ann_gain_knn(X[:1500], 6, 0.3, 0.9, pen[:1500], ivf=ivf, nprobe=2)
    ivf.add(X, 1500)
    cand = AddedRowCandidates(ivf, 1500, nprobe=2)
    assert len(cand.probes) == 3  # ceil(1500 / 512) groups of the 24 IVF cells
    got = extend_gain_graph(old, X, 1500, pen, 6, 0.3, 0.9, candidates=cand)
    want = ann_gain_knn(X, 6, 0.3, 0.9, pen, ivf=ivf, nprobe=2)
    np.testing.assert_array_equal(got.indices[got.indptr[1500]:], want.indices[want.indptr[1500]:])
    np.testing.assert_allclose(got.data[got.indptr[1500]:], want.data[want.indptr[1500]:], rtol=1e-6)  # GEMM tiles
    S = X @ X.T
    for i in range(1500):
        row, w = got.indices[got.indptr[i]:got.indptr[i + 1]], got.data[got.indptr[i]:got.indptr[i + 1]]
        was = old.indices[old.indptr[i]:old.indptr[i + 1]]
        np.testing.assert_array_equal(row[row < 1500], was[:int((row < 1500).sum())])
        for j, v in zip(row[row >= 1500], w[row >= 1500]):
            s = float(np.clip(S[i, j], 0, 1))
            assert 0.3 <= S[i, j] <= 0.9
            np.testing.assert_allclose(v, s * np.sqrt(1 - s * s) * pen[j], rtol=1e-5)


def test_pipeline_add_over_a_stored_ann_graph_uses_the_cells_and_stays_an_overlay(tmp_path, monkeypatch):
    """G3RAG loaded from disk in mode "ann": an add reads candidates from the build's cells and
    keeps the stored graph as the base of an overlay; its search equals the same graph whole."""
    from hopgraph.engine.components.shared import Components
    from hopgraph.engine.pipelines.g3rag import pipeline as g3

    monkeypatch.setattr(g3, "ANN_MIN_N", 1000)
    X = clustered_embeddings(1530, 16, 8, seed=14)
    comps = Components(X[:1500], dense="ann")
    pipe = G3RAG(mode="ann", n_neighbors=6, settings={"device": "cpu"}).fit(X[:1500], components=comps)
    pipe.save(tmp_path / "g")
    loaded = G3RAG.load(tmp_path / "g", pipe.fit_params, comps)
    calls = []
    real = g3.AddedRowCandidates.__call__
    monkeypatch.setattr(g3.AddedRowCandidates, "__call__", lambda self, *a: calls.append(1) or real(self, *a))
    loaded = grown(loaded, X, 1500)
    assert calls and isinstance(loaded.graph_, g3.OverlayCSR)
    assert loaded.graph_.n_rows == loaded.graph_.n_cols == 1530
    whole = copy.copy(loaded)
    whole.graph_ = CSR(*loaded.graph_.arrays().values(), 1530)
    for a, b in zip(loaded.search(X[-5:], k=5), whole.search(X[-5:], k=5)):
        np.testing.assert_array_equal(a, b)


def test_the_builds_cells_are_stored_and_used_by_a_later_add(tmp_path, monkeypatch):
    from hopgraph.engine.components.shared import Components
    from hopgraph.engine.pipelines.g3rag import ann_graph
    from hopgraph.engine.pipelines.g3rag import pipeline as g3

    monkeypatch.setattr(g3, "ANN_MIN_N", 1000)
    X = clustered_embeddings(1520, 16, 8, seed=15)
    comps = Components(X[:1500], dense="ann")
    pipe = G3RAG(mode="ann", n_neighbors=6, settings={"device": "cpu"}).fit(X[:1500], components=comps)
    pipe.save(tmp_path / "g")
    assert all((tmp_path / "g" / f"{f}.npy").is_file() for f in ann_graph.AddedRowCandidates.ARRAY_FILES)
    want = grown(copy.deepcopy(pipe), X, 1500).graph_

    def no_kmeans(*a, **k):
        raise AssertionError("the stored grouping was not used")

    monkeypatch.setattr(ann_graph, "group_cells", no_kmeans)
    loaded = grown(G3RAG.load(tmp_path / "g", pipe.fit_params, comps), X, 1500)  # the build's IVF index
    np.testing.assert_array_equal(loaded.graph_.indptr, want.indptr)
    np.testing.assert_array_equal(np.asarray(loaded.graph_.indices), want.indices)
    # cells made over another IVF index are not used: the grouping is computed again
    assert not ann_graph.AddedRowCandidates.fits({"cells_group": np.zeros(3, np.int64),
                                                  "cells_probes": np.zeros((1, 1), np.int64),
                                                  "cells_ivf": np.array([3, 7])}, comps.dense.ivf)
