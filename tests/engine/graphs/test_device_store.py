"""The device-resident graph store on CPU tensors (the CUDA path differs only by the device string):
its readers are the loaded graphs, bit for bit, and give their arrays as device tensors copied
once; a structure over the budget stays on the host with a warning naming it; an index opened
with it answers every pipeline as an index opened on its own files (ids equal, scores within
rounding), and a search batch after the first converts no stored graph structure — only the
batch's own arrays cross the kernel boundary (:mod:`hopgraph.kernels.transfers`); the walk's
sub-graph and STITCH's sub-hypergraph cut on the device equal the host's cuts; STITCH's prior and
DMAR's structural subgraphs are made on the device and equal the host's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph import HashingEmbedder, Index
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.graphs.device_store import (DeviceMemoryWarning, DeviceStore, ResidentCSR,
                                                 store_for_device)
from hopgraph.engine.graphs.store import LOCAL, LocalStore, kernel_graph
from hopgraph.engine.index import IndexReader
from hopgraph.engine.pipelines import pipeline_names
from hopgraph.kernels import call
from hopgraph.kernels.csr import CSR
from hopgraph.kernels.transfers import counting_transfers

from ranking_asserts import assert_same_up_to_ties

#: each pipeline's search, with the walks over the whole chunk graph
SEARCHES = [(name, {}) for name in pipeline_names()] + [("stitch", {"localise": False}),
                                                        ("ppr_binary", {"localise": False})]
QUESTIONS = DEMO_QUESTIONS[:6]
#: the batch's dense and BM25 top lists made tensors (:meth:`~hopgraph.engine.components.query_batch.
#: QueryBatch.dense_topk_tensors`): counted apart, their producers search on the device
#: what a search batch takes in with the device store, per pipeline (the top-k ids and scores come out)
QUESTIONS_IN = {"dense": ["questions"], "bm25": ["bm25 query postings"],
                **{name: ["questions", "bm25 query postings"] for name in ("hybrid", "g3rag", "stitch")},
                "ppr_binary": ["questions", "matched (question, name) pairs"],
                **{name: ["questions", "bm25 query postings", "linked (question, entity) pairs"]
                   for name in ("dmar", "hop")}}


@pytest.fixture(scope="module")
def saved_index(tmp_path_factory):
    embedder = HashingEmbedder(64)
    index = Index.build(demo_corpus(), embedder=embedder, pipelines=pipeline_names(), progress=False)
    path = tmp_path_factory.mktemp("device") / "index"
    index.save(path)
    return path, embedder


@pytest.fixture(scope="module")
def readers(saved_index):
    path, embedder = saved_index
    store = DeviceStore("cpu")
    files = IndexReader.open(path, embedder, device="cpu", graphs=LocalStore())
    resident = IndexReader.open(path, embedder, device="cpu", graphs=store)
    yield files, resident, store
    files.close()
    resident.close()


def stored_arrays(pipeline) -> list[np.ndarray]:
    """The host arrays of the graph structures ``pipeline`` keeps (W, P and the hypergraph, the KG)."""
    out = []
    for name in ("graph_", "hypergraph_", "knowledge_graph_"):
        item = getattr(pipeline, name, None)
        if item is None:
            continue
        for v in (list(item) if isinstance(item, tuple) else list(vars(item).values())):
            if isinstance(v, np.ndarray):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(a for a in v if isinstance(a, np.ndarray))
    return out


def graph_crossings(count, arrays: list[np.ndarray]) -> list[str]:
    """The host→device crossings that were (part of) one of ``arrays``."""
    spans = [(a.__array_interface__["data"][0], a.nbytes) for a in arrays if a.nbytes]
    return [c.name for c in count.to_device if any(s <= c.address < s + n for s, n in spans)]


def random_graph(rng, n: int) -> CSR:
    lengths = rng.integers(0, 5, n)
    lengths[[0, n - 1]] = 0
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return CSR(indptr, rng.integers(0, n, int(indptr[-1])).astype(np.int32),
               rng.random(int(indptr[-1])).astype(np.float32), n)


def test_resident_reader_is_the_loaded_graph_and_moves_once(tmp_path, rng):
    graph = random_graph(rng, 40)
    LOCAL.save_graph(tmp_path, "g_", graph)
    store = DeviceStore("cpu")
    held = store.load_graph(tmp_path, "g_", 40, "test graph")
    assert isinstance(held, ResidentCSR) and isinstance(held, CSR) and held.n_cols == 40
    for a, b in zip(held[:3], graph[:3]):
        assert np.array_equal(a, b)
    assert store.placed == []  # nothing moves before a kernel reads it on the device
    with counting_transfers() as count:
        first = held.on_device()
        again = kernel_graph(held)
    assert all(isinstance(t, torch.Tensor) and t.device == store.device for t in first)
    assert again is first and count.htod == 3 and store.placed == [("test graph", sum(a.nbytes for a in graph[:3]))]
    P = column_stochastic(graph)
    with counting_transfers() as count:  # a tensor given to a kernel is passed on: nothing crosses
        pi, _ = call("batched_ppr", kernel_graph(store.hold(P, "P")), np.full((2, 40), 1 / 40), device="cpu")
    assert count.htod == 1 + 3 and count.dtoh == 0  # the priors, and P the first time
    want, _ = call("batched_ppr", P, np.full((2, 40), 1 / 40), device="cpu")
    assert torch.equal(pi, want)
    with counting_transfers() as count:
        call("batched_ppr", kernel_graph(store.hold(P, "P")), np.full((2, 40), 1 / 40), device="cpu")
    assert count.htod == 1 and count.to_device[0].name == "batched_ppr: priors"  # the same arrays: not twice
    assert store.hold(held, "again") is held  # not a plain CSR: kept as it is
    assert LOCAL.hold(graph, "x") is graph and kernel_graph(graph) is graph


def test_tensors_released_with_their_host_arrays(rng):
    """A graph replaced (by an add) frees its device copy: the tensors live as long as the host
    arrays they were copied from."""
    import gc

    store = DeviceStore("cpu")
    graph = random_graph(rng, 20)
    held = store.hold(CSR(graph.indptr.copy(), graph.indices.copy(), graph.data.copy(), 20), "W")
    sums = store.hold(np.ones(20), "sums")
    assert held.on_device() is not None and sums.on_device() is not None and store.used > 0
    kept = store.used - sums.host.nbytes
    del held
    gc.collect()
    assert store.used == sums.host.nbytes and kept == sum(a.nbytes for a in graph[:3])
    assert [name for name, _ in store.placed] == ["W", "sums"]  # the history stays


def test_a_memory_mapped_array_is_read_from_its_file_in_blocks(tmp_path, rng, monkeypatch):
    """A memory-mapped array is copied to the device from its file in blocks (plain reads into one
    buffer, never through the mapping), equal to the array, counted as one transfer."""
    from hopgraph.engine.graphs import device_store
    from hopgraph.engine.storage import RowReader

    X = rng.standard_normal((1000, 24)).astype(np.float16)
    np.save(tmp_path / "x.npy", X)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    reads = []
    real = RowReader.__call__
    monkeypatch.setattr(RowReader, "__call__", lambda self, a, b, out=None: reads.append((a, b)) or real(self, a, b, out))
    monkeypatch.setattr(device_store, "COPY_BLOCK_BYTES", 48 * 100)  # 100 rows a block
    with counting_transfers() as count:
        t = DeviceStore("cpu").hold(mapped, "text embeddings").on_device()
    assert t.dtype == torch.float16 and np.array_equal(t.numpy(), X)
    assert reads == [(a, min(a + 100, 1000)) for a in range(0, 1000, 100)]
    assert [c.name for c in count.to_device] == ["text embeddings array"]


def column_stochastic(graph: CSR) -> CSR:
    sums = np.bincount(graph.indices, weights=graph.data, minlength=graph.n_cols)
    return CSR(graph.indptr, graph.indices, (graph.data / sums[graph.indices]).astype(np.float32), graph.n_cols)


def test_budget_keeps_what_does_not_fit_on_the_host(tmp_path, rng, monkeypatch):
    graph = random_graph(rng, 30)
    small = DeviceStore("cpu", budget=16)
    held = small.hold(graph, "the chunk graph")
    with pytest.warns(DeviceMemoryWarning, match="the chunk graph: .* do not fit"):
        assert held.on_device() is None
    assert kernel_graph(held) is held and small.refused and small.used == 0
    monkeypatch.setenv("HOPGRAPH_DEVICE_BUDGET", "0")
    assert DeviceStore("cpu").budget == 0
    monkeypatch.setenv("HOPGRAPH_DEVICE_BUDGET", "2GB")
    with pytest.raises(ValueError, match="HOPGRAPH_DEVICE_BUDGET must be a number of bytes"):
        DeviceStore("cpu")
    with pytest.raises(ValueError, match="budget must be a number of bytes"):
        DeviceStore("cpu", budget=-1)
    assert store_for_device("cpu") is None


def test_the_forced_triton_backend_on_the_cpu_opens_a_store_of_cpu_tensors():
    """Triton's interpreter runs kernels on CPU tensors: with that backend forced, the device path
    (a DeviceStore of torch CPU tensors) is the one an index opened on the CPU takes."""
    from hopgraph.kernels import use_backend

    with use_backend("triton"):
        store = store_for_device("cpu")
    assert isinstance(store, DeviceStore) and str(store.device) == "cpu"
    with use_backend("cpu"):
        assert store_for_device("cpu") is None


@pytest.mark.parametrize("name,params", SEARCHES, ids=[n + "".join(f"-{k}" for k in p) for n, p in SEARCHES])
def test_search_batch_moves_no_graph_structure(readers, name, params):
    files, resident, store = readers
    want_ids, want_scores = files.search(QUESTIONS, 10, name, **params)
    resident.search(QUESTIONS, 10, name, **params)  # a structure moves on its first device use
    with counting_transfers() as count:
        ids, scores = resident.search(QUESTIONS, 10, name, **params)
    if name != "bm25":  # the dense search and STITCH's similarities are torch's products: equal up to rounding
        for b in range(len(ids)):
            assert_same_up_to_ties(ids[b], scores[b], want_ids[b], want_scores[b], 1e-6, f"{name} row {b}")
    else:  # the same arithmetic on the same arrays: bit for bit
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(scores, want_scores)
    assert graph_crossings(count, stored_arrays(resident.content.pipelines[name])) == []
    assert not [c for c in count.to_device if c.name.startswith("batched_ppr: P")]
    with counting_transfers() as before:
        files.search(QUESTIONS, 10, name, **params)
    if params.get("localise") is False:  # the own-files index copies P for every batch: the check bites
        assert len(graph_crossings(before, stored_arrays(files.content.pipelines[name]) +
                                   list(files.content.pipelines[name].transition[:3]))) == 3
    # the questions in, as the pipeline reads them (embeddings, BM25's query side, the names matched or
    # linked on the host); no top list, candidate, prior, activation or graph; the top-k ids and scores out
    assert [c.name for c in count.to_device] == QUESTIONS_IN[name]
    assert count.dtoh == 2
    if name in ("stitch", "ppr_binary", "dmar", "hop"):
        assert count.htod < before.htod


@pytest.mark.parametrize("seed", range(4))
def test_local_transition_on_the_device_equals_the_host_cut(seed):
    from hopgraph.engine.pipelines.stitch.local_graph import local_transition, local_transition_tensors

    rng = np.random.default_rng(seed)
    n = 30
    P = column_stochastic(random_graph(rng, n))  # columns without entries: dangling (sum 0)
    sums = np.bincount(P.indices, weights=P.data.astype(np.float64), minlength=n)
    store = DeviceStore("cpu")
    for chunks in (np.sort(rng.choice(n, 9, replace=False)), np.arange(n), np.zeros(0, np.int64), np.array([0])):
        want = local_transition(P, sums, chunks)
        got = local_transition(store.hold(P, "P"), store.hold(sums, "sums"), chunks)
        direct = local_transition_tensors(*(torch.from_numpy(a) for a in (P.indptr, P.indices, P.data, sums)), chunks)
        for g, d, w in zip(got, direct, want[:3]):
            assert g.dtype == torch.from_numpy(w).dtype
            np.testing.assert_array_equal(g.numpy(), w)
            np.testing.assert_array_equal(d.numpy(), w)


def test_an_index_opened_on_cuda_chooses_the_device_store(saved_index, monkeypatch):
    """The index chooses the store: ``device="cuda"`` opens with a :class:`DeviceStore` on CUDA
    (here CUDA is only claimed: nothing is placed before a kernel reads a graph), and its
    pipelines' graphs are that store's readers; ``"cpu"`` keeps the index's own files."""
    from hopgraph.kernels import dispatch

    path, embedder = saved_index
    with IndexReader.open(path, embedder, device="cpu") as reader:
        assert type(reader.content.components.graphs) is LocalStore
    monkeypatch.setattr(dispatch, "cuda_available", lambda: True)
    with IndexReader.open(path, embedder, device="cuda") as reader:
        store = reader.content.components.graphs
        assert isinstance(store, DeviceStore) and store.device.type == "cuda" and store.placed == []
        assert isinstance(reader.content.pipelines["g3rag"].graph_, ResidentCSR)
        assert reader.content.pipelines["stitch"].transition.component == "stitch chunk graph"


