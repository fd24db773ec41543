"""STITCH's activation (SPEC §2 step 1) on the device (:mod:`hopgraph.engine.pipelines.stitch.activation`):
the threshold and the text → states expansion on torch equal the host's on the same lists, both equal
a loop over the definition; an index on a device store searches its description texts, activates and
scores its states there — the questions and BM25's query side in, the top-k ids and scores out — with
the host path's activations, influence and rankings (ids equal up to float near-ties, counted), for
every variant of the activation; a question's results do not depend on its batch; and where the
store refuses the text → states CSR the activation runs on the host as before."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hopgraph import HashingEmbedder, Index
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.graphs.device_store import DeviceStore
from hopgraph.engine.graphs.store import LocalStore
from hopgraph.engine.index import IndexReader
from hopgraph.engine.pipelines.stitch.activation import MIN_BEST, activated, activated_tensors
from hopgraph.kernels.transfers import counting_transfers

from ranking_asserts import assert_same_up_to_ties

QUESTIONS = DEMO_QUESTIONS[:6]
#: the activation's variants: thresholds, channels, the unlocalised walk, dense relevance, as published
#: (absolute δ 0.4: some demo questions activate states, others none; 0.5: none does)
SOME_ACTIVATE = {"delta_mode": "absolute", "delta": 0.4}
VARIANTS = [{}, {"delta_mode": "absolute", "delta": 0.5}, SOME_ACTIVATE, {"delta_mode": "absolute", "delta": 0.2},
            {"delta": 0.5}, {"spatial": False}, {"temporal": False}, {"spatial": False, "temporal": False},
            {"localise": False}, {"relevance": "dense"}, {"published": True}]
IDS = [",".join(f"{k}={v}" for k, v in p.items()) or "defaults" for p in VARIANTS]


def by_definition(ids, sims, indptr, nodes, delta, mode):
    """The activated ``(row, state, A)`` triples by a loop over step 1's definition."""
    out = []
    for b in range(len(ids)):
        thr = np.float32(delta) * max(sims[b, 0], np.float32(MIN_BEST)) if mode == "relative" else np.float32(delta)
        for j in range(ids.shape[1]):
            if ids[b, j] >= 0 and sims[b, j] >= thr and sims[b, j] > 0:
                out += [(b, int(v), sims[b, j]) for v in nodes[indptr[ids[b, j]]:indptr[ids[b, j] + 1]]]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_activation_on_tensors_equals_the_host_and_the_definition(seed):
    """Random description lists with padding, ties, negative and zero similarities, a row under
    ``MIN_BEST``, an empty row, texts describing no state or several: the same triples, in the same
    order, from NumPy, torch and the definition."""
    rng = np.random.default_rng(seed)
    n_texts, B, depth = 12, 5, 6
    counts = rng.integers(0, 4, n_texts)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    nodes = rng.permutation(int(indptr[-1])).astype(np.int64)
    ids = np.stack([rng.permutation(n_texts)[:depth] for _ in range(B)]).astype(np.int64)
    sims = -np.sort(-rng.choice([-0.3, 0.0, 0.2, 0.5, 0.5, 0.7, 0.9], (B, depth)), axis=1).astype(np.float32)
    ids[1, 4:], sims[1, 4:] = -1, -np.inf  # padding
    ids[2], sims[2] = -1, -np.inf  # nothing listed
    sims[3] = np.float32(1e-7)  # a best under MIN_BEST
    for mode, delta in (("relative", 0.8), ("relative", 1.0), ("absolute", 0.5), ("absolute", -0.5)):
        want = by_definition(ids, sims, indptr, nodes, delta, mode)
        host = activated(ids, sims, indptr, nodes, delta, mode)
        dev = activated_tensors(*(torch.from_numpy(a) for a in (ids, sims, indptr, nodes)), delta, mode)
        assert [d.dtype for d in dev] == [torch.int64, torch.int64, torch.float32]
        for h, d in zip(host, dev):
            np.testing.assert_array_equal(d.numpy(), h)
        assert list(zip(*(a.tolist() for a in host))) == [(b, v, float(a)) for b, v, a in want], (mode, delta)


@pytest.fixture(scope="module")
def readers(tmp_path_factory):
    embedder = HashingEmbedder(64)
    index = Index.build(demo_corpus(), embedder=embedder, pipelines=["stitch"], progress=False)
    path = tmp_path_factory.mktemp("activation") / "index"
    index.save(path)
    files = IndexReader.open(path, embedder, device="cpu", graphs=LocalStore())
    resident = IndexReader.open(path, embedder, device="cpu", graphs=DeviceStore("cpu"))
    yield files, resident, embedder
    files.close()
    resident.close()


def search_params(pipe, params: dict):
    """The pipeline's search parameters with ``params`` (``published``: its published values)."""
    params = dict(params)
    if params.pop("published", False):
        params = pipe.SearchParams.published_values()
    return dataclasses.replace(pipe.search_defaults, **params)


def filters(n: int) -> list:
    return [None, np.arange(n) % 3 != 0, np.arange(n) == 5]


