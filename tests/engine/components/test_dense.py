"""Dense search with IVF candidates rescored exactly, on small data with the threshold
lowered: valid results, exact scores, the ordering rule, filters, live adds, persistence, and
exact search below the threshold unchanged (bit for bit the faiss flat index)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import clustered_embeddings

from hopgraph.engine.components import dense as dm
from hopgraph.engine.components.shared import Components
from hopgraph.engine.components.dense import DenseIndex
from hopgraph.engine.components.exact_search import exact_inner_product_index
from hopgraph.engine.components.ivf import IVFIndex
from hopgraph.engine.errors import IndexFormatError, InputError

#: top-10 overlap with the exact search the IVF must keep on the clustered data below (measured 1.0)
MIN_OVERLAP = 0.95


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    """4,000 clustered rows (d = 32) and 40 queries near rows of X (as questions near passages)."""
    X = clustered_embeddings(4000, 32, 40, seed=3, noise=0.15)
    g = np.random.default_rng(4)
    Q = X[g.choice(len(X), 40, replace=False)] + 0.3 * g.standard_normal((40, 32)).astype(np.float32) / np.sqrt(32)
    return X, (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def low_threshold(monkeypatch):
    """``mode="auto"`` switches to the IVF index from 1,000 rows."""
    monkeypatch.setattr(dm, "ANN_MIN_N", 1000)
    monkeypatch.delenv(dm.DENSE_MODE_ENV, raising=False)


def exact(X: np.ndarray, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: best first, ties toward the lower row, only allowed rows."""
    S = (Q.astype(np.float64) @ X.astype(np.float64).T)
    if allowed is not None:
        S[:, ~allowed] = -np.inf
    order = np.lexsort((np.broadcast_to(np.arange(len(X)), S.shape), -S), axis=1)[:, :k]
    return order, np.take_along_axis(S, order, 1)


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(a, b)]))


def check_valid(X: np.ndarray, Q: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> None:
    """Unique rows per query, their scores exactly Q·X[row], best first, ties toward the lower row."""
    for b in range(len(Q)):
        row = ids[b][ids[b] >= 0]
        assert len(set(row.tolist())) == len(row)
        np.testing.assert_allclose(scores[b, :len(row)], X[row].astype(np.float64) @ Q[b].astype(np.float64),
                                   rtol=1e-6, atol=1e-6)
        s = scores[b, :len(row)]
        assert (np.diff(s) <= 0).all()
        ties = np.flatnonzero(np.diff(s) == 0)
        assert (row[ties] < row[ties + 1]).all()


def test_exact_below_the_threshold_is_the_flat_index_bit_for_bit(data, monkeypatch):
    X, Q = data
    monkeypatch.delenv(dm.DENSE_MODE_ENV, raising=False)
    assert len(X) < dm.ANN_MIN_N
    dense = Components(X).dense
    assert dense.method == "exact"
    ids, scores = dense.topk(Q, 10)
    want_scores, want_ids = exact_inner_product_index(X).search(Q, 10)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(scores, want_scores)
    assert dense._ivf is None


def test_ann_results_are_valid_exactly_rescored_and_overlap_the_exact_top10(data, low_threshold):
    X, Q = data
    dense = DenseIndex(X)
    assert dense.method == "ann"
    ids, scores = dense.topk(Q, 10)
    assert ids.shape == (40, 10) and (ids >= 0).all() and dense.ivf.nlist > 1
    check_valid(X, Q, ids, scores)
    want, _ = exact(X, Q, 10)
    assert overlap(ids, want) >= MIN_OVERLAP
    # the candidates really are approximate: one probed cell of a many-cell index misses rows
    dense.nprobe = 1
    assert overlap(dense.topk(Q, 50)[0], exact(X, Q, 50)[0]) < 1.0


def test_ties_go_to_the_lower_row(data, low_threshold):
    X, _ = data
    X = X.copy()
    X[[700, 90, 3001, 1500]] = X[1500]                  # four identical rows
    Q = X[[1500]]
    ids, scores = DenseIndex(X).topk(Q, 6)
    assert ids[0, :4].tolist() == [90, 700, 1500, 3001]
    assert scores[0, 0] == scores[0, 3]
    check_valid(X, Q, ids, scores)


@pytest.mark.parametrize("fraction", [0.02, 0.3, 0.9])
def test_filters_are_respected_with_k_results(data, low_threshold, fraction):
    X, Q = data
    allowed = np.random.default_rng(5).random(len(X)) < fraction
    ids, scores = DenseIndex(X).topk(Q, 10, allowed)
    assert (ids >= 0).all() and allowed[ids].all()
    check_valid(X, Q, ids, scores)
    assert overlap(ids, exact(X, Q, 10, allowed)[0]) >= MIN_OVERLAP
    # more asked than pass: every passing row, then padding
    k = int(allowed.sum()) + 5
    ids, scores = DenseIndex(X).topk(Q[:3], k, allowed)
    assert ((ids >= 0).sum(1) == allowed.sum()).all()
    assert (ids[:, -5:] == -1).all() and np.isneginf(scores[:, -5:]).all()


def test_a_query_whose_probed_cells_hold_no_passing_row_gets_the_exact_answer(data, low_threshold):
    X, Q = data
    dense = DenseIndex(X, nprobe=1)
    _, cells = dense.ivf.index.quantizer.search(X, 1)
    _, near = dense.ivf.index.quantizer.search(Q[:1], 4)   # the cells probed at nprobe / fraction <= 4
    allowed = ~np.isin(cells[:, 0], near[0])
    assert allowed.mean() > 0.25
    assert (dense.ivf.candidates(Q[:1], 20, 4, allowed) < 0).all()
    ids, scores = dense.topk(Q[:1], 10, allowed)
    want, want_scores = exact(X, Q[:1], 10, allowed)
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-6)


