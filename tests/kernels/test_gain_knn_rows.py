"""``gain_knn_rows`` (SPEC §1 index steps 3-5 for query rows among labelled base rows): the CPU path
against a dense numpy reference written from the op's contract and against ``gain_knn`` (the rows of
a corpus among themselves are its graph, bit for bit), and the Triton kernels (TRITON_INTERPRET=1 on
the CPU, see conftest) against the CPU path, on random and adversarial inputs: k > N, zero vectors,
duplicate rows, empty base and query sets, floors, excluded ids, the dense path (k > SELECT_MAX_K);
NaN and infinity are refused (the op's contract), as is every other malformed input."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings, random_unit

from hopgraph.engine.errors import InputError
from hopgraph.kernels import call
from hopgraph.kernels.csr import CSR


def ref_rows(Q, X, k, sim_min, sim_max, pen=None, columns=None, exclude=None, floor=None) -> list[list[tuple[int, float]]]:
    """Per query row, ``[(column id, weight), ...]`` best first, from the contract in float64."""
    n = len(X)
    pen = np.ones(n) if pen is None else np.asarray(pen, np.float64)
    columns = np.arange(n) if columns is None else np.asarray(columns)
    out = []
    for i, q in enumerate(np.asarray(Q, np.float64)):
        s = np.asarray(X, np.float64) @ q
        x = np.clip(s, 0, 1)
        w = x * np.sqrt(1 - x * x) * pen
        low = 0.0 if floor is None else max(float(floor[i]), 0.0)
        ok = (s >= sim_min) & (s <= sim_max) & (w > low)
        if exclude is not None:
            ok &= columns != exclude[i]
        js = np.flatnonzero(ok)
        js = js[np.lexsort((columns[js], -w[js]))][:k]
        out.append([(int(columns[j]), float(w[j])) for j in js])
    return out


def as_lists(g: CSR) -> list[list[tuple[int, float]]]:
    return [list(zip(g.indices[a:b].tolist(), g.data[a:b].tolist())) for a, b in zip(g.indptr[:-1], g.indptr[1:])]


def assert_matches_reference(g: CSR, ref) -> None:
    """Edges equal; weights within float32 rounding of the float64 reference."""
    got = as_lists(g)
    assert len(got) == len(ref)
    for row, want in zip(got, ref):
        assert [c for c, _ in row] == [c for c, _ in want]
        np.testing.assert_allclose([w for _, w in row], [w for _, w in want], rtol=1e-5, atol=1e-6)


def assert_same_graph(tri: CSR, cpu: CSR) -> None:
    """Triton vs CPU: edges equal, weights within gain_knn_triton's documented tolerance."""
    assert tri.n_cols == cpu.n_cols
    np.testing.assert_array_equal(tri.indptr, cpu.indptr)
    np.testing.assert_array_equal(tri.indices, cpu.indices)
    np.testing.assert_allclose(tri.data, cpu.data, rtol=1e-5, atol=1e-6)


def cases() -> dict[str, tuple[np.ndarray, np.ndarray, dict]]:
    """``(Q, X, keyword arguments)`` of random and adversarial inputs (dyadic-free, no exact near-ties
    except where the input is made of them)."""
    g = np.random.default_rng(5)
    X = clustered_embeddings(70, 16, 4, seed=3)
    zero = random_unit(30, 16, 9)
    zero[[4, 11]] = 0.0  # zero vectors: similarity 0 to all, no edge in or out
    dup = clustered_embeddings(24, 16, 3, seed=6)
    dup[12:] = dup[:12]  # duplicate rows: tied weights, the lower id wins
    labels = np.sort(g.choice(1000, 70, replace=False))
    return {
        "random": (random_unit(23, 16, 1), random_unit(41, 16, 2), {"k": 4}),
        "clustered_self": (X[:37], X, {"k": 5, "exclude": np.arange(37)}),
        "labels_floor": (X[40:], X, {"k": 6, "columns": labels, "exclude": labels[40:],
                                     "floor": g.uniform(-0.1, 0.35, 30).astype(np.float32)}),
        "k_above_n": (X[:9], X[60:], {"k": 30, "sim_min": 0.0, "sim_max": 1.0}),
        "zero_vectors": (zero[:12], zero, {"k": 3, "exclude": np.arange(12)}),
        "duplicates": (dup, dup, {"k": 3, "exclude": np.arange(24), "sim_min": 0.0, "sim_max": 1.0}),
        "one_base_row": (X[:5], X[5:6], {"k": 2, "sim_min": -1.0, "sim_max": 1.0}),
        "penalised": (X[:20], X, {"k": 5, "penalty": g.choice(np.array([0.0, 0.5, 1.0], np.float32), 70)}),
    }