def test_local_hypergraph_on_the_device_equals_the_host_cut(readers, rng):
    """The influence stage's sub-hypergraph cut from the held tensors is the host's, field by field."""
    from hopgraph.engine.pipelines.stitch.local_graph import (HYPERGRAPH_TENSORS, local_hypergraph,
                                                              local_hypergraph_tensors)

    H = readers[0].content.pipelines["stitch"].hypergraph_
    h = {name: torch.from_numpy(np.array(getattr(H, name))) for name in HYPERGRAPH_TENSORS}
    for size in (1, 3, 20, H.n_nodes):
        active = rng.choice(H.n_nodes, min(size, H.n_nodes), replace=True)
        want, got = local_hypergraph(H, active), local_hypergraph_tensors(h, H.n_nodes, torch.from_numpy(active))
        for name, w, g in zip(want._fields, want, got):
            assert g.dtype == torch.from_numpy(np.asarray(w)).dtype, name
            np.testing.assert_array_equal(g.numpy(), w, err_msg=name)


#: STITCH searches whose prior takes every branch of the device path: mixing on and off, dense
#: relevance, no walk, two hops, the whole graph, as published
STITCH_VARIANTS = [{}, {"prior_mix": 0.0}, {"relevance": "dense"}, {"ppr": False}, {"region_hops": 2},
                   {"localise": False}, {"published": True}]


