"""G3RAG's search on the device (:mod:`hopgraph.engine.pipelines.g3rag.device_search`), on CPU tensors
(a :class:`DeviceStore` of the CPU: the CUDA path differs by the device string): both scorings,
``expand``, the filters, dense and hybrid seeds, against the host path of an index on its own files
(ids equal up to counted float near-ties, scores within rounding); what crosses per batch; a
question's results do not depend on its batch; the host path never touches torch; each device step
against its host counterpart; the ``sparse_diffusion`` op's ``entries=True`` (CPU and Triton under
the interpreter) against its dense result."""
from __future__ import annotations


import numpy as np
import pytest
import torch
from conftest import open_pair, shared_sample

from hopgraph import HashingEmbedder, Index
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.errors import InputError
from hopgraph.engine.graphs.device_store import DeviceMemoryWarning, DeviceStore
from hopgraph.engine.pipelines.g3rag import device_search as ds
from hopgraph.engine.pipelines.g3rag.masked import DIFFUSED, FILL, SEED, tiered_ranking
from hopgraph.engine.pipelines.g3rag.name_links import ChunkNames, name_link_diffusion
from hopgraph.engine.ranking import topk_entries
from hopgraph.engine.ranking_tensors import topk_entries_tensors
from hopgraph.kernels import call, use_backend
from hopgraph.kernels.transfers import counting_transfers

from ranking_asserts import assert_same_up_to_ties

#: the searches compared: both scorings, expand, the ablations that switch steps off, hybrid seeds
VARIANTS = [{}, {"expand": True}, {"bridge": 0.0}, {"expand": True, "bridge": 0.0}, {"name_links": 0.0},
            {"gamma": 0.0}, {"bm25_weight": 0.0}, {"title_links": 0.0}, {"candidate_depth": 3, "bridge": 0.0},
            {"scoring": "mask"}, {"scoring": "mask", "seed_source": "hybrid"}, {"scoring": "mask", "n_seeds": 1}]
IDS = ["-".join(f"{k}={v}" for k, v in p.items()) or "default" for p in VARIANTS]
#: scores within float rounding (the dense search's products and the softmax's sums are torch's: a few
#: 1e-7, then scaled up by the title bridge's min-max normalisation); as test_batch_independence.py
ATOL = 1e-5


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    embedder = HashingEmbedder(64)
    path = tmp_path_factory.mktemp("g3rag_device") / "index"
    Index.build(demo_corpus(), embedder=embedder, pipelines=["g3rag"], progress=False).save(path)
    files, resident = open_pair(path, embedder)
    yield path, embedder, files, resident
    files.close()
    resident.close()


def filters(n: int) -> dict[str, np.ndarray | None]:
    every_third = np.ones(n, bool)
    every_third[::3] = False
    few = np.zeros(n, bool)
    few[[1, 4]] = True
    return {"all": None, "every_third": every_third, "two_passages": few}


def near_tie_swaps(ids, scores, want_ids, want_scores, where: str) -> int:
    """Rows whose ids differ from the host's (each only within a float near-tie: asserted)."""
    swaps = 0
    for b in range(len(ids)):
        assert_same_up_to_ties(ids[b], scores[b], want_ids[b], want_scores[b], ATOL, f"{where} row {b}")
        swaps += not np.array_equal(ids[b], want_ids[b])
    return swaps


