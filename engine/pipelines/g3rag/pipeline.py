"""G3RAG: geometric gain graph retrieval, zero-token (SPEC §1).

Fit (SPEC §1 index steps 1–6): the density of every passage (step 1, op ``density``; ``density``
"exact", "sampled" over ``density_samples`` columns, or "auto": sampled from
:data:`~hopgraph.engine.pipelines.g3rag.ann_graph.SAMPLED_DENSITY_MIN_N` passages up), the hub penalty
``exp(−beta · nd)`` (step 2), and the gain graph W (steps 3–5): per row the ``n_neighbors`` edges of
largest ``gain · penalty`` with similarity in [``sim_min``, ``sim_max``]. ``mode`` chooses how W is
built and nothing else: ``"knn"`` the blocked kernel ``gain_knn``; ``"exact"`` every pair with
similarity in [0, 1] (k = N − 1, step 5's dense reference graph, for small corpora); ``"ann"`` IVF
candidates rescored exactly (:mod:`.ann_graph`); ``"auto"`` ``ann`` on the CPU from
:data:`~hopgraph.engine.pipelines.g3rag.ann_graph.ANN_MIN_N` passages up, ``knn`` below and on CUDA.
T = W row-normalised (step 6) is applied on the rows a query reads.

Search, two scorings (``scoring``):

* ``"mask"`` — the published query (SPEC §1 query steps 1–4): the ``n_seeds`` passages most relevant
  to q (``seed_source``: dense cosine, or the dense + BM25 reciprocal-rank fusion), p uniform over
  them, one diffusion step ``y = pᵀT``, seeds masked; result = seeds, then the top diffused
  passages, filled with the next most relevant. Each entry has its own score (relevance, or y) and
  its tier (seed, diffused, fill; :mod:`.masked`); the score returned is ordered by both.
* ``"fused"`` (default) — relevance ``r = cos + bm25_weight · bm25 / max bm25`` over the
  ``candidate_depth`` most relevant passages (the BM25 term when the corpus and the question texts
  are known), ``p = softmax(r / tau)``, ``y = pᵀT``; score ``r + gamma · y / max y`` plus
  ``name_links · y_names / max y_names``, with ``y_names`` the same p diffused one step over the
  name links among the candidates (:mod:`.name_links`: candidates linked by shared extracted names,
  idf-weighted, a link through the target's own title weighing ``1 + title_links`` times more).
  Only the candidates are ranked; ``expand=True`` also ranks the passages their rows reach
  (``cos + gamma · y / max y``).

Then the title bridge (:mod:`hopgraph.engine.pipelines.title_bridge`). Why the fused scoring is
the default: ``docs/decisions/g3rag-fused-scoring.md``.
``G3RAG(published=True)``: ``scoring="mask"``, dense seeds, ``n_seeds`` 3, no bridge (search
defaults only, so a fitted graph is reused). The paper's full algorithm on a small corpus:
``G3RAG(published=True, mode="exact")``.

Adding passages (:meth:`G3RAG._add`) extends W incrementally (:mod:`.graph_update`): the new rows,
and the reverse edges they create. Existing rows keep the density and penalty of their last build
until ``Index.compact()``; with the penalties held fixed the updated W equals a build's.

Cost of a search: O(B · candidate_depth · n_neighbors) for the graph part, nothing of size N.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ....kernels import call
from ...components.hybrid_ranking import hybrid_ranking, hybrid_ranking_tensors
from ...components.query_batch import QueryBatch
from ...cost import LIST_ENTRY, PASSAGE_ARRAYS, Cost, IndexShape
from ...errors import IndexFormatError, InputError
from ....kernels.csr import CSR
from ...params import FitParams, choice, flag, integer, real
from ...ranking import PAD_ID, PAD_SCORE, topk_entries
from ...sparse import allowed_at, join
from ...storage import check_finite, load_array, load_arrays, save_arrays
from ...graphs.store import device_arrays
from ...graphs.views import OverlayCSR
from ....kernels.tensors import as_numpy
from ...storage.deltas import TOPK_DELTA_FILES, apply_topk_deltas, empty_topk_delta, topk_delta
from ...timing import StageTimer
from ..base import Pipeline
from ..title_bridge import BridgeSearch, TitleBridge
from .ann_graph import ANN_MIN_N, CELL_SIZE, DEFAULT_NPROBE, AddedRowCandidates, ann_gain_knn, density_mode, graph_mode
from .device_search import DeviceGraph, fused_search, masked_search
from .diffusion import Entries, diffusion_at, diffusion_entries, lookup, pair_cosines, pair_keys
from .graph_update import added_density, added_penalty, extend_gain_graph
from .masked import DIFFUSED, FILL, SEED, TieredRanking, tiered_ranking
from .name_links import ARRAY_FIELDS as NAMES_FIELDS, ARRAY_PREFIX as NAMES_PREFIX, ChunkNames, name_link_diffusion
from .penalty import hub_penalty

MODES = ("knn", "exact", "ann", "auto")
#: candidates an IVF build scores per row (CELL_SIZE · DEFAULT_NPROBE): adding more passages than this
#: at once to an "ann" graph refits it (cheaper than scoring each new row against all N)
ANN_CANDIDATES_PER_ROW = CELL_SIZE * DEFAULT_NPROBE


@dataclass(frozen=True)
class G3RAGFit(FitParams):
    """G3RAG's fit parameters: the gain graph (SPEC §1 index steps 1–5)."""

    pipeline = "g3rag"
    renamed = {"k": "n_neighbors"}
    n_neighbors: int = integer(32, low=1)
    sim_min: float = real(0.3, low=-1.0, high=1.0)
    sim_max: float = real(0.9, low=-1.0, high=1.0)
    beta: float = real(1.0, low=0.0)
    mode: str = choice("auto", MODES)
    density: str = choice("auto", ("exact", "sampled", "auto"))
    density_samples: int = integer(4096, low=1)

    def check(self) -> None:
        """InputError when ``sim_min`` exceeds ``sim_max``."""
        if self.sim_min > self.sim_max:
            raise self.invalid("sim_min", f"must not exceed sim_max = {self.sim_max}")