@pytest.mark.parametrize("params", STITCH_VARIANTS, ids=[",".join(map(str, p.items())) or "defaults"
                                                         for p in STITCH_VARIANTS])
def test_stitch_prior_and_walk_stay_on_the_device(readers, params):
    """With the hypergraph and P held on the device, STITCH's prior is normalised, mixed, filtered,
    grown into its regions and walked there (:mod:`~hopgraph.engine.pipelines.stitch.device_walk`):
    nothing of it comes back before π, the walk gets no host array, and the ranking equals the host
    path's up to rounding — with a filter, and with questions that activate nothing (their prior is
    uniform over the corpus: that batch goes on on the host)."""
    files, resident, _ = readers
    published = params.pop("published", False)
    if published:  # its absolute threshold leaves a demo question without activated states: on the host
        params = resident.content.pipelines["stitch"].SearchParams.published_values()
    n = len(files.content.components.X)
    for questions, allowed in ((QUESTIONS, None), (QUESTIONS, np.arange(n) % 3 != 0),
                               (QUESTIONS + ["zzzz qqqq"], None), (QUESTIONS, np.arange(n) == 5)):
        want_ids, want_scores = files.search(questions, 10, "stitch", allowed=allowed, **params)
        resident.search(questions, 10, "stitch", allowed=allowed, **params)
        with counting_transfers() as count:
            ids, scores = resident.search(questions, 10, "stitch", allowed=allowed, **params)
        for b in range(len(ids)):
            assert_same_up_to_ties(ids[b], scores[b], want_ids[b], want_scores[b], 1e-6, f"row {b} {params}")
        names = [c.name for c in count.to_device]
        if len(questions) == len(QUESTIONS) and allowed is None and not published:  # on the device throughout
            assert not [m for m in names if m.startswith("batched_ppr") or m == "walk region chunks"], names
            assert not [m for m in names if m.startswith("relevance")], names
            assert count.dtoh == 2  # the top-k ids and scores (activated there too)