@pytest.mark.parametrize("params", VARIANTS, ids=IDS)
def test_device_search_equals_the_host_path(demo, params):
    _, _, files, resident = demo
    questions = DEMO_QUESTIONS * 2
    for label, allowed in filters(30).items():
        kw = dict(params, **({} if allowed is None else {"allowed": allowed}))
        want_ids, want_scores = files.search(questions, 10, "g3rag", **kw)
        resident.search(questions, 10, "g3rag", **kw)  # W, the embeddings, the names move on first use
        with counting_transfers() as count:
            ids, scores = resident.search(questions, 10, "g3rag", **kw)
        assert near_tie_swaps(ids, scores, want_ids, want_scores, f"{params} {label}") == 0  # none on the demo
        # it ran on the device: the questions (and BM25's query side, the filter) in, the top-k ids and
        # scores out; nothing of W, X or the names (hybrid seeds: the two lists fused there too)
        hybrid = params.get("seed_source") == "hybrid"
        assert count.dtoh == 2
        lexical = params.get("scoring") != "mask" and params.get("bm25_weight") != 0.0 or hybrid
        want = ["questions"] + ["filter"] * (allowed is not None) + ["bm25 query postings"] * lexical
        assert [c.name for c in count.to_device] == want
        if allowed is not None:
            assert not set(ids[ids >= 0].tolist()) - set(np.flatnonzero(allowed).tolist())


def test_questions_in_top_k_out(demo):
    """With the dense and BM25 searches on the device, a batch moves the questions (and BM25's query
    side) in and the top-k ids and scores out."""
    _, _, _, resident = demo
    for params, crossing in (({}, ["questions", "bm25 query postings"]),
                             ({"expand": True}, ["questions", "bm25 query postings"]),
                             ({"bm25_weight": 0.0}, ["questions"]), ({"scoring": "mask"}, ["questions"])):
        resident.search(DEMO_QUESTIONS, 10, "g3rag", **params)
        with counting_transfers() as count:
            resident.search(DEMO_QUESTIONS, 10, "g3rag", **params)
        assert [c.name for c in count.to_device] == crossing and count.dtoh == 2


def test_the_host_path_never_touches_torch_and_a_refused_graph_stays_there(demo):
    path, embedder, files, _ = demo
    with counting_transfers() as count:
        want = files.search(DEMO_QUESTIONS, 10, "g3rag", expand=True)
    assert (count.htod, count.dtoh) == (0, 0)
    with pytest.warns(DeviceMemoryWarning) as warned:
        _, refused = open_pair(path, embedder, DeviceStore("cpu", budget=0))
        with counting_transfers() as count:
            got = refused.search(DEMO_QUESTIONS, 10, "g3rag", expand=True)
    refused.close()
    said = " ".join(str(w.message) for w in warned)  # each refused structure named
    assert "g3rag" in said and "dense X" in said and "bm25 postings" in said
    assert (count.htod, count.dtoh) == (0, 0)  # over the budget: the host path, bit for bit
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("params", [{}, {"expand": True}, {"scoring": "mask"}], ids=["fused", "expand", "mask"])
def test_a_question_on_the_device_does_not_depend_on_its_batch(demo, params):
    _, _, _, resident = demo
    questions = DEMO_QUESTIONS + ["", "zzzz qqqq"]
    ids, scores = resident.search(questions[::-1], 10, "g3rag", **params)
    for pos, q in enumerate(questions[::-1]):
        one_ids, one_scores = resident.search([q], 10, "g3rag", **params)
        # the dense search's products differ with the batch's width in the last bits (as on the host)
        assert_same_up_to_ties(ids[pos], scores[pos], one_ids[0], one_scores[0], ATOL, q)


def test_the_triton_diffusion_in_the_device_search(demo):
    """The device search with the Triton backend (interpreted on CPU tensors) equals the CPU backend's."""
    _, _, _, resident = demo
    for params in ({}, {"expand": True}, {"scoring": "mask"}):
        want = resident.search(DEMO_QUESTIONS, 10, "g3rag", **params)
        with use_backend("triton"):
            got = resident.search(DEMO_QUESTIONS, 10, "g3rag", **params)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_a_writable_index_on_the_device_before_and_after_an_add(tmp_path):
    """An index loaded with the device store (the forced Triton backend on the CPU chooses one of CPU
    tensors) searches on the device; after an add its stored W is an overlay, searched on the host
    with nothing placed: equal to an index on its own files throughout."""
    embedder, corpus = HashingEmbedder(64), demo_corpus()
    Index.build(corpus.take(np.arange(20)), embedder=embedder, pipelines=["g3rag"], progress=False).save(tmp_path / "i")
    host = Index.load(tmp_path / "i", embedder, device="cpu")
    with use_backend("triton"):
        device = Index.load(tmp_path / "i", embedder, device="cpu")
    assert isinstance(device.components.graphs, DeviceStore)
    for added in (False, True):
        if added:
            for index in (host, device):
                index.add(corpus.take(np.arange(20, 30)))
        for params in ({}, {"expand": True}, {"scoring": "mask"}):
            want = host.search(DEMO_QUESTIONS, "g3rag", k=10, **params)
            with counting_transfers() as count:
                got = device.search(DEMO_QUESTIONS, "g3rag", k=10, **params)
            assert [[h.id for h in row] for row in got] == [[h.id for h in row] for row in want]
            if added:  # W not placed: the host path (the dense and BM25 lists still come from the device)
                assert not [c for c in count.to_device if "g3rag" in c.name]
            else:
                assert count.dtoh == 2


