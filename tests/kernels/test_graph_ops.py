"""Kernel ops of SPEC §1 (density, gain_knn, sparse_diffusion): the CPU path against
independent dense numpy references, and every Triton kernel (TRITON_INTERPRET=1 on
the CPU, see conftest) against the CPU path, on random, clustered and adversarial inputs."""
from __future__ import annotations

import numpy as np
import pytest
import triton
import triton.language as tl
from conftest import clustered_embeddings, random_unit

from hopgraph.engine.errors import InputError
from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
from hopgraph.engine.sparse import row_normalised
from hopgraph.kernels.csr import CSR
from hopgraph.kernels.gain_knn_triton import similarity_floor
from hopgraph.kernels import call


# ---------------------------------------------------------------- references (dense numpy)
def ref_density(X: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
    S = np.maximum(X.astype(np.float64) @ X.T.astype(np.float64), 0)
    n = len(X)
    cols = np.arange(n) if cols is None else cols
    out = np.zeros(n)
    for i in range(n):
        others = cols[cols != i]
        out[i] = S[i, others].mean() if len(others) else 0.0
    return out


def ref_gain_knn(X, k, sim_min, sim_max, pen) -> list[np.ndarray]:
    S = X @ X.T
    x = np.clip(S, 0, 1)
    W = x * np.sqrt(1 - x * x) * pen[None, :]
    ok = (S >= sim_min) & (S <= sim_max) & (W > 0)
    np.fill_diagonal(ok, False)
    rows = []
    for i in range(len(X)):
        js = np.nonzero(ok[i])[0]
        rows.append(js[np.lexsort((js, -W[i, js]))][:k])
    return rows


def row(g: CSR, i: int) -> np.ndarray:
    return g.indices[g.indptr[i]:g.indptr[i + 1]]


def adversarial_inputs() -> dict[str, np.ndarray]:
    """All-identical vectors, an isolated (orthogonal) row, exact duplicates, N < k, a zero
    vector, a single row."""
    g = np.random.default_rng(3)
    same = np.tile(random_unit(1, 16, 1), (12, 1))
    iso = clustered_embeddings(20, 16, 2, seed=4)
    iso[:, -1] = 0
    iso[7] = 0
    iso[7, -1] = 1.0  # orthogonal to every other row: no neighbour in any band above 0
    dup = clustered_embeddings(16, 16, 3, seed=5)
    dup[8:] = dup[:8]
    tiny = random_unit(3, 16, 6)
    one_hot = np.eye(16, dtype=np.float32)[g.integers(0, 4, 12)]  # similarities exactly 0 or 1
    zero = random_unit(10, 16, 7)
    zero[4] = 0.0  # similarity 0 to every row: no edge in or out, density 0
    return {"identical": same, "isolated": iso, "duplicates": dup, "tiny": tiny, "one_hot": one_hot,
            "zero_vector": zero, "single": random_unit(1, 16, 8)}


# ---------------------------------------------------------------- density
@pytest.mark.parametrize("X", [random_unit(50, 8, 0), clustered_embeddings(60, 16, 3, seed=1)])
def test_density_exact_matches_dense_reference(X):
    got = call("density", X, device="cpu", block=16)
    np.testing.assert_allclose(got, ref_density(X), rtol=1e-5, atol=1e-6)


def test_density_sampled_is_the_mean_over_the_fixed_sample():
    from hopgraph.kernels.density import sample_columns

    X = clustered_embeddings(80, 16, 4, seed=2)
    got = call("density", X, mode="sampled", n_samples=25, seed=7, device="cpu", block=32)
    np.testing.assert_allclose(got, ref_density(X, sample_columns(80, 25, 7)), rtol=1e-5, atol=1e-6)
    full = call("density", X, mode="sampled", n_samples=500, device="cpu")
    np.testing.assert_allclose(full, call("density", X, device="cpu"), rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_density_sampled_is_unbiased_over_seeds():
    X = clustered_embeddings(60, 8, 3, seed=3)
    est = np.mean([call("density", X, mode="sampled", n_samples=10, seed=s, device="cpu") for s in range(300)], 0)
    np.testing.assert_allclose(est, ref_density(X), atol=0.03)


def test_density_rejects_bad_input():
    with pytest.raises(InputError, match="mode"):
        call("density", random_unit(4, 3, 0), mode="approx", device="cpu")
    with pytest.raises(InputError, match="NaN"):
        call("density", np.full((3, 2), np.nan, np.float32), device="cpu")
    assert call("density", random_unit(1, 3, 0), device="cpu").tolist() == [0.0]


# ---------------------------------------------------------------- gain_knn (CPU)
@pytest.mark.parametrize("case", ["random", "clustered", "adversarial"])
def test_gain_knn_cpu_matches_dense_reference(case):
    inputs = {"random": [random_unit(70, 8, 0)], "clustered": [clustered_embeddings(90, 16, 4, seed=1)],
              "adversarial": list(adversarial_inputs().values())}[case]
    for X in inputs:
        pen = np.random.default_rng(len(X)).uniform(0.2, 1, len(X)).astype(np.float32)
        for k, lo, hi in ((5, 0.3, 0.9), (len(X) + 3, 0.0, 1.0)):
            g = call("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen, block=16, device="cpu")
            ref = ref_gain_knn(X, k, lo, hi, pen)
            for i in range(len(X)):
                np.testing.assert_array_equal(row(g, i), ref[i], err_msg=f"row {i} k={k}")
            assert np.all(np.diff(g.data[g.indptr[0]:g.indptr[1]]) <= 0)


def test_gain_knn_ties_go_to_the_lower_column_across_tiles():
    X = np.tile(np.array([[1.0, 0.0]], np.float32), (40, 1))
    X[:, 1] = 0.6
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[::2, 1] *= -1  # two groups: equal similarity to every member of the other group
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    g = call("gain_knn", X, k=3, sim_min=0.0, sim_max=0.99, block=8, device="cpu")
    ref = ref_gain_knn(X, 3, 0.0, 0.99, np.ones(40, np.float32))
    for i in range(40):
        np.testing.assert_array_equal(row(g, i), ref[i])


def test_gain_knn_isolated_and_out_of_band_rows_are_empty():
    X = adversarial_inputs()["isolated"]
    g = call("gain_knn", X, k=4, sim_min=0.3, sim_max=0.9, device="cpu")
    assert g.indptr[8] - g.indptr[7] == 0
    same = adversarial_inputs()["identical"]
    assert call("gain_knn", same, k=4, device="cpu").nnz == 0  # s = 1 > sim_max everywhere
    assert g.indices.dtype == np.int32 and g.indptr.dtype == np.int64 and g.data.dtype == np.float32


def test_gain_knn_rejects_bad_input():
    X = random_unit(5, 3, 0)
    with pytest.raises(InputError, match="k must"):
        call("gain_knn", X, k=0, device="cpu")
    with pytest.raises(InputError, match="sim_min"):
        call("gain_knn", X, k=2, sim_min=0.9, sim_max=0.1, device="cpu")
    with pytest.raises(InputError, match="penalty"):
        call("gain_knn", X, k=2, penalty=np.ones(4), device="cpu")


# ---------------------------------------------------------------- sparse_diffusion (CPU)
def test_sparse_diffusion_is_p_times_row_normalised_w():
    X = clustered_embeddings(40, 8, 3, seed=2)
    g = call("gain_knn", X, k=6, device="cpu")
    seeds = np.array([[0, 5, -1], [39, -1, -1], [1, 2, 3]])
    weights = np.array([[0.5, 0.5, 0.0], [2.0, 0, 0], [0.2, 0.3, 0.5]], np.float32)
    T = row_normalised(g).to_dense()
    P = np.zeros((3, 40), np.float32)
    for b in range(3):
        for j, w in zip(seeds[b], weights[b]):
            if j >= 0:
                P[b, j] += w
    got = call("sparse_diffusion", seeds, weights, g.indptr, g.indices, g.data, 40, device="cpu")
    np.testing.assert_allclose(got, P @ T, rtol=1e-5, atol=1e-7)
    uniform = call("sparse_diffusion", seeds, None, g.indptr, g.indices, g.data, 40, device="cpu")
    np.testing.assert_allclose(uniform[0], (T[0] + T[5]) / 2, rtol=1e-5, atol=1e-7)
    raw = call("sparse_diffusion", seeds, weights, g.indptr, g.indices, g.data, 40, normalise=False, device="cpu")
    np.testing.assert_allclose(raw, P @ g.to_dense(), rtol=1e-5, atol=1e-7)


def test_sparse_diffusion_zero_sum_rows_stay_zero():
    indptr = np.array([0, 2, 2, 4])
    indices = np.array([1, 2, 0, 1])
    data = np.array([0.0, 0.0, 1.0, 3.0], np.float32)  # row 0 sums to 0, row 1 is empty
    got = call("sparse_diffusion", np.array([[0, 1], [2, -1]]), None, indptr, indices, data, 3, device="cpu")
    np.testing.assert_allclose(got, [[0, 0, 0], [0.25, 0.75, 0]])
    with pytest.raises(InputError, match="seed_ids"):
        call("sparse_diffusion", np.array([[3]]), None, indptr, indices, data, 3, device="cpu")


def test_hub_penalty_follows_spec_step_2():
    pen = hub_penalty(np.array([0.1, 0.3, 0.5]), beta=1.0)
    np.testing.assert_allclose(pen, np.exp(-np.array([0.0, 0.5, 1.0])), rtol=1e-6)


# ---------------------------------------------------------------- Triton kernels vs CPU path
TRITON_INPUTS = {"random": random_unit(37, 8, 0), "clustered": clustered_embeddings(40, 16, 3, seed=1),
                 **adversarial_inputs()}


@pytest.mark.parametrize("name", sorted(TRITON_INPUTS))
def test_triton_density_matches_cpu(name):
    X = TRITON_INPUTS[name]
    for kw in ({"mode": "exact"}, {"mode": "sampled", "n_samples": 9, "seed": 1}):
        cpu = call("density", X, device="cpu", **kw)
        tri = call("density", X, device="cpu", backend="triton", **kw)
        np.testing.assert_allclose(tri, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(TRITON_INPUTS))
def test_triton_gain_knn_matches_cpu(name):
    X = TRITON_INPUTS[name]
    pen = np.random.default_rng(2).uniform(0.3, 1, len(X)).astype(np.float32)
    k, lo, hi = (3, 0.3, 0.9) if name != "one_hot" else (20, 0.0, 1.0)
    cpu = call("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen, device="cpu")
    tri = call("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen, device="cpu", backend="triton")
    assert_same_graph(tri, cpu)


def assert_same_graph(tri, cpu):
    """Edges equal; weights within gain_knn_triton's documented tolerance (1e-5 relative, 1e-6
    absolute: the gain's slope is unbounded as the similarity nears 1)."""
    np.testing.assert_array_equal(tri.indptr, cpu.indptr)
    np.testing.assert_array_equal(tri.indices, cpu.indices)
    np.testing.assert_allclose(tri.data, cpu.data, rtol=1e-5, atol=1e-6)


def test_triton_gain_knn_over_many_tiles_matches_cpu():
    """100 rows span seven 16-column tiles of the interpreter's configuration: tiles whose hi·hi bound
    cannot beat a row's k-th weight are skipped, the others are completed and selected."""
    X = clustered_embeddings(100, 16, 6, seed=9)
    pen = np.random.default_rng(3).uniform(0.3, 1, len(X)).astype(np.float32)
    for k, lo, hi in ((1, 0.3, 0.9), (12, 0.0, 1.0)):
        cpu = call("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen, device="cpu")
        tri = call("gain_knn", X, k=k, sim_min=lo, sim_max=hi, penalty=pen, device="cpu", backend="triton")
        assert_same_graph(tri, cpu)


def test_triton_density_over_many_tiles_matches_cpu():
    X = clustered_embeddings(150, 16, 6, seed=9)
    for kw in ({"mode": "exact"}, {"mode": "sampled", "n_samples": 40, "seed": 2}):
        cpu = call("density", X, device="cpu", **kw)
        tri = call("density", X, device="cpu", backend="triton", **kw)
        np.testing.assert_allclose(tri, cpu, rtol=1e-5, atol=1e-6)


def test_triton_gain_knn_ties_go_to_the_lower_column_across_tiles():
    X = np.tile(np.array([[1.0, 0.6]], np.float32), (40, 1))
    X[::2, 1] *= -1  # two groups: equal similarity to every member of the other group
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    tri = call("gain_knn", X, k=3, sim_min=0.0, sim_max=0.99, device="cpu", backend="triton")
    ref = ref_gain_knn(X, 3, 0.0, 0.99, np.ones(40, np.float32))
    for i in range(40):
        np.testing.assert_array_equal(row(tri, i), ref[i])


@pytest.mark.parametrize("band", [(0.0, 1.0), (0.3, 0.9)])
def test_triton_gain_knn_dense_path_matches_cpu(band):
    """k above the register top-k's limit (the exact graph's k = n − 1) takes the dense weights kernel."""
    from hopgraph.kernels.gain_knn_triton import SELECT_MAX_K

    X = clustered_embeddings(SELECT_MAX_K + 6, 16, 3, seed=2)
    pen = np.random.default_rng(4).uniform(0.3, 1, len(X)).astype(np.float32)
    for k in (SELECT_MAX_K + 1, len(X) - 1):
        cpu = call("gain_knn", X, k=k, sim_min=band[0], sim_max=band[1], penalty=pen, device="cpu")
        tri = call("gain_knn", X, k=k, sim_min=band[0], sim_max=band[1], penalty=pen, device="cpu",
                   backend="triton")
        assert_same_graph(tri, cpu)


def test_triton_sparse_diffusion_matches_cpu():
    X = TRITON_INPUTS["clustered"]
    g = call("gain_knn", X, k=4, device="cpu")
    data = g.data.copy()
    data[g.indptr[3]:g.indptr[4]] = 0.0  # a zero-sum row
    keep = np.ones(g.nnz, bool)
    keep[g.indptr[9]:g.indptr[10]] = False  # an empty row (an isolated node)
    indptr = np.r_[0, np.cumsum(np.diff(g.indptr) * (np.arange(len(X)) != 9))].astype(np.int64)
    indices, data = g.indices[keep], data[keep]
    seeds = np.array([[0, 3, -1], [5, 6, 7], [-1, -1, -1], [3, -1, -1], [9, 9, 2]])  # repeated seed
    for weights in (None, np.random.default_rng(0).random(seeds.shape).astype(np.float32)):
        for normalise in (True, False):
            cpu = call("sparse_diffusion", seeds, weights, indptr, indices, data, len(X),
                       normalise=normalise, device="cpu")
            tri = call("sparse_diffusion", seeds, weights, indptr, indices, data, len(X),
                       normalise=normalise, device="cpu", backend="triton")
            np.testing.assert_array_equal(tri, cpu)  # the same float64 sums in the same order
            for top in (1, 3, 50):
                want = call("sparse_diffusion", seeds, weights, indptr, indices, data, len(X),
                            normalise=normalise, top=top, device="cpu")
                got = call("sparse_diffusion", seeds, weights, indptr, indices, data, len(X),
                           normalise=normalise, top=top, device="cpu", backend="triton")
                for a, b in zip(got, want):
                    np.testing.assert_array_equal(a, b)
    uniform = call("sparse_diffusion", seeds, None, indptr, indices, data, len(X), device="cpu")
    assert not uniform[2].any() and not uniform[3].any()  # all padding; a zero-sum row
    T = row_normalised(CSR(indptr, indices, data, len(X))).to_dense()
    np.testing.assert_allclose(uniform[4], T[2] / 3, rtol=1e-5, atol=1e-7)  # the empty row adds nothing


def test_sparse_diffusion_top_is_the_best_reached_columns_of_the_dense_result():
    """``top=k``: per query the k columns reached by a seed edge with the largest y, ties toward
    the lower column, padded with -1 / -inf; rows without a valid seed are all padding."""
    g = np.random.default_rng(5)
    n = 30
    W = (g.random((n, n)) < 0.2) * np.round(g.random((n, n)), 1)  # rounded weights: many ties
    W = W.astype(np.float32)
    indptr = np.r_[0, np.cumsum((W > 0).sum(1))].astype(np.int64)
    indices = np.nonzero(W > 0)[1].astype(np.int32)
    data = W[W > 0]
    seeds = np.array([[0, 3, -1], [5, 5, 7], [-1, -1, -1], [9, 2, 11]])
    dense = call("sparse_diffusion", seeds, None, indptr, indices, data, n, device="cpu")
    for top in (1, 4, 40):
        ids, vals = call("sparse_diffusion", seeds, None, indptr, indices, data, n, top=top, device="cpu")
        assert ids.shape == vals.shape == (4, top) and ids.dtype == np.int64 and vals.dtype == np.float32
        for b in range(4):
            reached = np.unique(np.concatenate([indices[indptr[r]:indptr[r + 1]] for r in seeds[b] if r >= 0]
                                               + [np.zeros(0, np.int32)]))
            order = reached[np.lexsort((reached, -dense[b, reached]))][:top]
            k = len(order)
            np.testing.assert_array_equal(ids[b, :k], order)
            np.testing.assert_array_equal(vals[b, :k], dense[b, order])
            assert (ids[b, k:] == -1).all() and np.isneginf(vals[b, k:]).all()


@pytest.mark.parametrize("backend", [None, "triton"])
@pytest.mark.parametrize("top", [0, -2, 2.5, True])
def test_sparse_diffusion_top_must_be_a_positive_integer(backend, top):
    with pytest.raises(InputError, match="top must be an integer >= 1"):
        call("sparse_diffusion", np.array([[0]]), None, np.array([0, 1]), np.array([0], np.int32),
             np.array([1.0], np.float32), 1, top=top, device="cpu", backend=backend)


# ---------------------------------------------------------------- gain_knn tile arithmetic
def test_gain_weights_both_directions_equal_the_dense_formula_bit_for_bit():
    import torch

    from hopgraph.kernels.gain_knn import STRIP_ROWS, edge_weights, pair_weights

    g = np.random.default_rng(11)
    S = g.uniform(-0.2, 1.0, (2 * STRIP_ROWS + 5, 37)).astype(np.float32)
    S[0, :4] = [0.3, 0.9, np.nextafter(np.float32(0.3), np.float32(0)), 1.0]  # band edges are inclusive
    pr, pc = g.uniform(0, 1, S.shape[0]).astype(np.float32), g.uniform(0, 1, S.shape[1]).astype(np.float32)
    pc[3] = 0.0
    x = np.clip(S, 0, 1)
    gain = np.where((S >= 0.3) & (S <= 0.9), x * np.sqrt(1 - x * x), np.float32(0))
    w, wT = pair_weights(torch.from_numpy(S), torch.from_numpy(pr), torch.from_numpy(pc), 0.3, 0.9)
    np.testing.assert_array_equal(w.numpy(), gain * pc)
    np.testing.assert_array_equal(wT.numpy(), (gain * pr[:, None]).T)
    assert wT.is_contiguous() and w[0, 0] > 0 and w[0, 1] > 0 and w[0, 2] == 0
    np.testing.assert_array_equal(edge_weights(torch.from_numpy(S).T, torch.from_numpy(pr), 0.3, 0.9).numpy(),
                                  (gain * pr[:, None]).T)  # a transposed (strided) tile


def test_compile_setting(monkeypatch):
    from hopgraph.kernels.gain_knn import COMPILE_MIN_ENTRIES, compile_wanted

    monkeypatch.delenv("HOPGRAPH_COMPILE", raising=False)
    assert not compile_wanted(COMPILE_MIN_ENTRIES - 1) and compile_wanted(COMPILE_MIN_ENTRIES)
    monkeypatch.setenv("HOPGRAPH_COMPILE", "0")
    assert not compile_wanted(10 ** 15)
    monkeypatch.setenv("HOPGRAPH_COMPILE", "1")
    assert compile_wanted(1)
    monkeypatch.setenv("HOPGRAPH_COMPILE", "yes")
    with pytest.raises(InputError, match="HOPGRAPH_COMPILE"):
        compile_wanted(1)


@pytest.mark.parametrize("k,band", [(1, (0.3, 0.9)), (5, (-1.0, 1.0)), (32, (0.3, 0.9)), (4, (0.69, 0.72))])
def test_triton_gain_knn_similarity_floor_loses_no_edge(k, band):
    """The per-row similarity floor (a tile skipped when no hi·hi entry reaches its row's floor) is a
    necessary condition only: rows of norms 0.5 to 2 (the hi·hi bound and the scaling vary by row),
    penalties from 0.01 to 1 (the floor assumes the largest), a zero row, a band around gain's peak
    and one beyond it, k = 1 to 32 over ten interpreter tiles — every edge of the CPU path is found."""
    g = np.random.default_rng(11)
    X = clustered_embeddings(150, 16, 5, seed=12) * g.uniform(0.5, 2.0, (150, 1)).astype(np.float32)
    X[17] = 0.0
    pen = g.uniform(0.01, 1.0, 150).astype(np.float32)
    pen[3] = 1.0
    cpu = call("gain_knn", X, k=k, sim_min=band[0], sim_max=band[1], penalty=pen, device="cpu")
    tri = call("gain_knn", X, k=k, sim_min=band[0], sim_max=band[1], penalty=pen, device="cpu", backend="triton")
    assert cpu.indptr[-1] > 0
    assert_same_graph(tri, cpu)


def test_similarity_floor_is_below_every_similarity_that_can_enter():
    """similarity_floor (the Triton helper, interpreted): for k-th weights from 1e-6 to past gain's
    maximum, gain(floor)·pen_max never exceeds the k-th weight (so no entry below the floor can beat
    it) and the floor's weight is within 0.2 % of it, and no root exists past the maximum (+inf)."""
    import torch

    thr = np.concatenate([np.geomspace(1e-6, 0.49, 60), [0.4995, 0.5, 0.6, -np.inf]]).astype(np.float32)
    for pen_max in (1.0, 0.37):
        out = torch.empty(64)
        _floors[(1,)](torch.from_numpy(thr), out, pen_max, -1.0, N=64)
        s = out.numpy().astype(np.float64)
        g = thr.astype(np.float64) / pen_max
        finite = (thr > 0) & (g < 0.5 / 1.001)
        exact = g[finite] * np.sqrt(2 / (1 + np.sqrt(1 - 4 * g[finite] ** 2)))  # x·sqrt(1 − x²) = g, x ≤ 1/√2
        weight = s[finite] * np.sqrt(1 - s[finite] ** 2) * pen_max
        assert (weight <= thr[finite]).all() and (s[finite] <= exact).all()
        assert (weight >= thr[finite] * (1 - 2e-3)).all()  # tight: 0.2 % of the weight below the k-th
        assert np.isinf(s[g >= 0.5 * 1.001]).all() and s[-1] == 0.0  # past the maximum; fewer than k held: s > 0


@triton.jit
def _floors(THR, OUT, pen_max, sim_min, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(OUT + i, similarity_floor(tl.load(THR + i), sim_min, pen_max, 0.0, 1.0, 1.0))