def test_add_extends_the_ivf_index_and_retrains_after_it_doubled(data, low_threshold):
    X, Q = data
    dense = DenseIndex(X[:1500])
    dense.topk(Q, 5)
    ivf = dense.ivf
    assert ivf.ntotal == 1500 and ivf.n_trained == 1500 and len(dense.ivf_builds) == 1
    dense.add(X[:2500], 1500)
    assert dense.ivf is ivf and ivf.ntotal == 2500 and len(dense.ivf_builds) == 1
    ids, _ = dense.topk(X[2000:2010], 1)                 # new rows are found
    assert ids[:, 0].tolist() == list(range(2000, 2010))
    dense.add(X, 2500)                                    # 4,000 > 2 × 1,500: re-trained on next search
    ids, scores = dense.topk(Q, 10)
    assert dense.ivf is not ivf and dense.ivf.n_trained == 4000 and len(dense.ivf_builds) == 2
    check_valid(X, Q, ids, scores)


def test_growing_past_the_threshold_switches_from_the_flat_copy_to_the_ivf(data, monkeypatch):
    X, Q = data
    monkeypatch.setattr(dm, "ANN_MIN_N", 3000)
    monkeypatch.delenv(dm.DENSE_MODE_ENV, raising=False)
    dense = DenseIndex(X[:2000])
    dense.topk(Q, 5)
    assert dense.method == "exact" and dense._index is not None
    dense.add(X, 2000)
    assert dense.method == "ann" and dense._index is None
    ids, scores = dense.topk(Q, 10)
    check_valid(X, Q, ids, scores)
    assert overlap(ids, exact(X, Q, 10)[0]) >= MIN_OVERLAP