@pytest.mark.slow
def test_device_search_on_hotpotqa(tmp_path):
    corpus, questions = shared_sample("hotpotqa")
    embedder = HashingEmbedder(64)
    Index.build(corpus, embedder=embedder, pipelines=["g3rag"], progress=False).save(tmp_path / "index")
    files, resident = open_pair(tmp_path / "index", embedder)
    swaps = {}
    for params, name in zip(VARIANTS, IDS):
        want_ids, want_scores = files.search(questions, 10, "g3rag", **params)
        ids, scores = resident.search(questions, 10, "g3rag", **params)
        swaps[name] = near_tie_swaps(ids, scores, want_ids, want_scores, name)
    allowed = filters(len(corpus))["every_third"]
    for params in ({}, {"expand": True}, {"scoring": "mask", "seed_source": "hybrid"}):
        want_ids, want_scores = files.search(questions, 10, "g3rag", allowed=allowed, **params)
        ids, scores = resident.search(questions, 10, "g3rag", allowed=allowed, **params)
        swaps[f"{params} filtered"] = near_tie_swaps(ids, scores, want_ids, want_scores, f"{params} filtered")
    files.close()
    resident.close()
    print("near-tie swaps (rows of 100):", swaps)
    assert sum(swaps.values()) <= 2, swaps  # counted; each is a tie within ATOL (asserted above)


# ---------------------------------------------------------------- each step against the host's
def test_topk_entries_on_tensors_equals_the_host(rng):
    for _ in range(20):
        P, B, k = int(rng.integers(0, 60)), int(rng.integers(1, 5)), int(rng.integers(1, 8))
        query = rng.integers(0, B, P)
        column = rng.permutation(200)[:P]
        score = rng.choice(np.array([0.5, 0.25, -np.inf, np.nan, 1.0, 0.0, np.inf], np.float32), P)
        want = topk_entries(query, column, score, B, k)
        got = topk_entries_tensors(*(torch.from_numpy(np.asarray(a)) for a in (query, column, score)), B, k)
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_tiered_ranking_on_tensors_equals_the_host(rng):
    for _ in range(20):
        B, k = int(rng.integers(1, 4)), int(rng.integers(0, 7))
        parts = [(rng.integers(-1, 9, (B, int(rng.integers(0, 5)))), rng.random((B, 1)).astype(np.float32)
                  * np.ones((1, 1), np.float32), tier) for tier in (SEED, DIFFUSED, FILL)]
        parts = [(ids, np.broadcast_to(s, ids.shape).copy(), tier) for ids, s, tier in parts]
        want = tiered_ranking(parts, k)
        got = ds.tiered_ranking_tensors([(torch.from_numpy(i), torch.from_numpy(s), t) for i, s, t in parts], k)
        np.testing.assert_array_equal(got[0].numpy(), want.ids)
        np.testing.assert_array_equal(got[1].numpy(), want.ordering_scores())