def test_device_prior_helpers_equal_the_host_ones(rng):
    """The device path's seed distribution and region equal the host's (:func:`~hopgraph.engine.
    pipelines.stitch.walk.top_k_distribution`, :meth:`~hopgraph.engine.pipelines.stitch.walk.
    ChunkGraphWalk.region`), ties and empty rows included."""
    from hopgraph.engine.pipelines.stitch import device_walk
    from hopgraph.engine.pipelines.stitch.local_graph import neighbour_entries
    from hopgraph.engine.pipelines.stitch.local_rows import LocalRows
    from hopgraph.engine.pipelines.stitch.walk import SUPPORT_RTOL, top_k_distribution, union_entries

    for M, n in ((7, 7), (7, 40), (0, 5)):
        rel = rng.integers(0, 3, (5, M)).astype(np.float64) / 2  # ties, zero rows
        for k in (1, 2, 8):
            got = device_walk.top_k_distribution(torch.from_numpy(rel), k, n).numpy()
            np.testing.assert_allclose(got, top_k_distribution(rel, k, n), rtol=1e-15, atol=0)
    graph = random_graph(rng, 30)
    cols = np.sort(rng.choice(30, 12, replace=False))
    values = rng.random((4, 12)) * (rng.random((4, 12)) < 0.5)
    values[1] = 0.0
    values[2, 3] = 1e-9  # below the support threshold
    for hops in (0, 1, 2):
        q, c = np.nonzero((values > 0) & (values >= SUPPORT_RTOL * values.max(1, keepdims=True)))
        c = cols[c]
        for _ in range(hops):
            nq, nc = neighbour_entries(graph.indptr, graph.indices, q, c)
            q, c = union_entries((q, nq), (c, nc), 4, 30)
        want = LocalRows.from_entries(q, c, True, 4, 30, bool)
        p = device_walk.DeviceRows(torch.from_numpy(cols), torch.from_numpy(values), 30)
        got_cols, got_mask = device_walk.region(p, tuple(torch.from_numpy(a) for a in graph[:3]), hops, SUPPORT_RTOL)
        np.testing.assert_array_equal(got_cols.numpy(), want.cols)
        np.testing.assert_array_equal(got_mask.numpy(), want.values)


