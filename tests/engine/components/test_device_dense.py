"""The dense search on the device (:mod:`hopgraph.engine.components.device_dense`), on a
:class:`DeviceStore` of CPU tensors (the CUDA path differs only by the device string): X placed once
(an array, a memory-mapped ``.npy``, the parts of several segments), the lists equal to the host
search's (faiss) — ids equal but for counted near-ties, scores within float rounding — with and
without a filter, k > N; the tensor and host forms sharing one list per batch, only the questions in
and the ids and scores out; a question's lists independent of its batch; X refused by the budget: a
warning naming it and the host search, bit for bit."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from hopgraph.engine.components.device_dense import DeviceDenseSearch, held_rows
from hopgraph.engine.components.shared import Components
from hopgraph.engine.graphs.device_store import DeviceMemoryWarning, DeviceStore
from hopgraph.engine.storage import StackedRows
from hopgraph.kernels.transfers import counting_transfers

from ranking_asserts import assert_same_up_to_ties


def unit_rows(rng: np.random.Generator, n: int, d: int = 32) -> np.ndarray:
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def assert_lists_match(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray]) -> int:
    """The device lists equal the host's up to near-ties (scores within 1e-5); returns how many
    positions hold another id (near-tie swaps), which stays small."""
    for b in range(len(want[0])):
        assert_same_up_to_ties(got[0][b], got[1][b], want[0][b], want[1][b], 1e-5, f"row {b}")
    return int((got[0] != want[0]).sum())


@pytest.fixture
def data(rng):
    X = unit_rows(rng, 3000)
    X[2000:2005] = X[17]  # exact duplicates: ties toward the lower row on both paths
    return X, unit_rows(rng, 40)


@pytest.mark.parametrize("k", [1, 10, 128])
@pytest.mark.parametrize("filtered", ["none", "wide", "narrow", "nothing"])
def test_device_lists_equal_the_host_search(data, k, filtered):
    X, Q = data
    allowed = {"none": None, "wide": np.arange(len(X)) % 3 != 0, "narrow": np.arange(len(X)) % 97 == 5,
               "nothing": np.zeros(len(X), bool)}[filtered]
    host = Components(X).batch(Q, None, allowed).dense_topk(k)
    device = Components(X, graphs=DeviceStore("cpu")).batch(Q, None, allowed)
    assert device.dense_on_device() is not None
    got = device.dense_topk(k)
    assert got[0].dtype == np.int64 and got[1].dtype == np.float32
    assert assert_lists_match(got, host) <= len(Q)  # a near-tie swap at most per question, if any
    duplicates = {17, 2000, 2001, 2002, 2003, 2004}
    for ids in got[0]:  # equal scores toward the lower row
        listed = [i for i in ids.tolist() if i in duplicates]
        assert listed == sorted(listed)


def test_k_beyond_the_rows_pads_as_the_host(rng):
    X, Q = unit_rows(rng, 7), unit_rows(rng, 3)
    host = Components(X).batch(Q, None).dense_topk(10)
    got = Components(X, graphs=DeviceStore("cpu")).batch(Q, None).dense_topk(10)
    assert (got[0][:, 7:] == -1).all() and np.isneginf(got[1][:, 7:]).all()
    assert_lists_match(got, host)


def test_one_list_per_batch_questions_in_ids_and_scores_out(data):
    X, Q = data
    batch = Components(X, graphs=DeviceStore("cpu")).batch(Q, None, np.arange(len(X)) % 2 == 0)
    batch.dense_on_device()  # X placed (once per store, not per batch)
    with counting_transfers() as count:
        ids_t, scores_t = batch.dense_topk_tensors(50)
        assert isinstance(ids_t, torch.Tensor) and ids_t.shape == (len(Q), 50)
        ids, scores = batch.dense_topk(20)  # the same list, brought back once
        batch.dense_topk(50)
        batch.dense_topk_tensors(10)
    assert [c.name for c in count.to_device] == ["questions", "filter"] and count.dtoh == 2
    np.testing.assert_array_equal(ids, ids_t[:, :20].numpy())
    np.testing.assert_array_equal(scores, scores_t[:, :20].numpy())
    with counting_transfers() as count:  # other query vectors under the batch's filter: they go in, lists out
        of = batch.dense_topk_of(Q[:5] * -1, 8)
    assert [c.name for c in count.to_device] == ["query vectors"] and count.dtoh == 2
    assert_lists_match(of, Components(X).batch(Q, None, np.arange(len(X)) % 2 == 0).dense_topk_of(Q[:5] * -1, 8))


def test_a_question_does_not_depend_on_its_batch(data):
    X, Q = data
    components = Components(X, graphs=DeviceStore("cpu"))
    together = components.batch(Q, None).dense_topk(20)
    for b in (0, 13, len(Q) - 1):
        alone = components.batch(Q[b:b + 1], None).dense_topk(20)
        assert_same_up_to_ties(alone[0][0], alone[1][0], together[0][b], together[1][b], 1e-6, f"row {b}")


def test_memory_mapped_and_stacked_rows_are_placed_once(data, tmp_path):
    X, Q = data
    np.save(tmp_path / "X.npy", X)
    mapped = np.load(tmp_path / "X.npy", mmap_mode="r")
    want = Components(X).batch(Q, None).dense_topk(15)
    for rows in (mapped, StackedRows([mapped[:1000], mapped[1000:2500], mapped[2500:]])):
        store = DeviceStore("cpu")
        components = Components(rows, graphs=store)
        for _ in range(2):
            got = components.batch(Q, None).dense_topk(15)
            assert_lists_match(got, want)
        n_parts = 1 if isinstance(rows, np.ndarray) else 3
        assert [name for name, _ in store.placed] == ["dense X"] * n_parts and store.used == X.nbytes
        assert len(held_rows(store, rows, "dense X")) == n_parts


def test_x_refused_by_the_budget_is_searched_on_the_host(data):
    X, Q = data
    allowed = np.arange(len(X)) % 5 != 1
    store = DeviceStore("cpu", budget=X.nbytes - 1)
    batch = Components(X, graphs=store).batch(Q, None, allowed)
    with pytest.warns(DeviceMemoryWarning, match="dense X"):
        assert batch.dense_on_device() is None
    got = batch.dense_topk(12)
    want = Components(X).batch(Q, None, allowed).dense_topk(12)
    np.testing.assert_array_equal(got[0], want[0])  # the host search itself: bit for bit
    np.testing.assert_array_equal(got[1], want[1])
    assert store.refused == [("dense X", X.nbytes)] and store.placed == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per component
        assert Components(X, graphs=store).batch(Q, None).dense_on_device() is None


def test_without_a_device_store_nothing_crosses(data):
    X, Q = data
    batch = Components(X).batch(Q, None)
    assert batch.device is None and batch.dense_on_device() is None
    with counting_transfers() as count:
        batch.dense_topk(10)
    assert count.htod == count.dtoh == 0


def test_a_fixed_mask_is_held_and_combined_with_the_filter(data):
    X, Q = data
    store = DeviceStore("cpu")
    mask = np.arange(len(X)) % 2 == 1
    search = DeviceDenseSearch.held(store, X, "texts", mask)
    allowed = np.arange(len(X)) % 3 == 0
    got = search.topk(Q, 9, allowed)
    want = Components(X).batch(Q, None, mask & allowed).dense_topk(9)
    assert_lists_match(got, want)
    assert {name for name, _ in store.placed} == {"texts", "texts mask"}
    with pytest.warns(DeviceMemoryWarning, match="texts"):
        assert DeviceDenseSearch.held(DeviceStore("cpu", budget=0), X, "texts") is None


def test_stitch_description_match_on_the_device_equals_the_text_index(tmp_path):
    """STITCH's activation (SPEC §2 step 1) searches the text embeddings the store holds, under the
    mask of the description texts: the same lists as its text index, up to near-ties."""
    from hopgraph import HashingEmbedder, Index
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
    from hopgraph.engine.index import IndexReader

    embedder = HashingEmbedder(64)
    Index.build(demo_corpus(), embedder=embedder, pipelines=["stitch"], progress=False).save(tmp_path / "i")
    store = DeviceStore("cpu")
    reader = IndexReader.open(tmp_path / "i", embedder, device="cpu", graphs=store)
    try:
        stitch = reader.content.pipelines["stitch"]
        Q = embedder.encode(DEMO_QUESTIONS)
        t = stitch._index_arrays()
        depth = min(32, t["n_node_texts"])
        batch = reader.content.components.batch(Q, DEMO_QUESTIONS)
        stitch._description_topk(batch, depth, t)  # the text embeddings and the mask placed, once
        batch = reader.content.components.batch(Q, DEMO_QUESTIONS)
        with counting_transfers() as count:
            got = stitch._description_topk(batch, depth, t)
        assert [c.name for c in count.to_device] == ["questions"] and count.dtoh == 2
        assert_lists_match(got, t["text_index"].topk(Q, depth, t["node_text_mask"]))
        held = {name for name, _ in store.placed}
        assert "stitch text_emb" in held and ("stitch text_emb mask" in held) == (t["node_text_mask"] is not None)
    finally:
        reader.close()