CASES = cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_matches_the_dense_reference(name):
    Q, X, kw = CASES[name]
    g = call("gain_knn_rows", Q, X, device="cpu", **kw)
    kw = {"sim_min": 0.3, "sim_max": 0.9, **kw}
    ref = ref_rows(Q, X, kw["k"], kw["sim_min"], kw["sim_max"], kw.get("penalty"), kw.get("columns"),
                   kw.get("exclude"), kw.get("floor"))
    assert_matches_reference(g, ref)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32 and g.data.dtype == np.float32
    assert g.n_cols == (int(kw["columns"][-1]) + 1 if "columns" in kw else len(X))


@pytest.mark.parametrize("name", sorted(CASES))
def test_triton_matches_cpu(name):
    Q, X, kw = CASES[name]
    cpu = call("gain_knn_rows", Q, X, device="cpu", **kw)
    tri = call("gain_knn_rows", Q, X, device="cpu", backend="triton", **kw)
    assert_same_graph(tri, cpu)


def test_rows_of_a_corpus_among_itself_are_its_gain_knn_graph():
    X = clustered_embeddings(120, 24, 5, seed=4)
    pen = np.random.default_rng(1).uniform(0.2, 1.0, 120).astype(np.float32)
    want = call("gain_knn", X, k=7, sim_min=0.2, sim_max=0.95, penalty=pen, device="cpu")
    got = call("gain_knn_rows", X, X, k=7, sim_min=0.2, sim_max=0.95, penalty=pen, exclude=np.arange(120),
               device="cpu", block_entries=500)  # several row blocks
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(a, b)  # the same tile arithmetic: bit for bit
    tri = call("gain_knn_rows", X, X, k=7, sim_min=0.2, sim_max=0.95, penalty=pen, exclude=np.arange(120),
               device="cpu", backend="triton")
    assert_same_graph(tri, want)


def test_triton_dense_path_matches_cpu():
    """k above the register top-k's limit takes the dense weights kernel."""
    from hopgraph.kernels.gain_knn_rows_triton import SELECT_MAX_K

    X = clustered_embeddings(SELECT_MAX_K + 10, 16, 3, seed=2)
    floor = np.full(20, 0.1, np.float32)
    for kw in ({"k": SELECT_MAX_K + 1}, {"k": len(X), "sim_min": 0.0, "sim_max": 1.0, "floor": floor}):
        cpu = call("gain_knn_rows", X[:20], X, exclude=np.arange(20), device="cpu", **kw)
        tri = call("gain_knn_rows", X[:20], X, exclude=np.arange(20), device="cpu", backend="triton", **kw)
        assert_same_graph(tri, cpu)
        assert cpu.nnz > 0


REVERSE = {  # (Q, X, forward keywords, reverse keywords): the add's two directions of one block, and more
    "added_rows": (CASES["clustered_self"][1][60:], CASES["clustered_self"][1],
                   {"k": 4, "exclude": np.arange(60, 70)},
                   {"query_columns": np.arange(60, 70), "query_penalty": np.linspace(0.2, 1, 10).astype(np.float32),
                    "reverse_floor": np.r_[np.full(60, 0.2), np.full(10, np.inf)].astype(np.float32)}),
    "duplicates_k_above_m": (CASES["duplicates"][0][:5], CASES["duplicates"][0],
                             {"k": 8, "sim_min": 0.0, "sim_max": 0.99},  # s = 1 pairs: no edge, whatever the rounding
                             {"query_columns": np.array([3, 40, 41, 50, 90]),
                              "reverse_floor": np.zeros(24, np.float32)}),
}