def test_dmar_structural_path_on_the_device_equals_the_host(readers, rng):
    """DMAR's query and candidate subgraphs and best structsim cut from the held knowledge graph
    (:mod:`~hopgraph.engine.pipelines.dmar.device_structural`) equal the host's
    (:mod:`~hopgraph.engine.pipelines.dmar.structural`) — queries linking nothing, padded and
    entity-less candidates, repeated entities included — and so does Score_ent."""
    from hopgraph.engine.pipelines.dmar.device_structural import held_structure, resident_structure
    from hopgraph.engine.pipelines.dmar.structural import (best_structsim, candidate_subgraphs, query_subgraphs,
                                                           structural_scores)

    pipe = readers[0].content.pipelines["dmar"]
    kg, Z = pipe.knowledge_graph_, pipe.subgraph_emb_
    E, N = kg.n_entities, kg.passage_entities.n_rows
    resident = resident_structure(held_structure(DeviceStore("cpu"), kg, Z, "dmar"), E)
    no_entities = np.flatnonzero(np.diff(kg.passage_entities.indptr) == 0)
    for B, C in ((1, 1), (3, 7), (5, N)):
        linked = [np.sort(rng.choice(E, rng.integers(0, 4), replace=False)).astype(np.int32) for _ in range(B)]
        linked[0] = np.zeros(0, np.int32)  # a question linking nothing
        cand = rng.integers(0, N, (B, C))
        cand[:, -1] = -1  # padding
        if len(no_entities):
            cand[-1, 0] = no_entities[0]
        q = query_subgraphs(kg, linked)
        want_nodes, want_linked, want_pad = candidate_subgraphs(kg, cand, q.local_nodes)
        want_best = best_structsim(Z, q, want_pad, cand >= 0)
        got_q = resident.query(linked)
        assert resident.query(linked) is got_q  # one batch's two scorings share it
        got_nodes, got_linked, got_pad, valid = resident.candidates(got_q, cand)
        np.testing.assert_array_equal(got_q.node_sets.numpy(), q.node_sets)
        np.testing.assert_array_equal(got_nodes.numpy(), want_nodes)
        np.testing.assert_array_equal(got_linked, want_linked)
        np.testing.assert_array_equal(got_pad.numpy(), want_pad)
        np.testing.assert_allclose(resident.best_structsim(got_q, got_pad, valid).numpy(), want_best, atol=1e-6)
        for mode in ("independent", "shared"):
            want = structural_scores(kg, Z, cand, linked, 0.5, 20, 3, mode, "cpu")
            got = resident.scores(cand, linked, 0.5, 20, 3, mode, "cpu")
            np.testing.assert_allclose(got[0], want[0], atol=1e-6)
            np.testing.assert_array_equal(got[1], want[1])