@dataclass(frozen=True)
class G3RAGSearch(BridgeSearch):
    """G3RAG's search parameters (SPEC §1 query steps 1–4 and the fused scoring)."""

    pipeline = "g3rag"
    renamed = {"seed_k": "n_seeds", "seeds": "seed_source", "n_candidates": "candidate_depth",
               "hybrid_depth": "fusion_depth", "lexical": "bm25_weight"}
    scoring: str = choice("fused", ("mask", "fused"))
    n_seeds: int = integer(3, low=1, serving_bound=64)
    seed_source: str = choice("dense", ("dense", "hybrid"))
    candidate_depth: int = integer(20, low=1, serving_bound=1_000)
    fusion_depth: int = integer(100, low=1, serving_bound=1_000)
    bm25_weight: float = real(0.15, low=0.0)
    tau: float = real(0.05, low=0.0, low_open=True)
    gamma: float = real(0.02, low=0.0)
    name_links: float = real(0.1, low=0.0)
    title_links: float = real(2.0, low=0.0)
    expand: bool = flag(False)

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §1 query: dense seeds, one diffusion step, seeds masked, no title bridge."""
        return {"scoring": "mask", "seed_source": "dense", "n_seeds": 3, "bridge": 0.0}


@dataclass(frozen=True)
class DensityBuild:
    """What ``add`` needs of the last build (SPEC §1 steps 1-2): its passage count ``n`` (which
    fixes the sampled-density column sample) and its density range ``[low, high]`` (the
    normalisation of step 2). Stored as ``density_build.npy`` (float64 ``[n, low, high]``)."""

    n: int
    low: float
    high: float

    def array(self) -> np.ndarray:
        """``[n, low, high]`` as float64, as the index stores it."""
        return np.array([self.n, self.low, self.high], np.float64)

    @classmethod
    def from_array(cls, a: np.ndarray, name: str, n_rows: int) -> "DensityBuild":
        """Read :meth:`array`'s output; :class:`IndexFormatError` unless ``1 <= n <= n_rows`` and
        ``low <= high``."""
        n, low, high = check_finite(a, name, (3,)).tolist()
        if n != int(n) or not 1 <= n <= n_rows or low > high:
            raise IndexFormatError(f"{name}: expected [n in 1..{n_rows}, low <= high], got {[n, low, high]}")
        return cls(int(n), low, high)


class G3RAG(Pipeline[G3RAGFit, G3RAGSearch]):
    """Geometric-gain graph retrieval (SPEC §1); module docstring for the parameters.

    Fitted state: ``graph_`` (W, CSR), ``penalty_`` (float32 [N], SPEC §1 step 2) and
    ``density_build_`` (the last build's size and density range, for :meth:`add`)."""

    name = "g3rag"
    FitParams = G3RAGFit
    SearchParams = G3RAGSearch
    components_used = ("dense", "bm25", "extraction")
    runs_kernels = True
    rerank = (TitleBridge(),)
    default_batch_size = 256
    stages = ("seeds", "relevance", "diffusion", "name_links", "cosine", "ranking")
    ablations: ClassVar[dict[str, dict[str, Any]]] = {
        "published": G3RAGSearch.published_values(),
        "published_exact": {**G3RAGSearch.published_values(), "mode": "exact"},
        "published_hybrid_seeds": {**G3RAGSearch.published_values(), "seed_source": "hybrid"},
        "no_graph": {"gamma": 0.0, "name_links": 0.0, "bridge": 0.0},
        "no_bridge": {"bridge": 0.0},
        "no_name_links": {"name_links": 0.0},
        "no_gain_graph": {"gamma": 0.0},
        "no_title_links": {"title_links": 0.0},
        "no_lexical": {"bm25_weight": 0.0},
        "expand": {"expand": True},
    }

    def __init__(self, params: dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.graph_: CSR | OverlayCSR | None = None
        self.penalty_: np.ndarray | None = None
        self.density_build_: DensityBuild | None = None
        self._chunk_names: ChunkNames | None = None
        self._candidates: AddedRowCandidates | None = None
        #: the build's graph cells as read from an index (:meth:`AddedRowCandidates.arrays`)
        self._cells_stored: dict[str, np.ndarray] | None = None
        #: the graph's arrays are read from an index (an add keeps them as an overlay's base)
        self._graph_stored = False
        #: the items a device search reads besides W, as the graph store holds them: key -> (item, held)
        self._device_items: dict[str, tuple[Any, Any]] = {}

    @classmethod
    def cost(cls, shape: IndexShape, params: G3RAGSearch, batch: int, k: int, grouped: bool = False) -> Cost:
        """:meth:`Pipeline.cost` plus the candidate and fusion lists and the graph edges read: the
        ``n_neighbors`` edges of each seed and candidate, 8 operations each."""
        n, depth = max(shape.n, 1), cls.cost_depth(shape, params, k, grouped)
        D = max(params.fusion_depth, params.candidate_depth, depth)
        edges = (params.n_seeds + params.candidate_depth) * cls.cost_fit(shape).n_neighbors
        own = Cost(batch * (n + D + edges * 8), PASSAGE_ARRAYS * n + batch * (2 * D + edges) * LIST_ENTRY)
        return super().cost(shape, params, batch, k, grouped) + own

    # ------------------------------------------------------------------ fit
    def _fit(self, progress: bool) -> None:
        """SPEC §1 index steps 1–5 (T is applied row-normalised at search time). BM25 and the
        extraction (lexical relevance, hybrid seeds, name links) are the shared components, built
        when the corpus is known."""
        fp, X, device = self.fit_params, self.components.X, self.device
        n = len(X)
        node_density = call("density", X, mode=density_mode(fp.density, n), n_samples=fp.density_samples,
                            device=device)
        pen = hub_penalty(node_density, fp.beta)
        self.penalty_ = pen
        self.density_build_ = DensityBuild(n, float(node_density.min()), float(node_density.max())) if n else None
        mode = graph_mode(fp.mode, n, device)
        self._graph_stored = False
        self._candidates = self._cells_stored = None
        if mode == "ann":
            self.graph_ = ann_gain_knn(X, fp.n_neighbors, fp.sim_min, fp.sim_max, pen, progress=progress,
                                       ivf=self.components.dense.ivf, device=device)
            if self.components.dense.method == "ann":  # the build's graph cells, kept for later adds
                self._candidates = AddedRowCandidates(self.components.dense.ivf, n)
        elif mode == "exact":
            self.graph_ = call("gain_knn", X, k=max(n - 1, 1), sim_min=0.0, sim_max=1.0, penalty=pen,
                               progress=progress, device=device)
        else:
            self.graph_ = call("gain_knn", X, k=fp.n_neighbors, sim_min=fp.sim_min, sim_max=fp.sim_max,
                               penalty=pen, progress=progress, device=device)
        if self.components.corpus is not None:
            self.components.bm25(who=self.name)
            self.components.extraction(who=self.name)
        self._chunk_names = None
        self._names(self.search_defaults)  # built at fit, not on the first query, and saved

    def _add(self, start: int, progress: bool) -> None:
        """Rows ``[start, N)`` of X are new: they get their density (SPEC §1 step 1: over all N
        passages in exact mode, over the last build's column sample in sampled mode) and penalty
        (step 2, normalised by the last build's density range), then W is extended (steps 3–5):
        their out-edges over all N passages and the reverse edges into existing rows
        (:func:`~hopgraph.engine.pipelines.g3rag.graph_update.extend_gain_graph`). Existing rows keep
        the density and penalty of their last build until ``Index.compact()``. In mode ``"ann"`` over
        an IVF dense index of at least :data:`ANN_MIN_N` rows, the new rows' candidates and the
        rows that may take a reverse edge come from the build's graph cells
        (:class:`~hopgraph.engine.pipelines.g3rag.ann_graph.AddedRowCandidates`: the build's rule,
        O(candidates) per row); otherwise the new rows are exact (brute force over all passages)
        unless more than :data:`ANN_CANDIDATES_PER_ROW` passages come at once, which refits. A
        graph read from an index stays stored: the result is an
        :class:`~hopgraph.engine.graphs.views.OverlayCSR` over it. A pipeline loaded from an index
        saved without the penalty is refitted."""
        self._follow_names(start)
        fp, X, build = self.fit_params, self.components.X, self.density_build_
        if build is None or self.penalty_ is None or len(self.penalty_) != start or self.graph_.n_rows != start:
            self._fit(progress)
            return
        n = len(X)
        ann = graph_mode(fp.mode, n, self.device) == "ann"
        candidates = None
        if ann and start >= ANN_MIN_N and self.components.dense.method == "ann":
            candidates = self._added_row_candidates(build.n)  # the build's cells: O(candidates) per row
        elif ann and n - start > ANN_CANDIDATES_PER_ROW:
            self._fit(progress)  # brute force would cost (n - start) · N similarities
            return
        dens = added_density(X, start, density_mode(fp.density, build.n), n_build=build.n,
                             n_samples=fp.density_samples, progress=progress)
        pen = np.concatenate([np.asarray(self.penalty_, np.float32),
                              added_penalty(dens, build.low, build.high, fp.beta)])
        if fp.mode == "exact":
            k, sim_min, sim_max = max(n - 1, 1), 0.0, 1.0
        else:
            k, sim_min, sim_max = fp.n_neighbors, fp.sim_min, fp.sim_max
        self.graph_ = extend_gain_graph(self.graph_, X, start, pen, k, sim_min, sim_max, progress=progress,
                                        as_overlay=self._graph_stored, candidates=candidates, device=self.device)
        self.penalty_ = pen

    def _save(self, directory: Path) -> None:
        self.components.graphs.save_graph(directory, "", self.graph_)
        arrays = {}
        if self.penalty_ is not None and self.density_build_ is not None:
            arrays.update(penalty=np.asarray(self.penalty_, np.float32), density_build=self.density_build_.array())
        if self._chunk_names is not None and self._chunk_names.n_chunks == len(self.components.X):
            arrays.update(self._chunk_names.arrays())
        if self.density_build_ is not None:
            held = self._candidates.arrays() if self._candidates is not None else self._cells_stored
            arrays.update(held or {})
        if arrays:
            save_arrays(directory, arrays)

    def _added_row_candidates(self, n_build: int) -> AddedRowCandidates:
        """The candidates of added rows by the build's IVF cells (kept while the IVF index is the same)."""
        ivf = self.components.dense.ivf
        held = self._candidates
        if held is None or held.ivf is not ivf:
            held = self._candidates = AddedRowCandidates(ivf, n_build, grouping=self._cells_stored)
        return held

    def _snapshot(self) -> tuple[CSR, np.ndarray | None]:
        return self.graph_, self.penalty_

    def _save_delta(self, directory: Path, since: tuple[CSR, np.ndarray | None], start: int, stop: int) -> str | None:
        """W's rows rewritten by reverse edges (as the edges they gained, :func:`~hopgraph.engine.storage.deltas.topk_delta`;
        the arrays of an empty part left out) and its new rows,
        the new rows' penalties and the build range; None (stored whole) when the penalty was
        not kept."""
        graph, penalty = since
        if penalty is None or self.penalty_ is None or len(penalty) != start or graph.n_rows != start:
            return None
        arrays = topk_delta(graph, self.graph_, start, stop)
        empty = tuple(f"{part}_" for part in ("over", "ins") if not len(arrays[f"{part}_rows"]))
        arrays = {k: v for k, v in arrays.items() if not (empty and k.startswith(empty))}
        arrays.update(penalty_tail=np.asarray(self.penalty_[start:stop], np.float32))
        save_arrays(directory, arrays)
        return "delta"

    def _load_deltas(self, parts: list[tuple[Path, int]]) -> None:
        """The stored graph and penalty with the segments' deltas applied (in memory); the passages'
        names are built again on the first query that uses them."""
        deltas, penalties = [], [np.asarray(self.penalty_, np.float32)]
        for d, n in parts:
            a = load_arrays(d, [f for f in (*TOPK_DELTA_FILES, "penalty_tail") if (d / f"{f}.npy").is_file()])
            a = {**empty_topk_delta(), **a}
            deltas.append(a)
            penalties.append(check_finite(a["penalty_tail"], f"{d} penalty_tail", (None,)))
        n = parts[-1][1]
        self.graph_ = apply_topk_deltas(self.graph_, deltas, n, str(parts[-1][0]))
        self.penalty_ = np.concatenate(penalties)
        if self.graph_.n_rows != n or len(self.penalty_) != n or float(self.penalty_.min(initial=0.0)) < 0:
            raise IndexFormatError(f"{parts[-1][0]}: G3RAG deltas give {self.graph_.n_rows} rows and "
                                   f"{len(self.penalty_)} penalties, the index has {n}")
        self._follow_names(self._stored_rows)

    def _follow_names(self, start: int) -> None:
        """The passages' names after the shared extraction grew from ``start`` passages: extended from
        the ones held (:meth:`ChunkNames.extended`), else built again on the first query."""
        names, comp = self._chunk_names, self.components
        if names is None or comp.corpus is None or names.n_chunks != start:
            self._chunk_names = None
            return
        ex = comp.extraction(who=self.name)
        self._chunk_names = names.extended(ex, comp.corpus.titles[start:ex.n_chunks])

    def _load(self, directory: Path) -> None:
        """The saved graph, memory-mapped (no refit). The penalty and build range are read when
        present (an index saved without them refits on its first ``add``); the passages' names when
        saved (else built on the first query that uses them)."""
        n = self._stored_rows
        self.graph_ = self.components.graphs.load_graph(directory, "", n, f"{directory} graph")
        self._graph_stored = True
        self._candidates = self._cells_stored = None
        if all((directory / f"{name}.npy").is_file() for name in AddedRowCandidates.ARRAY_FILES):
            self._cells_stored = load_arrays(directory, list(AddedRowCandidates.ARRAY_FILES), mmap=False)
        self._chunk_names = None
        names = [f"{NAMES_PREFIX}{k}" for k in NAMES_FIELDS]
        if all((directory / f"{name}.npy").is_file() for name in names):
            self._chunk_names = ChunkNames.from_arrays(load_arrays(directory, names), n, str(directory))
        if (directory / "penalty.npy").is_file() and (directory / "density_build.npy").is_file():
            self.penalty_ = check_finite(load_array(directory, "penalty"), f"{directory} penalty", (n,))
            if len(self.penalty_) and float(self.penalty_.min()) < 0:
                raise IndexFormatError(f"{directory} penalty: holds negative values")
            self.density_build_ = DensityBuild.from_array(load_array(directory, "density_build", mmap=False),
                                                          f"{directory} density_build", n)

    # ------------------------------------------------------------------ search
    def _search_batch(self, batch: QueryBatch, k: int, params: G3RAGSearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        """SPEC §1 query steps 1–4 (``scoring="mask"``) or the fused scoring; every array is sized
        by the seeds' and candidates' edges, none by N. On the device where the graph store holds W
        (and what else the search reads) when the batch has one (:mod:`.device_search`), else on the host."""
        if params.scoring == "mask":
            if params.seed_source == "hybrid" and self.components.corpus is None:
                raise InputError("G3RAG: hybrid seeds need the corpus at fit time: fit(X, corpus)")
            if params.seed_source == "hybrid" and batch.texts is None:
                raise InputError("G3RAG: hybrid seeds need query_texts, one per query")
        graph = self._device_graph(batch, params)
        if graph is not None:
            return self._search_on_device(batch, k, params, graph, timer)
        if params.scoring == "mask":
            ranking = self._search_masked(batch, k, params, timer)
            return ranking.ids, ranking.ordering_scores()
        return self._search_fused(batch, k, params, timer)

    # ------------------------------------------------------------------ search on the device
    def _held(self, key: str, item: Any) -> Any:
        """``item``'s tensors where the graph store holds it on the device (held once per item,
        :meth:`GraphStore.hold <hopgraph.engine.graphs.store.GraphStore.hold>`, named ``g3rag {key}``), else None."""
        source, held = self._device_items.get(key, (None, None))
        if source is not item:
            held = self.components.graphs.hold(item, f"{self.name} {key}")
            self._device_items[key] = (item, held)
        return device_arrays(held)

    def _device_graph(self, batch: QueryBatch, params: G3RAGSearch) -> DeviceGraph | None:
        """What the search reads, as tensors on the batch's device (:class:`.device_search.DeviceGraph`):
        W, the embeddings when the search reads some (BM25 candidates' cosines, ``expand``) and the
        passages' names when the name links are on; None (the host path) without a device, or when
        one of them stays in host memory (a graph being extended, over the store's budget)."""
        n = len(self.components.X)
        if batch.device is None or n == 0:
            return None
        W = self._held("graph", self.graph_)  # held beside graph_, which an add may replace meanwhile
        if W is None:  # an overlay (a stored graph being extended) or over the budget: nothing else moves
            return None
        fused = params.scoring == "fused"
        reads_X = fused and (self._lexical(batch, params) or (params.expand and params.gamma > 0))
        search = batch.dense_on_device() if reads_X else None  # X's rows as the dense search holds them
        X = None if search is None else search.rows
        names = self._names(params) if fused else None
        held_names = None if names is None else [self._held(f"names {k}", getattr(names, k)) for k in NAMES_FIELDS]
        if (reads_X and X is None) or (held_names is not None and None in held_names):
            return None
        return DeviceGraph(tuple(W), X, None if held_names is None else tuple(held_names), n,
                           "cuda" if batch.device.type == "cuda" else "cpu")

    def _search_on_device(self, batch: QueryBatch, k: int, params: G3RAGSearch, graph: DeviceGraph,
                          timer: StageTimer) -> tuple[np.ndarray, np.ndarray]:
        """Either scoring on the device (:mod:`.device_search`); the top-``k`` ids and scores come out.
        Hybrid seeds (``scoring="mask"``) are the two lists fused there
        (:func:`~hopgraph.engine.components.hybrid_ranking.hybrid_ranking_tensors`)."""
        if params.scoring == "fused":
            weight = params.bm25_weight if self._lexical(batch, params) else None
            ids, scores = fused_search(batch, graph, k, params, weight, timer)
        else:
            seed_k = min(params.n_seeds, graph.n)
            depth = min(seed_k + k, graph.n)
            with timer("seeds"):
                ranking = batch.dense_topk_tensors(depth) if params.seed_source == "dense" else \
                    hybrid_ranking_tensors(batch, depth, params.fusion_depth)
            ids, scores = masked_search(batch, graph, k, ranking, seed_k, timer)
        return as_numpy(ids), as_numpy(scores)

    def _relevance_ranking(self, batch: QueryBatch, depth: int, params: G3RAGSearch) -> tuple[np.ndarray, np.ndarray]:
        """Seed ranking of the masked scoring: dense cosine, or dense + BM25 RRF (``seed_source``)."""
        if params.seed_source == "dense":
            return batch.dense_topk(depth)
        return hybrid_ranking(batch, depth, params.fusion_depth)

    def _search_masked(self, batch: QueryBatch, top_k: int, params: G3RAGSearch, timer: StageTimer
                       ) -> TieredRanking:
        """The published query (SPEC §1 query steps 1-4) on the passages the seeds reach:
        step 1 seeds, step 2 ``y = pᵀT`` over the seeds' CSR rows only, step 3 seeds masked (and
        passages with y = 0, and filtered ones: the walk may pass through them, they are never
        returned), step 4 seeds, then the top diffused passages, filled with the next most
        relevant (:func:`~hopgraph.engine.pipelines.g3rag.masked.tiered_ranking`: each entry's own
        score and its tier, for the whole batch at once)."""
        n, B = len(self.components.X), len(batch)
        seed_k = min(params.n_seeds, n)
        with timer("seeds"):
            rank_ids, rank_scores = self._relevance_ranking(batch, min(seed_k + top_k, n), params)
        seeds = rank_ids[:, :seed_k]
        with timer("diffusion"):
            y = diffusion_entries(self.graph_, seeds, None)
        with timer("ranking"):
            _, is_seed = join(np.unique(pair_keys(seeds, n)), y.keys(n))  # step 3: seed masking
            keep = ~is_seed & (y.value > 0) & allowed_at(batch.allowed, y.column)
            diff_ids, diff_scores = topk_entries(y.query[keep], y.column[keep], y.value[keep], B, top_k)
            return tiered_ranking([(seeds, rank_scores[:, :seed_k], SEED), (diff_ids, diff_scores, DIFFUSED),
                                   (rank_ids[:, seed_k:], rank_scores[:, seed_k:], FILL)], top_k)

    def _lexical(self, batch: QueryBatch, params: G3RAGSearch) -> bool:
        """Whether the relevance has its BM25 term: ``bm25_weight`` > 0 and the corpus and the question texts known."""
        return params.bm25_weight != 0 and batch.texts is not None and self.components.corpus is not None

    def _relevance(self, batch: QueryBatch, depth: int, params: G3RAGSearch) -> tuple[np.ndarray, np.ndarray]:
        """Top-``depth`` passages by ``cos + bm25_weight · bm25 / max bm25`` (float32, best first)."""
        n = len(self.components.X)
        d_ids, d_scores = batch.dense_topk(min(max(depth, params.fusion_depth), n))
        if not self._lexical(batch, params):
            return d_ids[:, :depth], d_scores[:, :depth]
        b_ids, b_scores = batch.bm25_topk(min(params.fusion_depth, n))
        cand = np.concatenate([d_ids, b_ids], axis=1)
        # the cosine of the dense candidates is their dense score; only the BM25 ones' rows are read
        b_cos = np.einsum("bd,bkd->bk", batch.Q, self.components.dense.rows(np.maximum(b_ids, 0)))
        rel = np.concatenate([d_scores, b_cos], axis=1).astype(np.float32)
        top_bm25 = np.where(np.isfinite(b_scores[:, :1]) & (b_scores[:, :1] > 0), b_scores[:, :1], 1.0)
        # lexical score of every candidate: its BM25 score if it is in the BM25 list, else 0
        in_bm25 = (cand[:, :, None] == b_ids[:, None, :]) & (b_ids[:, None, :] >= 0)
        lex = np.where(in_bm25, (b_scores / top_bm25)[:, None, :], 0.0).max(axis=2, initial=0.0)
        rel = rel + params.bm25_weight * lex
        rel[cand < 0] = -np.inf
        # drop duplicate candidates (in both lists) before taking the top
        out_ids = np.full((len(batch), depth), PAD_ID, np.int64)
        out = np.full((len(batch), depth), PAD_SCORE, np.float32)
        for b in range(len(batch)):
            uniq, first = np.unique(cand[b], return_index=True)
            keep = uniq >= 0
            u, r = uniq[keep], rel[b, first[keep]]
            order = np.lexsort((u, -r))[:depth]
            out_ids[b, :len(order)], out[b, :len(order)] = u[order], r[order]
        return out_ids, out

    def _names(self, params: G3RAGSearch) -> ChunkNames | None:
        """The passages' names for the name links (:mod:`.name_links`), or None when they are off:
        ``name_links`` = 0 or no corpus (then there is no extraction)."""
        if params.name_links == 0 or self.components.corpus is None:
            return None
        if self._chunk_names is None or self._chunk_names.n_chunks != len(self.components.X):
            self._chunk_names = ChunkNames.from_extraction(self.components.extraction(who=self.name),
                                                           self.components.corpus.titles)
        return self._chunk_names

    def _search_fused(self, batch: QueryBatch, top_k: int, params: G3RAGSearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The fused scoring: ``relevance + γ · y / max y`` with ``y = pᵀT`` (SPEC §1 query step 2),
        ``p = softmax(relevance/τ)`` over the candidates, plus ``name_links · y_n / max y_n`` with
        ``y_n`` the same p diffused over the name links among the candidates. Only the candidates
        are ranked, so y is computed at the candidates only (their CSR rows joined on their ids);
        with ``expand`` the passages the candidates' rows reach are ranked too, scored
        ``cos + γ · y / max y`` with the cosines of those pairs only. Passages outside both would be
        ranked by their cosine alone, which never exceeds the last candidate's relevance (the
        candidates are the ``max(candidate_depth, top_k)`` most relevant), so they are left out (an
        exact tie with a candidate, e.g. a duplicate passage, goes to the candidate).
        O(B · candidate_depth · n_neighbors)."""
        n, B = len(self.components.X), len(batch)
        m = min(max(params.candidate_depth, top_k), n)
        with timer("relevance"):
            cand, rel = self._relevance(batch, m, params)
            valid = cand >= 0
            b_of = np.broadcast_to(np.arange(B, dtype=np.int64)[:, None], cand.shape)
        score = np.where(valid, rel, -np.inf).astype(np.float32)
        extra: Entries | None = None  # expand: the reached passages that are not candidates
        chunk_names = self._names(params)
        if params.gamma > 0 or chunk_names is not None:
            with timer("diffusion"):
                top = np.where(valid[:, :1], rel[:, :1], 0.0)  # a row without candidates gets p = 0
                z = np.where(valid, np.exp((np.where(valid, rel, top) - top) / params.tau), 0.0)
                total = z.sum(axis=1, keepdims=True)
                p = np.divide(z, total, out=np.zeros_like(z), where=total > 0).astype(np.float32)
        if chunk_names is not None:
            with timer("name_links"):
                y_names = name_link_diffusion(chunk_names, cand, p, params.title_links)
                y_names_max = y_names.max(axis=1, keepdims=True, initial=np.float32(0.0))
                score += params.name_links * np.divide(y_names, y_names_max, out=np.zeros_like(y_names),
                                                     where=y_names_max > 0)
        if params.gamma > 0:
            with timer("diffusion"):
                if params.expand:
                    reached = diffusion_entries(self.graph_, cand, p)
                    y_cand = lookup(reached, n, pair_keys(cand, n))
                    y_max = np.zeros(B, np.float32)  # max y over every passage, as normalisation
                    np.maximum.at(y_max, reached.query, reached.value)
                    y_max = y_max[:, None]
                else:
                    y_cand = diffusion_at(self.graph_, cand, p, cand)
                    y_max = y_cand.max(axis=1, keepdims=True, initial=np.float32(0.0))
            with timer("ranking"):
                score += params.gamma * np.divide(y_cand, y_max, out=np.zeros_like(y_cand), where=y_max > 0)
                if params.expand:
                    _, in_cand = join(np.unique(pair_keys(cand, n)), reached.keys(n))
                    out = ~in_cand & allowed_at(batch.allowed, reached.column)
                    extra = Entries(reached.query[out], reached.column[out], reached.value[out])
        if extra is not None:
            with timer("cosine"):
                cos = pair_cosines(batch.Q, self.components.dense.rows, extra.query, extra.column)
            with timer("ranking"):
                y = extra.value
                scale = y_max[extra.query, 0]
                cos += params.gamma * np.divide(y, scale, out=np.zeros_like(y), where=scale > 0)
                return topk_entries(np.concatenate([b_of[valid], extra.query]),
                                    np.concatenate([cand[valid], extra.column]),
                                    np.concatenate([score[valid], cos]), B, top_k)
        with timer("ranking"):
            return topk_entries(b_of[valid], cand[valid], score[valid], B, top_k)
