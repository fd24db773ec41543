"""The generic helpers on the engine's one CSR type (scipy only as the reference here)."""
import numpy as np
import scipy.sparse as sp

from hopgraph.engine.sparse import (csr_from_keys, csr_from_scipy, join, row_entries, row_normalised, take_rows,
                                    take_rows_once, unit_weights)
from hopgraph.kernels.csr import CSR, check_csr


def random_csr(n_rows: int, n_cols: int, seed: int) -> sp.csr_matrix:
    m = sp.random(n_rows, n_cols, density=0.2, random_state=seed, format="csr", dtype=np.float32)
    m.data += 0.5
    return m


def test_csr_from_scipy_keeps_the_arrays_and_round_trips():
    m = random_csr(7, 5, 0)
    g = csr_from_scipy(m)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32 and g.data.dtype == np.float32
    assert g.n_rows == 7 and g.n_cols == 5
    np.testing.assert_array_equal(g.to_scipy().toarray(), m.toarray())
    assert csr_from_scipy(m.astype(np.float64), np.float64).data.dtype == np.float64
    empty = csr_from_scipy(sp.csr_matrix((3, 4), dtype=np.float32))
    assert empty.nnz == 0 and empty.n_rows == 3 and empty.n_cols == 4


def test_take_rows_is_scipys_row_selection():
    m = random_csr(9, 6, 1)
    g = csr_from_scipy(m)
    for rows in ([], [3], [8, 0, 3, 3], list(range(9))[::-1]):
        got = take_rows(g, np.array(rows, np.int64))
        want = m[np.array(rows, np.int64)] if rows else sp.csr_matrix((0, 6), dtype=np.float32)
        assert got.n_rows == len(rows) and got.n_cols == 6
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)


def test_take_rows_once_reads_each_distinct_row_once_and_equals_take_rows():
    g = csr_from_scipy(random_csr(9, 6, 2))
    read = []

    class Counting:
        def __init__(self, values):
            self.values = values

        def __getitem__(self, pos):
            read.extend(np.asarray(pos).ravel().tolist())
            return self.values[pos]

    counted = CSR(g.indptr, Counting(g.indices), g.data, g.n_cols)
    for rows in ([], [3], [8, 0, 3, 3, 8, 8], [5, 5, 5], list(range(9))[::-1]):
        read.clear()
        got, want = take_rows_once(counted, np.array(rows, np.int64)), take_rows(g, np.array(rows, np.int64))
        for a, b in zip(got[:3], want[:3]):
            np.testing.assert_array_equal(a, b)
        assert got.indices.dtype == want.indices.dtype and len(read) == len(set(read))


def test_row_entries_and_keys():
    indptr, order = csr_from_keys(np.array([2, 0, 2, 1, 0]), 4)
    assert indptr.tolist() == [0, 2, 3, 5, 5] and order.tolist() == [1, 4, 3, 0, 2]
    seg, values = row_entries(indptr, order, np.array([2, 3, 0]))
    assert seg.tolist() == [0, 0, 2, 2] and values.tolist() == [0, 2, 1, 4]


def test_row_normalised_rows_sum_to_one_or_stay_zero():
    g = csr_from_scipy(random_csr(8, 8, 2))
    g = CSR(g.indptr, g.indices, g.data, g.n_cols)
    sums = np.asarray(row_normalised(g).to_scipy().sum(1)).ravel()
    has = np.diff(g.indptr) > 0
    np.testing.assert_allclose(sums[has], 1.0, rtol=1e-6)
    assert (sums[~has] == 0).all()


def test_join_and_unit_weights():
    pos, found = join(np.array([2, 5, 9]), np.array([[5, 1], [9, 10]]))
    assert pos.tolist() == [[1, 0], [2, 0]] and found.tolist() == [[True, False], [True, False]]
    assert join(np.zeros(0, np.int64), np.array([1]))[1].tolist() == [False]
    w = unit_weights(4)
    assert w.tolist() == [1.0] * 4 and not w.flags.writeable
    assert check_csr(np.array([0, 2, 4]), np.array([0, 1, 1, 0]), w, 2).nnz == 4