def test_name_links_on_tensors_equal_the_host_bit_for_bit(rng):
    n, v = 40, 12
    counts = rng.integers(0, 5, n)
    indptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
    names = np.concatenate([np.sort(rng.choice(v, c, replace=False)) for c in counts]).astype(np.int64)
    idf = rng.random(v) * 3
    title = np.where(rng.random(n) < 0.5, rng.integers(0, v, n), -1).astype(np.int64)
    chunk_names = ChunkNames(indptr, names, idf, title)
    cand = np.stack([rng.permutation(n)[:8] for _ in range(5)])
    cand[1, 5:] = -1
    cand[3] = -1
    p = rng.random(cand.shape).astype(np.float32) * (cand >= 0)
    held = tuple(torch.from_numpy(a) for a in (indptr, names, idf, title))
    for weight in (0.0, 2.0):
        want = name_link_diffusion(chunk_names, cand, p, weight)
        got = ds.name_link_diffusion_tensors(held, torch.from_numpy(cand), torch.from_numpy(p), weight)
        np.testing.assert_array_equal(got.numpy(), want)


# ---------------------------------------------------------------- the op's entries
def adversarial_graph(rng, n: int = 50, k: int = 6):
    indptr = np.r_[0, np.cumsum(rng.integers(0, k, n))].astype(np.int64)
    indptr[8:] -= indptr[8] - indptr[7]  # row 7 empty (an isolated node)
    indices = rng.integers(0, n, indptr[-1]).astype(np.int32)
    data = rng.random(indptr[-1]).astype(np.float32)
    data[indptr[3]:indptr[4]] = 0.0  # a zero-sum row
    return indptr, indices, data


@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_sparse_diffusion_entries_are_the_dense_results_nonzero_pairs(rng, backend):
    n = 50
    indptr, indices, data = adversarial_graph(rng, n)
    seeds = np.array([[0, 3, -1], [5, 6, 7], [-1, -1, -1], [3, -1, -1], [9, 9, 2], [7, 7, -1]])
    for weights in (None, rng.random(seeds.shape).astype(np.float32)):
        for normalise in (True, False):
            dense = call("sparse_diffusion", seeds, weights, indptr, indices, data, n, normalise=normalise, device="cpu")
            tensors = [torch.from_numpy(a) for a in (seeds, indptr, indices, data)]
            w = None if weights is None else torch.from_numpy(weights)
            keys, values = call("sparse_diffusion", tensors[0], w, *tensors[1:], n, normalise=normalise,
                                entries=True, device="cpu", backend=backend)
            assert keys.dtype == torch.int64 and values.dtype == torch.float32
            keys, values = keys.numpy(), values.numpy()
            assert (np.diff(keys) > 0).all()
            out = np.zeros(dense.size, np.float32)
            out[keys] = values
            np.testing.assert_array_equal(out.reshape(dense.shape), dense)  # the same sums, bit for bit
            reached = {b * n + int(j) for b, row in enumerate(seeds) for s in row if s >= 0
                       for j in indices[indptr[s]:indptr[s + 1]]}
            assert set(keys.tolist()) == reached  # every reached pair, zero-valued ones included
    empty = call("sparse_diffusion", torch.zeros((0, 3), dtype=torch.int64), None,
                 *(torch.from_numpy(a) for a in (indptr, indices, data)), n, entries=True, device="cpu", backend=backend)
    assert [len(t) for t in empty] == [0, 0]


def test_sparse_diffusion_entries_bad_input(rng):
    indptr, indices, data = (torch.from_numpy(a) for a in adversarial_graph(rng))
    with pytest.raises(InputError, match="seed_ids must be graph rows"):
        call("sparse_diffusion", torch.tensor([[50]]), None, indptr, indices, data, 50, entries=True, device="cpu")
    with pytest.raises(InputError, match="seed_weights shape"):
        call("sparse_diffusion", torch.tensor([[1]]), torch.ones(2), indptr, indices, data, 50, entries=True,
             device="cpu")
    with pytest.raises(InputError, match="exclude each other"):
        call("sparse_diffusion", torch.tensor([[1]]), None, indptr, indices, data, 50, entries=True, top=2,
             device="cpu")