def test_modes_parameter_and_environment(data, monkeypatch):
    X, Q = data
    monkeypatch.delenv(dm.DENSE_MODE_ENV, raising=False)
    assert DenseIndex(X).method == "exact" and DenseIndex(X, "ann").method == "ann"
    monkeypatch.setattr(dm, "ANN_MIN_N", 1000)
    assert DenseIndex(X).method == "ann" and DenseIndex(X, "exact").method == "exact"
    monkeypatch.setenv(dm.DENSE_MODE_ENV, "exact")
    assert DenseIndex(X).method == "exact" and Components(X).dense.method == "exact"
    assert Components(X, dense="ann").dense.method == "ann"
    monkeypatch.setenv(dm.DENSE_MODE_ENV, "fast")
    with pytest.raises(InputError, match="HOPGRAPH_DENSE"):
        DenseIndex(X)
    with pytest.raises(InputError, match="dense mode"):
        DenseIndex(X, "approximate")
    ids, scores = DenseIndex(X, "exact").topk(Q[:0], 4)
    assert ids.shape == (0, 4) and DenseIndex(X, "ann").topk(Q[:0], 4)[0].shape == (0, 4)


def test_the_ivf_index_is_saved_with_the_components_and_loaded_validated(data, low_threshold, tmp_path):
    X, Q = data
    comps = Components(X)
    want = comps.dense.topk(Q, 10)
    entry = comps.save(tmp_path)
    assert entry["dense"]["rows"] == len(X) and (tmp_path / "dense-ivf" / "codes.npy").is_file()
    loaded = Components.load(tmp_path, entry, X, None, None, None)
    got = loaded.dense.topk(Q, 10)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert loaded.dense.ivf_builds == []                  # nothing trained after a load
    # exact mode neither reads nor needs it
    assert Components.load(tmp_path, entry, X, None, None, None, dense="exact").dense._ivf is None


def test_saving_builds_the_ivf_index_once_and_only_where_it_is_used(data, low_threshold, tmp_path):
    X, _ = data
    assert "dense" not in Components(X, dense="exact").save(tmp_path / "a")
    comps = Components(X)
    assert comps._dense is None
    comps.save(tmp_path / "b")
    assert len(comps.dense.ivf_builds) == 1
    comps.save(tmp_path / "c")
    assert len(comps.dense.ivf_builds) == 1


@pytest.mark.parametrize("damage", ["ids duplicate", "ids out of range", "centroid nan", "offsets",
                                    "codes shape", "rows", "missing"])
def test_a_damaged_ivf_index_is_refused(data, low_threshold, tmp_path, damage):
    X, _ = data
    comps = Components(X)
    entry = comps.save(tmp_path)
    d = tmp_path / "dense-ivf"

    def edit(name, fn):
        a = np.load(d / f"{name}.npy")
        np.save(d / f"{name}.npy", fn(a))

    if damage == "ids duplicate":
        edit("ids", lambda a: np.concatenate([a[:1], a[:-1]]))
    elif damage == "ids out of range":
        edit("ids", lambda a: np.where(a == 0, len(X), a))
    elif damage == "centroid nan":
        edit("centroids", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, np.nan, a).astype(np.float32))
    elif damage == "offsets":
        edit("offsets", lambda a: a[::-1].copy())
    elif damage == "codes shape":
        edit("codes", lambda a: a[:-1])
    elif damage == "rows":
        entry["dense"]["rows"] = len(X) - 1
    else:
        (d / "sq.npy").unlink()
    with pytest.raises(IndexFormatError):
        Components.load(tmp_path, entry, X, None, None, None)


