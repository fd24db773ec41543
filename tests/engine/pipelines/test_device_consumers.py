"""The consumers of a batch's top lists on the device (an index opened with a device store of CPU
tensors, :class:`~hopgraph.engine.graphs.device_store.DeviceStore`): ``hybrid`` fuses the two lists
there, bit for bit with the host; STITCH and ``ppr_binary`` read their relevance from them, make
their prior, walk, fuse and rank there (``ppr_binary``'s binary prior included), and bring back
only the top-k (and which rows are walked apart on the host); DMAR's stage-1 candidates are taken
from them for its structural path there. Ids equal to an index on its own files, scores within
rounding (bit for bit for hybrid and DMAR); a question's results never depend on its batch on the
device."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph import HashingEmbedder, Index
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.graphs.device_store import DeviceStore
from hopgraph.kernels.transfers import counting_transfers

from conftest import open_pair
from ranking_asserts import assert_same_up_to_ties

QUESTIONS = DEMO_QUESTIONS[:6]
#: what the producers of the batch's top lists take in (the lists made tensors, or BM25's query side on
#: the held postings): counted apart
TOP_LISTS = {"dense ids", "dense scores", "bm25 ids", "bm25 scores", "bm25 query postings"}
WALK_VARIANTS = [("stitch", {}), ("stitch", {"relevance": "dense"}), ("stitch", {"fusion": "rrf"}),
                 ("stitch", {"ppr": False}), ("stitch", {"localise": False, "fusion": "rrf"}),
                 ("stitch", {"prior_mix": 0.0, "balance": 0.0}), ("ppr_binary", {}),
                 ("ppr_binary", {"relevance": "hybrid", "fusion": "rrf"}), ("ppr_binary", {"localise": False}),
                 ("ppr_binary", {"prior_mix": 0.5, "n_seeds": 3})]


@pytest.fixture(scope="module")
def readers(tmp_path_factory):
    embedder = HashingEmbedder(64)
    index = Index.build(demo_corpus(), embedder=embedder, pipelines=["hybrid", "stitch", "ppr_binary", "dmar"],
                        progress=False)
    path = tmp_path_factory.mktemp("consumers") / "index"
    index.save(path)
    files, resident = open_pair(path, embedder)
    yield files, resident
    files.close()
    resident.close()


def filters(n: int) -> list[np.ndarray | None]:
    return [None, np.arange(n) % 3 != 0, np.arange(n) == 5]


@pytest.mark.parametrize("params", [{}, {"rrf_k": 5, "fusion_depth": 7}])
def test_hybrid_fused_on_the_device_equals_the_host_bit_for_bit(readers, params):
    files, resident = readers
    n = len(files.content.components.X)
    resident.search(QUESTIONS, 10, "hybrid", **params)  # the postings move on their first device use
    for allowed in filters(n):
        want = files.search(QUESTIONS, 10, "hybrid", allowed=allowed, **params)
        with counting_transfers() as count:
            got = resident.search(QUESTIONS, 10, "hybrid", allowed=allowed, **params)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])  # the same float32 sums
        names = [c.name for c in count.to_device if c.name not in TOP_LISTS]
        assert names == ["questions"] + ([] if allowed is None else ["filter"])  # (the dense search's)
        assert count.dtoh == 2  # the top-k ids and scores


@pytest.mark.parametrize("name,params", WALK_VARIANTS, ids=[f"{n}-{p}" for n, p in WALK_VARIANTS])
def test_walk_ranked_on_the_device_equals_the_host(readers, name, params):
    files, resident = readers
    n = len(files.content.components.X)
    for questions, allowed in [(QUESTIONS, a) for a in filters(n)] + [(QUESTIONS + ["zzzz qqqq"], None)]:
        want_ids, want_scores = files.search(questions, 10, name, allowed=allowed, **params)
        resident.search(questions, 10, name, allowed=allowed, **params)  # structures move on first device use
        with counting_transfers() as count:
            ids, scores = resident.search(questions, 10, name, allowed=allowed, **params)
        for b in range(len(ids)):
            assert_same_up_to_ties(ids[b], scores[b], want_ids[b], want_scores[b], 1e-6, f"{name} {params} row {b}")
        names = [c.name for c in count.to_device if c.name not in TOP_LISTS]
        assert not [m for m in names if m.startswith("relevance")], names
        if len(questions) == len(QUESTIONS) and allowed is None:  # every row on the device
            assert resident.content.pipelines[name].resident_prior()
            assert not [m for m in names if m.startswith(("batched_ppr", "walk region", "batch rows"))], names
            assert count.dtoh == 2, count  # the top-k ids and scores (STITCH activated there too)


@pytest.mark.parametrize("name", ["stitch", "ppr_binary"])
def test_walk_on_the_device_rows_do_not_depend_on_their_batch(readers, name):
    _, resident = readers
    n = len(resident.content.components.X)
    questions = QUESTIONS[:3] + ["zzzz qqqq"] + QUESTIONS[3:5]
    for params in ({}, {"fusion": "rrf", "relevance": "hybrid"}):
        for allowed in (None, np.arange(n) % 4 != 1):
            ids, scores = resident.search(questions, 10, name, allowed=allowed, **params)
            for b, question in enumerate(questions):
                one_ids, one_scores = resident.search([question], 10, name, allowed=allowed, **params)
                assert_same_up_to_ties(ids[b], scores[b], one_ids[0], one_scores[0], 1e-6, f"{name} row {b}")


def test_hybrid_on_the_device_rows_do_not_depend_on_their_batch(readers):
    _, resident = readers
    ids, scores = resident.search(QUESTIONS, 10, "hybrid")
    for b, question in enumerate(QUESTIONS):
        one = resident.search([question], 10, "hybrid")
        np.testing.assert_array_equal(one[0][0], ids[b])
        np.testing.assert_array_equal(one[1][0], scores[b])


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_binary_prior_on_the_device_equals_the_host(readers, n_seeds):
    """``ppr_binary``'s prior made from the held name groups equals the host's: matched names,
    questions matching none (their seeds), ties among the seeds."""
    from hopgraph.engine.pipelines.stitch.device_walk import DeviceRows
    from hopgraph.engine.pipelines.stitch.ppr_binary import binary_prior_tensors

    files, resident = readers
    pipe = resident.content.pipelines["ppr_binary"]
    params = pipe.search_params(n_seeds=n_seeds)
    questions = QUESTIONS + ["zzzz qqqq"]
    batch = resident.content.components.batch(_embed(resident, questions), questions)
    rel = pipe.relevance_rows(batch, 10, params)
    rel = rel.with_values(np.round(rel.values * 4) / 4)  # ties among the seeds
    want, want_uniform = pipe.prior_rows(batch, rel, params)
    device_rel = DeviceRows(torch.from_numpy(rel.cols), torch.from_numpy(rel.values), rel.n)
    got, got_uniform = binary_prior_tensors(pipe._held_prior(), *pipe._matched(batch), device_rel, n_seeds)
    np.testing.assert_array_equal(got_uniform, want_uniform)
    np.testing.assert_allclose(got.host().dense(), want.dense(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("params", [{}, {"candidate_source": "bm25"}, {"union_depth": 0, "bm25_weight": 0.0}])
def test_dmar_candidates_from_the_device_lists_equal_the_host(readers, params):
    """DMAR's stage-1 candidates fused from the device lists and the search after them on the device
    (:mod:`hopgraph.engine.pipelines.dmar.device_search`) give the host's ids, the scores within
    float rounding (torch's sums), each question as alone."""
    files, resident = readers
    n = len(files.content.components.X)
    resident.search(QUESTIONS, 10, "dmar", **params)  # the knowledge graph moves on its first device use
    for allowed in filters(n)[:2]:
        want = files.search(QUESTIONS, 10, "dmar", allowed=allowed, **params)
        with counting_transfers() as count:
            got = resident.search(QUESTIONS, 10, "dmar", allowed=allowed, **params)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6)
        names = sorted(c.name for c in count.to_device if c.name not in TOP_LISTS)
        # the linked pairs (and the questions, the filter); the candidates, Score_ent and Q′ stay there
        assert sorted(set(names) - {"questions", "filter"}) == ["linked (question, entity) pairs"], names
        assert count.dtoh == 2
    ids, scores = resident.search(QUESTIONS, 10, "dmar", **params)
    for b, question in enumerate(QUESTIONS):
        one = resident.search([question], 10, "dmar", **params)
        np.testing.assert_array_equal(one[0][0], ids[b])


def _embed(reader, texts):
    from hopgraph.engine.embedders.queries import encode_queries

    return encode_queries(reader.content.components.embedder, texts, progress=False)