@pytest.mark.parametrize("name", sorted(REVERSE))
def test_reverse_direction_matches_the_reference_and_triton(name):
    """``reverse_floor``: the base rows' edges among the query rows, from the same similarities."""
    Q, X, kw, rkw = REVERSE[name]
    fwd, rev = call("gain_knn_rows", Q, X, device="cpu", **kw, **rkw)
    assert fwd.n_cols == rev.n_cols == 1 + max(len(X) - 1, int(rkw["query_columns"][-1]))  # both id sets
    assert_same_graph(fwd, call("gain_knn_rows", Q, X, device="cpu", n_cols=fwd.n_cols, **kw))  # unchanged
    band = (kw.get("sim_min", 0.3), kw.get("sim_max", 0.9))
    ref = ref_rows(X, Q, kw["k"], *band, rkw.get("query_penalty"), rkw["query_columns"], np.arange(len(X)),
                   rkw["reverse_floor"])
    assert_matches_reference(rev, ref)
    assert rev.n_rows == len(X) and rev.nnz > 0
    tri = call("gain_knn_rows", Q, X, device="cpu", backend="triton", **kw, **rkw)
    assert_same_graph(tri[0], fwd)
    assert_same_graph(tri[1], rev)


@pytest.mark.parametrize("backend", [None, "triton"])
def test_empty_base_or_query_rows_give_empty_rows(backend):
    X = random_unit(6, 8, 0)
    g = call("gain_knn_rows", X, X[:0], k=3, device="cpu", backend=backend)
    assert g.n_rows == 6 and g.nnz == 0 and g.n_cols == 0
    g = call("gain_knn_rows", X, X[:0], k=3, n_cols=10, device="cpu", backend=backend)
    assert g.n_cols == 10
    g = call("gain_knn_rows", X[:0], X, k=3, device="cpu", backend=backend)
    assert g.n_rows == 0 and g.nnz == 0 and g.n_cols == 6


@pytest.mark.parametrize("backend", [None, "triton"])
def test_bad_inputs_are_named(backend):
    X = random_unit(6, 8, 0)
    bad_x = X.copy()
    bad_x[2, 3] = np.nan
    bad_pen = np.ones(6, np.float32)
    bad_pen[1] = np.inf

    def run(Q=X, B=X, **kw):
        return call("gain_knn_rows", Q, B, device="cpu", backend=backend, **{"k": 2, **kw})

    for kw, match in (({"Q": bad_x}, "Q must be finite"), ({"B": bad_x}, "X must be finite"),
                      ({"penalty": bad_pen}, "penalty must be finite"),
                      ({"floor": np.array([0, np.nan, 0, 0, 0, 0], np.float32)}, "floor must be finite"),
                      ({"B": X[:, :4]}, "same width"), ({"k": 0}, "k must be an integer >= 1"),
                      ({"sim_min": 0.9, "sim_max": 0.1}, "sim_min <= sim_max"),
                      ({"penalty": np.ones(5)}, r"penalty must have shape \(6,\)"),
                      ({"columns": np.array([0, 1, 1, 2, 3, 4])}, "strictly increasing"),
                      ({"columns": np.arange(6.0)}, "columns must be an integer array"),
                      ({"exclude": np.full(6, -2)}, "exclude must hold"),
                      ({"n_cols": 3}, "n_cols must be an integer >= 6"),
                      ({"query_columns": np.arange(6)}, "go with reverse_floor"),
                      ({"reverse_floor": np.full(5, 0.1)}, r"reverse_floor must have shape \(6,\)"),
                      ({"reverse_floor": np.full(6, np.nan)}, "reverse_floor must be finite"),
                      ({"reverse_floor": np.zeros(6), "query_penalty": -np.ones(6)}, "query_penalty must be non-neg")):
        with pytest.raises(InputError, match=match):
            run(**kw)