@pytest.mark.parametrize("params", VARIANTS, ids=IDS)
def test_device_activation_equals_the_host(readers, params):
    """The activated triples and the influence they give (steps 1–5) equal the host path's: the
    same states, activations within rounding; a question similar to no text (a zero vector)
    activates nothing, on either path."""
    files, resident, embedder = readers
    questions = QUESTIONS + ["zzzz qqqq", "zero"]
    Q = embedder.encode(questions)
    Q[-1] = 0.0
    host_pipe, dev_pipe = files.content.pipelines["stitch"], resident.content.pipelines["stitch"]
    p = search_params(host_pipe, params)
    for allowed in filters(len(files.content.components.X)):
        host_batch = files.content.components.batch(Q, questions, allowed)
        dev_batch = resident.content.components.batch(Q, questions, allowed)
        assert host_batch.device is None and dev_batch.device is not None
        want = host_pipe._activation(host_batch, p, on_device=False)
        got = dev_pipe._activation(dev_batch, p, on_device=True)
        assert all(isinstance(g, torch.Tensor) for g in got)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])
        np.testing.assert_allclose(got[2].numpy(), want[2], rtol=0, atol=1e-6)
        assert len(Q) - 1 not in want[0].tolist()
        if params == SOME_ACTIVATE:  # rows with no activated state beside rows with some: walked apart
            assert 0 < len(set(want[0].tolist())) < len(QUESTIONS)
        I_host, I_dev = host_pipe.influence(host_batch, p), dev_pipe.influence(dev_batch, p)
        np.testing.assert_array_equal(I_dev.cols, I_host.cols)
        np.testing.assert_allclose(I_dev.values, I_host.values, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("params", VARIANTS, ids=IDS)
def test_device_search_ranks_as_the_host(readers, params):
    """Rankings with the activation on the device equal the host path's: ids equal, scores within
    rounding (near-ties at 1e-6 may swap: none does on the demo corpus), with filters and a
    question that activates nothing (searched again apart)."""
    files, resident, _ = readers
    params = dict(params)
    if params.pop("published", False):
        params = files.content.pipelines["stitch"].SearchParams.published_values()
    swapped = 0
    for allowed in filters(len(files.content.components.X)):
        questions = QUESTIONS + ["zzzz qqqq"]
        want_ids, want_scores = files.search(questions, 10, "stitch", allowed=allowed, **params)
        ids, scores = resident.search(questions, 10, "stitch", allowed=allowed, **params)
        for b in range(len(ids)):
            assert_same_up_to_ties(ids[b], scores[b], want_ids[b], want_scores[b], 1e-6, f"row {b} {params}")
            swapped += not np.array_equal(ids[b], want_ids[b])
    assert swapped == 0


def test_device_activation_rows_do_not_depend_on_their_batch(readers):
    """Each question of a batch on the device — one activating nothing among them — gets what it gets
    alone, with and without a filter, with either threshold."""
    _, resident, _ = readers
    n = len(resident.content.components.X)
    questions = QUESTIONS[:3] + ["zzzz qqqq"] + QUESTIONS[3:5]
    for params in ({}, SOME_ACTIVATE):
        for allowed in (None, np.arange(n) % 4 != 1):
            ids, scores = resident.search(questions, 10, "stitch", allowed=allowed, **params)
            for b, question in enumerate(questions):
                one_ids, one_scores = resident.search([question], 10, "stitch", allowed=allowed, **params)
                np.testing.assert_array_equal(ids[b], one_ids[0], err_msg=f"row {b} {params}")
                np.testing.assert_allclose(scores[b], one_scores[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("params", [{}, {"localise": False}, {"relevance": "dense"}, {"spatial": False}],
                         ids=["defaults", "localise=False", "relevance=dense", "spatial=False"])
def test_a_device_batch_moves_only_the_questions_in_and_the_top_k_out(readers, params):
    """With the activation on the device a STITCH batch takes in the questions (and BM25's query side
    for the hybrid relevance) and gives back the top-k ids and scores: 2 / 2 (1 / 2 dense)."""
    _, resident, _ = readers
    resident.search(QUESTIONS, 10, "stitch", **params)  # the held structures move on first use
    with counting_transfers() as count:
        resident.search(QUESTIONS, 10, "stitch", **params)
    names = [c.name for c in count.to_device]
    assert names == ["questions"] + (["bm25 query postings"] if params.get("relevance") != "dense" else [])
    assert count.dtoh == 2


def test_a_refused_text_csr_activates_on_the_host(readers, monkeypatch):
    """Where the store does not hold the text → states CSR (over its budget), the description lists
    come back and the activated pairs go in, as before; the rankings are the same."""
    files, resident, _ = readers
    store = resident.content.components.graphs
    place = store.place
    monkeypatch.setattr(store, "place", lambda arrays, component, names:
                        None if component == "stitch text_nodes" else place(arrays, component, names))
    want_ids, want_scores = files.search(QUESTIONS, 10, "stitch")
    with counting_transfers() as count:
        ids, scores = resident.search(QUESTIONS, 10, "stitch")
    assert {"activated (row, state) pairs", "activations"} <= {c.name for c in count.to_device}
    assert count.dtoh == 4  # the description lists, then the top-k
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-6)
