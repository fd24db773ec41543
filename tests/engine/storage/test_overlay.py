"""OverlayCSR (a stored CSR with rows replaced and appended, the base never copied) read as the
CSR it stands for, and G3RAG's top-k deltas applied over a stored graph."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph.engine.errors import IndexFormatError
from hopgraph.engine.pipelines.g3rag.graph_update import extend_gain_graph
from hopgraph.engine.graphs.views import OverlayCSR
from hopgraph.engine.storage.deltas import apply_topk_deltas, topk_delta
from hopgraph.kernels import call
from hopgraph.kernels.csr import CSR


def random_rows(rng, n_rows: int, n_cols: int, max_len: int = 5) -> list[list[tuple[int, float]]]:
    return [[(int(c), float(rng.random())) for c in rng.integers(0, n_cols, rng.integers(0, max_len + 1))]
            for _ in range(n_rows)]


def as_csr(rows, n_cols: int) -> CSR:
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    indices = np.array([c for r in rows for c, _ in r], np.int32)
    data = np.array([v for r in rows for _, v in r], np.float32)
    return CSR(indptr, indices, data, n_cols)


def stored(tmp_path, g: CSR) -> CSR:
    for name, a in g.arrays().items():
        np.save(tmp_path / f"{name}.npy", a)
    return CSR(*(np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("indptr", "indices", "data")),
               g.n_cols)


def assert_reads_as(g: OverlayCSR, want: CSR, rng) -> None:
    np.testing.assert_array_equal(g.indptr, want.indptr)
    assert g.n_rows == want.n_rows and g.nnz == want.nnz and g.n_cols == want.n_cols
    np.testing.assert_array_equal(np.asarray(g.indices), want.indices)
    np.testing.assert_array_equal(np.asarray(g.data), want.data)
    for name in ("indices", "data"):
        got, ref = getattr(g, name), getattr(want, name)
        pos = rng.integers(0, max(len(ref), 1), (7, 3)) if len(ref) else np.zeros((0,), np.int64)
        np.testing.assert_array_equal(got[pos], ref[pos])
        np.testing.assert_array_equal(got[3:len(ref) - 2], ref[3:len(ref) - 2])
        assert got[5:5].shape == (0,)
    a = g.arrays()
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(a[name], getattr(want, name))


@pytest.mark.parametrize("seed", range(4))
def test_overlay_reads_as_the_csr_it_stands_for(tmp_path, seed):
    rng = np.random.default_rng(seed)
    n, n_cols = 30, 40
    rows = random_rows(rng, n, n_cols)
    base = stored(tmp_path, as_csr(rows, n_cols))
    g = OverlayCSR.over(base, n_cols)
    assert_reads_as(g, as_csr(rows, n_cols), rng)
    for step in range(5):  # replace some rows (empty ones included) and append a few
        replaced = np.sort(rng.choice(len(rows), rng.integers(0, 6), replace=False))
        appended = np.arange(len(rows), len(rows) + rng.integers(0, 4))
        new = random_rows(rng, len(replaced) + len(appended), n_cols)
        if step == 2 and len(new):
            new[0] = []
        which = np.concatenate([replaced, appended]).astype(np.int64)
        part = as_csr(new, n_cols)
        g = g.updated(which, part.indptr, part.indices, part.data)
        for r, row in zip(which.tolist(), new):
            if r < len(rows):
                rows[r] = row
            else:
                rows.append(row)
        assert_reads_as(g, as_csr(rows, n_cols), rng)
        assert g.base is base  # the stored arrays are read, never copied
    assert isinstance(base.indices, np.memmap)


def test_extension_over_a_stored_graph_as_an_overlay_equals_the_plain_one(tmp_path):
    X = clustered_embeddings(220, 16, 5, seed=4)
    pen = np.random.default_rng(4).uniform(0.3, 1.0, len(X)).astype(np.float32)
    old = call("gain_knn", X[:150], k=6, sim_min=0.3, sim_max=0.9, penalty=pen[:150], device="cpu")
    base = stored(tmp_path, old)
    plain = extend_gain_graph(old, X[:190], 150, pen[:190], 6, 0.3, 0.9)
    over = extend_gain_graph(base, X[:190], 150, pen[:190], 6, 0.3, 0.9, as_overlay=True)
    assert isinstance(over, OverlayCSR) and over.base.indices is base.indices and over.base.data is base.data
    assert_reads_as(over, plain, np.random.default_rng(0))
    # a second add over the overlay, and the delta between them applied to the stored graph
    plain2 = extend_gain_graph(plain, X, 190, pen, 6, 0.3, 0.9)
    over2 = extend_gain_graph(over, X, 190, pen, 6, 0.3, 0.9, as_overlay=True)
    assert_reads_as(over2, plain2, np.random.default_rng(1))
    deltas = [topk_delta(old, plain, 150, 190), topk_delta(over, over2, 190, 220)]
    applied = apply_topk_deltas(base, deltas, 220, "g3rag")
    assert isinstance(applied, OverlayCSR) and applied.base is base
    assert_reads_as(applied, plain2, np.random.default_rng(2))


def test_a_delta_with_a_row_both_inserted_and_stored_whole_is_refused(tmp_path):
    rng = np.random.default_rng(3)
    base = stored(tmp_path, as_csr(random_rows(rng, 10, 12), 12))
    z = np.zeros(0, np.int64)
    bad = {"ins_rows": np.array([2]), "ins_keep": np.array([0]), "ins_indptr": np.array([0, 1]),
           "ins_indices": np.array([3], np.int32), "ins_data": np.array([0.5], np.float32),
           "over_rows": np.array([2]), "over_indptr": np.array([0, 0]), "over_indices": z.astype(np.int32),
           "over_data": z.astype(np.float32), "tail_indptr": np.array([0]), "tail_indices": z.astype(np.int32),
           "tail_data": z.astype(np.float32)}
    with pytest.raises(IndexFormatError, match="repeated"):
        apply_topk_deltas(base, [bad], 12, "g3rag")
    bad.update(over_rows=z, over_indptr=np.array([0]), ins_keep=np.array([99]))
    with pytest.raises(IndexFormatError, match="kept counts"):
        apply_topk_deltas(base, [bad], 12, "g3rag")


def test_changed_rows_of_graphs_whose_compared_rows_are_empty():
    from hopgraph.engine.storage.deltas import changed_rows

    g = as_csr([[], [(1, 0.5)], [], []], 4)
    h = as_csr([[], [(1, 0.25)], [], [(0, 1.0)]], 4)
    np.testing.assert_array_equal(changed_rows(g, h, 4), [1, 3])
    empty = as_csr([[], []], 2)
    assert len(changed_rows(empty, empty, 2)) == 0


def test_the_rows_an_overlay_changed_are_found_without_reading_the_others(tmp_path, monkeypatch):
    from hopgraph.engine.storage import deltas

    X = clustered_embeddings(200, 16, 5, seed=6)
    pen = np.random.default_rng(6).uniform(0.3, 1.0, len(X)).astype(np.float32)
    old = stored(tmp_path, call("gain_knn", X[:180], k=6, sim_min=0.3, sim_max=0.9, penalty=pen[:180], device="cpu"))
    new = extend_gain_graph(old, X, 180, pen, 6, 0.3, 0.9, as_overlay=True)
    want = deltas.changed_rows(old, CSR(*new.arrays().values(), 200), 180)
    assert len(want)  # the reverse edges rewrote some rows
    got = deltas.overlay_changed_rows(old, new, 180)  # a plain stored graph and an overlay made over it
    np.testing.assert_array_equal(got, want)
    assert set(got) <= set(new.overridden)
    assert deltas.overlay_changed_rows(CSR(old.indptr, np.array(old.indices), old.data, 180), new, 180) is None
    plain = extend_gain_graph(old, X, 180, pen, 6, 0.3, 0.9)
    compared = []
    real = deltas.changed_rows
    monkeypatch.setattr(deltas, "changed_rows", lambda o, w, n: compared.append(n) or real(o, w, n))
    d = deltas.topk_delta(old, new, 180, 200)
    monkeypatch.undo()
    assert compared == [len(new.overridden[new.overridden < 180])]  # the replaced rows only, not all 180
    applied = apply_topk_deltas(old, [d], 200, "g3rag")
    assert_reads_as(applied, plain, np.random.default_rng(3))