def test_stitch_on_the_device_rows_do_not_depend_on_their_batch(readers):
    """A batch whose rows go different ways — on the device, and on the host for a question that
    activates nothing (uniform prior) or whose prior the filter empties — gives each question what
    it gets alone."""
    _, resident, _ = readers
    n = len(resident.content.components.X)
    questions = QUESTIONS[:3] + ["zzzz qqqq"] + QUESTIONS[3:5]
    for allowed in (None, np.arange(n) % 4 != 1):
        ids, scores = resident.search(questions, 10, "stitch", allowed=allowed)
        for b, question in enumerate(questions):
            one_ids, one_scores = resident.search([question], 10, "stitch", allowed=allowed)
            assert_same_up_to_ties(ids[b], scores[b], one_ids[0], one_scores[0], 1e-6, f"row {b}")


def test_structures_used_together_are_placed_together_or_not_at_all(rng):
    """``place_together``: when one structure a search needs is refused, those the same call placed
    are released again (no budget held by structures no search uses); one placed before is kept."""
    a, b, c = (rng.standard_normal(100).astype(np.float32) for _ in range(3))
    store = DeviceStore("cpu", budget=a.nbytes * 2)
    kept = store.hold(c, "kept").on_device()
    with pytest.warns(DeviceMemoryWarning, match="second"):
        got = store.place_together(lambda: [store.hold(a, "first").on_device(), store.hold(b, "second").on_device(),
                                            store.hold(c, "kept").on_device()])
    assert got is None and store.used == c.nbytes and kept is store.hold(c, "kept").on_device()
    both = store.place_together(lambda: [store.hold(a, "first").on_device(), store.hold(c, "kept").on_device()])
    assert both is not None and store.used == a.nbytes + c.nbytes