@pytest.mark.parametrize("bits", [8, 4])
def test_ivf_arrays_round_trip(data, low_threshold, bits):
    X, Q = data
    ivf = IVFIndex.build(X, bits=bits)
    assert ivf.bits == bits and ivf.arrays()["codes"].shape == (len(X), X.shape[1] * bits // 8)
    again = IVFIndex.from_arrays(ivf.arrays(), len(X), X.shape[1], ivf.n_trained, bits=bits)
    assert again.bits == bits
    for nprobe in (1, 3):
        np.testing.assert_array_equal(again.candidates(Q, 30, nprobe), ivf.candidates(Q, 30, nprobe))


def test_4bit_codes_keep_the_exact_rescored_top10(data, low_threshold):
    """Half-width codes only change which rows are proposed: scores stay exact, and the top-10
    overlaps the exact one as the 8-bit codes' does."""
    X, Q = data
    want, _ = exact(X, Q, 10)
    got = {}
    for bits in (8, 4):
        dense = DenseIndex(X, code_bits=bits)
        ids, scores = dense.topk(Q, 10)
        check_valid(X, Q, ids, scores)
        assert dense.ivf.bits == bits
        got[bits] = overlap(ids, want)
    assert got[4] >= MIN_OVERLAP and got[4] >= got[8] - 0.02
    with pytest.raises(ValueError, match="code_bits"):
        DenseIndex(X, code_bits=2)


def test_a_4bit_ivf_is_saved_as_its_kind_and_refused_with_8bit_widths(data, low_threshold, tmp_path):
    X, Q = data
    dense = DenseIndex(X, code_bits=4)
    entry = dense.save_ivf(tmp_path / "ivf")
    assert entry["kind"] == "ivf-sq4"
    loaded = DenseIndex.load(tmp_path / "ivf", entry, X, code_bits=4)
    assert loaded._ivf.bits == 4
    np.testing.assert_array_equal(loaded.topk(Q, 10)[0], dense.topk(Q, 10)[0])
    with pytest.raises(IndexFormatError, match="4-bit"):   # 8-bit-wide codes under a 4-bit kind
        IVFIndex.from_arrays(IVFIndex.build(X).arrays(), len(X), X.shape[1], len(X), bits=4)
    with pytest.raises(IndexFormatError, match="kind"):
        DenseIndex.load(tmp_path / "ivf", {**entry, "kind": "ivf-pq"}, X)


def test_an_index_saved_with_the_ivf_loads_and_searches_the_same(tmp_path, demo_corpus, monkeypatch):
    from hopgraph.index import Index

    monkeypatch.setenv(dm.DENSE_MODE_ENV, "ann")
    X = clustered_embeddings(len(demo_corpus), 16, 4, seed=11)
    built = Index.build(demo_corpus, embeddings=X, pipelines=["dense", "g3rag"], progress=False)
    Q = clustered_embeddings(5, 16, 2, seed=12)
    want = {p: built.search_arrays(Q, pipeline=p, k=4) for p in ("dense", "g3rag")}
    built.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx")
    assert loaded.components.dense.method == "ann" and loaded.components.dense._ivf is not None
    for p in ("dense", "g3rag"):
        ids, scores = loaded.search_arrays(Q, pipeline=p, k=4)
        np.testing.assert_array_equal(ids, want[p][0])
        np.testing.assert_allclose(scores, want[p][1], atol=1e-6)
    assert loaded.components.dense.ivf_builds == []


def test_a_stored_ivf_is_read_on_first_search_and_adds_before_it_keep_their_codes(data, low_threshold, tmp_path):
    """A loaded IVF index reads its lists on first search only; rows added before (a writer that never
    searches) are encoded on their own and stored as a segment's entries; the index then searches
    exactly as one that added them after reading its lists."""
    X, Q = data
    X = X[:2500]  # grown by less than RETRAIN_GROWTH: the cells are kept
    built = DenseIndex(X[:1500], "ann")
    entry = built.save_ivf(tmp_path / "ivf")
    loaded = DenseIndex.load(tmp_path / "ivf", entry, X[:1500], "ann")
    assert loaded._ivf._fill is not None
    loaded.add(X, 1500)
    assert loaded._ivf._fill is not None and loaded._ivf.ntotal == len(X)   # nothing read yet
    eager = DenseIndex.load(tmp_path / "ivf", entry, X[:1500], "ann")
    eager._ivf.index
    eager.add(X, 1500)
    for key, value in eager._ivf.tail_arrays(1500, len(X)).items():
        np.testing.assert_array_equal(loaded._ivf.tail_arrays(1500, len(X))[key], value)
    for a, b in zip(loaded.topk(Q, 10), eager.topk(Q, 10)):
        np.testing.assert_array_equal(a, b)
