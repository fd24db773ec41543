"""G3RAG: geometric gain graph retrieval, zero-token (SPEC §1).

Index (``fit``, SPEC §1 index steps 1-6): the density of every passage (step 1, op
``density``) and the hub penalty ``pen_j = exp(−beta · nd_j)`` (step 2, ``beta`` = 1) weight
the gain graph W (steps 3-5, op ``gain_knn``; CSR indptr/indices/data). T = W row-normalised
(step 6) is applied on the fly at query time, on the rows the query reads. Besides W, the pipeline keeps what
``add`` needs: the penalty of every passage (float32 [N]) and the size and density range of
the last build (saved as ``penalty.npy`` and ``density_build.npy``).

Adding passages (``Index.add`` → :meth:`G3RAG.add`, issue 13) updates W incrementally
(:mod:`hopgraph.engine.pipelines.g3rag.graph_update`): the new passages get their density and penalty, their
out-edges over all passages, and the reverse edges they create in existing rows. Rule:
*existing rows keep the density/penalty of their last build until* ``Index.compact()``
(which refits exactly). With the penalties held fixed the updated W equals a build's.

``mode`` chooses how W is built and nothing else (the query is the same in every mode):

* ``"knn"``: per row the top-``k`` edges (k = 32) with similarity in [``sim_min``,
  ``sim_max``] = [0.3, 0.9] (step 5, the blocked kernel; the N×N matrix never exists);
* ``"exact"``: every pair with similarity in [0, 1] (k = N − 1, band ignored) — step 5's
  dense reference graph, for small corpora and tests;
* ``"ann"``: the ``"knn"`` graph from faiss IVF candidates rescored exactly by the same
  epilogue (:mod:`hopgraph.engine.pipelines.g3rag.ann_graph`, issue 5);
* ``"auto"`` (default): ``"ann"`` on the CPU from ``ANN_MIN_N`` = 50,000 passages up,
  ``"knn"`` below it and on CUDA.

``density="auto"`` (default) uses the sampled density estimate SPEC §1 step 1 allows
(``density_samples`` = 4,096 columns) from ``SAMPLED_DENSITY_MIN_N`` = 50,000 passages up,
the exact density below.

Query (``search``), two scorings (query-time parameter ``scoring``):

* ``"mask"`` — the published query (SPEC §1 query steps 1-4): seeds = the ``seed_k`` (3)
  passages most similar to q (``seeds="dense"``; ``seeds="hybrid"``: the top of the
  dense+BM25 reciprocal-rank fusion instead), p uniform over the seeds, one diffusion step
  ``y = pᵀT``, seeds masked, result = seeds, then the top diffused passages, filled with
  the next most relevant. Scores are tiered so that they decrease down the list: seeds
  ``4 + cos``, diffused ``2 + y``, fill ``cos`` (or the fused rank score with hybrid seeds).
* ``"fused"`` (default, issue #6) — the diffused score is combined with query relevance
  instead of masking: relevance ``r = cos(q, ·) + lexical · bm25(q, ·)/max bm25``
  (``lexical`` = 0.15; the lexical term when the corpus was given to ``fit`` and the texts
  to ``search``) over the ``n_candidates`` (20) most relevant passages; seed vector
  ``p = softmax(r/τ)`` over them (``tau`` = 0.05); ``y = pᵀT``; final score
  ``r + γ · y / max y`` (``gamma`` = 0.02, in cosine units: a passage with the most graph
  support gains γ). Only the candidates are ranked; ``expand=True`` lets diffusion bring
  passages from outside them (scored by cosine + graph support).
  Name links (issue 15, default on when the corpus was given to ``fit``): the same p is diffused
  one step over the shared name graph among the candidates (:mod:`hopgraph.engine.pipelines.g3rag.name_links`:
  candidates linked by the extracted names they share, idf-weighted, rows normalised over the
  candidates), adding ``name_links · y_names / max y_names`` (``name_links`` = 0.1). Reason: the
  passage holding a question's bridge entity shares a rare name with the likely-relevant
  candidates, which MiniLM's geometry alone does not see (the gain graph's row of the top seed
  holds the partner passage about as often as it holds a non-gold candidate; a shared name is
  three times as frequent for the gold partner); the ``no_name_links`` ablation switches it off.
  Title links (``title_links`` = 2): a link s → j through j's own title weighs 1 + 2 times more
  (s names what j is about, the bridge hop); ablation ``no_title_links``.
  Extra passages reached with ``expand`` get the gain-graph support only.

Title bridge (issue 15, after the ranking; not in the SPEC, a query-time addition in the spirit of
SPEC §1's second hop): the top ``bridge_depth`` (20) of the ranking are re-ranked by
:func:`hopgraph.engine.components.title_mentions.bridge_rerank` — + ``bridge`` (0.4) for the passages whose title
the ``bridge_seeds`` (1) best passage mentions; ``bridge=0`` (the ``no_bridge`` ablation; also in
``no_graph`` and the published parameters) switches it off.

Published algorithm: ``G3RAGParams.published()`` = ``scoring="mask"``, ``seeds="dense"``,
``seed_k=3`` (SPEC §1 query steps 1-4: dense seeds, one diffusion step, seeds masked); it
changes only query-time parameters, so it reuses a fitted graph. ``G3RAG(published=True)``
is a constructor shortcut for ``G3RAG(G3RAGParams.published())``, not a parameter (it is not
stored; overrides given with it apply on top). ``mode="exact"`` does NOT select the
published query: it only changes how W is built. The paper's full algorithm on a small
corpus is ``G3RAG(published=True, mode="exact")`` (the ``published_exact`` ablation).

``ablations`` (``hopgraph eval --ablations``): ``published``, ``published_exact``,
``published_hybrid_seeds``, ``no_graph`` (relevance alone: γ = 0 and ``name_links`` = 0),
``no_name_links`` (the gain graph only), ``no_gain_graph`` (γ = 0: the name links only),
``no_title_links`` (shared names weighed alike),
``no_lexical``, ``expand``; their measured
Recall is in the README ("Defaults and the measurements behind them").

Query cost (issue 14): search runs in chunks of ``QUERY_CHUNK`` queries and allocates nothing
of size N — no ``[chunk, N]`` score, diffusion or cosine array
(:mod:`hopgraph.engine.pipelines.g3rag.diffusion`). Query step 1's seeds and the fused candidates come
from the shared dense index (and BM25) top lists; step 2's ``y = pᵀT`` reads only the CSR rows
of the seeds / candidates (≤ ``seed_k · k`` or ``n_candidates · k`` edges per query):
``"mask"`` keeps y on the passages those rows reach (steps 3-4 rank them), ``"fused"`` joins
the candidates' rows on the candidates' ids (only candidates are ranked), and ``expand=True``
ranks the candidates plus the passages their rows reach, with the cosines of those pairs
only. (The exception is ``seeds="hybrid"``: its dense+BM25 fusion, shared with the hybrid
pipeline, :func:`~hopgraph.engine.pipelines.hybrid.hybrid_ranking`, still fuses into a
``[chunk, N]`` array.) Filters (``allowed``; deleted passages): the walk may pass through a filtered passage,
which is never returned; k results come back whenever k passages pass. The scores equal the
former dense computation's (same float64 sums in the same order); the graph part of a query
costs O(B · n_candidates · k) whatever N is.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ....kernels.dispatch import DEVICES
from .ann_graph import CELL_SIZE, DEFAULT_NPROBE, ann_gain_knn, density_mode, graph_mode
from ...components.shared import QueryBatch
from ...errors import IndexFormatError, InputError
from ....kernels.csr import CSR, check_csr
from .graph_update import added_density, added_penalty, extend_gain_graph
from .name_links import ARRAY_FIELDS as NAMES_FIELDS, ARRAY_PREFIX as NAMES_PREFIX, ChunkNames, name_link_diffusion
from ...params import PipelineParams, choice, flag, integer, real
from ...ranking import PAD_ID, PAD_SCORE, topk_entries
from ...sparse import allowed_at, join
from .diffusion import Entries, diffusion_at, diffusion_entries, lookup, pair_cosines, pair_keys
from .penalty import hub_penalty
from ...storage import check_finite, load_array, load_arrays, save_arrays
from ...timing import StageTimer
from ...components import title_mentions as title_bridge
from ..base import Pipeline
from ..hybrid import hybrid_ranking

#: "ann" / "auto" (issue 5): IVF candidates rescored exactly, see hopgraph.engine.pipelines.g3rag.ann_graph
MODES = ("knn", "exact", "ann", "auto")
#: candidates an IVF ("ann") build scores per row (CELL_SIZE · DEFAULT_NPROBE): adding more passages than
#: this at once to an "ann" graph refits it (cheaper than scoring each new row against all N)
ANN_CANDIDATES_PER_ROW = CELL_SIZE * DEFAULT_NPROBE
#: queries per chunk of a search (one dense top-k call and one sparse diffusion per chunk)
QUERY_CHUNK = 256


@dataclass(frozen=True)
class G3RAGParams(PipelineParams):
    """G3RAG parameters (SPEC §1). Fit-time: the graph (``k``, ``sim_min``, ``sim_max``,
    ``beta``, ``mode``, ``density``, ``density_samples``). Query-time: the rest."""

    pipeline = "g3rag"
    k: int = integer(32, low=1)
    sim_min: float = real(0.3, low=-1.0, high=1.0)
    sim_max: float = real(0.9, low=-1.0, high=1.0)
    beta: float = real(1.0, low=0.0)
    mode: str = choice("auto", MODES)
    density: str = choice("auto", ("exact", "sampled", "auto"))
    density_samples: int = integer(4096, low=1)
    device: str = choice("auto", DEVICES)
    seed_k: int = integer(3, low=1, query=True)
    seeds: str = choice("dense", ("dense", "hybrid"), query=True)
    scoring: str = choice("fused", ("mask", "fused"), query=True)
    gamma: float = real(0.02, low=0.0, query=True)
    tau: float = real(0.05, low=0.0, low_open=True, query=True)
    lexical: float = real(0.15, low=0.0, query=True)
    n_candidates: int = integer(20, low=1, query=True)
    name_links: float = real(0.1, low=0.0, query=True)
    title_links: float = real(2.0, low=0.0, query=True)
    expand: bool = flag(False, query=True)
    hybrid_depth: int = integer(100, low=1, query=True)
    bridge: float = title_bridge.weight_field()
    bridge_seeds: int = title_bridge.seeds_field()
    bridge_depth: int = title_bridge.depth_field()

    def check(self) -> None:
        if self.sim_min > self.sim_max:
            raise self.invalid("sim_min", f"must not exceed sim_max = {self.sim_max}")

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §1 query: dense seeds, one diffusion step, seeds masked (``scoring="mask"``)."""
        return {"scoring": "mask", "seeds": "dense", "seed_k": 3, "bridge": 0.0}


@dataclass(frozen=True)
class DensityBuild:
    """What ``add`` needs of the last build (SPEC §1 steps 1-2): its passage count ``n`` (which
    fixes the sampled-density column sample) and its density range ``[low, high]`` (the
    normalisation of step 2). Stored as ``density_build.npy`` (float64 ``[n, low, high]``)."""

    n: int
    low: float
    high: float

    def array(self) -> np.ndarray:
        return np.array([self.n, self.low, self.high], np.float64)

    @classmethod
    def from_array(cls, a: np.ndarray, name: str, n_rows: int) -> "DensityBuild":
        """Read :meth:`array`'s output; :class:`IndexFormatError` unless ``1 <= n <= n_rows`` and
        ``low <= high``."""
        n, low, high = check_finite(a, name, (3,)).tolist()
        if n != int(n) or not 1 <= n <= n_rows or low > high:
            raise IndexFormatError(f"{name}: expected [n in 1..{n_rows}, low <= high], got {[n, low, high]}")
        return cls(int(n), low, high)


class G3RAG(Pipeline):
    """Geometric-gain graph retrieval (SPEC §1); see the module docstring for the options."""

    name = "g3rag"
    Params = G3RAGParams
    components_used = ("dense", "bm25", "extraction")
    ablations: ClassVar[dict[str, dict[str, Any]]] = {
        "published": G3RAGParams.published_values(),
        "published_exact": {**G3RAGParams.published_values(), "mode": "exact"},
        "published_hybrid_seeds": {**G3RAGParams.published_values(), "seeds": "hybrid"},
        "no_graph": {"gamma": 0.0, "name_links": 0.0, "bridge": 0.0},
        "no_bridge": {"bridge": 0.0},
        "no_name_links": {"name_links": 0.0},
        "no_gain_graph": {"gamma": 0.0},
        "no_title_links": {"title_links": 0.0},
        "no_lexical": {"lexical": 0.0},
        "expand": {"expand": True},
    }

    def __init__(self, params: G3RAGParams | dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(params, **overrides)
        self.graph: CSR | None = None
        #: the hub penalty of every passage (SPEC §1 step 2; float32 [N]), kept for :meth:`add`
        self.penalty: np.ndarray | None = None
        #: the last build's passage count and density range (:class:`DensityBuild`), for :meth:`add`
        self.density_build: DensityBuild | None = None
        #: the passages' names for the name links (issue 15), built from the shared extraction on first use
        self._chunk_names: ChunkNames | None = None

    # ------------------------------------------------------------------ index
    def _fit(self, progress: bool) -> None:
        """SPEC §1 index steps 1-6 (T is applied row-normalised at query time). BM25 (hybrid
        seeds / lexical relevance) is the shared component, used when the corpus is known."""
        from ....kernels import call

        n = len(self.X)
        node_density = call("density", self.X, mode=density_mode(self.density, n),
                            n_samples=self.density_samples, device=self.device)
        pen = hub_penalty(node_density, self.beta)
        self.penalty = pen
        self.density_build = DensityBuild(n, float(node_density.min()), float(node_density.max())) if n else None
        mode = graph_mode(self.mode, n, self.device)
        if mode == "ann":
            self.graph = ann_gain_knn(self.X, self.k, self.sim_min, self.sim_max, pen, progress=progress,
                                      ivf=self.components.dense.ivf)
        elif mode == "exact":
            self.graph = call("gain_knn", self.X, k=max(n - 1, 1), sim_min=0.0, sim_max=1.0, penalty=pen,
                              progress=progress, device=self.device)
        else:
            self.graph = call("gain_knn", self.X, k=self.k, sim_min=self.sim_min, sim_max=self.sim_max,
                              penalty=pen, progress=progress, device=self.device)
        if self.components.corpus is not None:
            self.components.bm25(who=self.name)
            self.components.extraction(who=self.name)  # name links (issue 15); saved with the index
        self._chunk_names = None
        self._names()  # built now, not on the first query (seconds at 10⁶ passages), and saved

    def _add(self, start: int, progress: bool) -> None:
        """Incremental update for rows ``[start, N)`` of X, which are new (issue 13).

        The new passages get their density (SPEC §1 step 1: over all N passages in exact
        density mode; in sampled mode over the last build's column sample) and penalty (step 2,
        normalised by the last build's density range), then W is extended (steps 3-5): their
        out-edges over all N passages and the reverse edges into existing rows, as a build would
        give with these penalties (:func:`~hopgraph.engine.pipelines.g3rag.graph_update.extend_gain_graph`).
        Existing rows keep the density/penalty of their last build until ``Index.compact()``.
        Mode ``"exact"`` grows k to N − 1; in mode ``"ann"`` (and ``"auto"``) the new rows are
        computed exactly by brute force over all passages, the existing rows keep their IVF
        edges — unless more than :data:`ANN_CANDIDATES_PER_ROW` passages are added at once, when
        the brute force would cost more than an IVF refit, which is done instead (exact). A pipeline loaded from an index saved without the penalty is refitted instead.
        """
        self._chunk_names = None  # the shared extraction was extended (Components.extend)
        build = self.density_build
        if build is None or self.penalty is None or len(self.penalty) != start or self.graph.n_rows != start:
            self._fit(progress)
            return
        n_new = len(self.X) - start
        if graph_mode(self.mode, len(self.X), self.device) == "ann" and n_new > ANN_CANDIDATES_PER_ROW:
            # brute force costs n_new · N similarities, an IVF refit about N · ANN_CANDIDATES_PER_ROW
            self._fit(progress)
            return
        dens = added_density(self.X, start, density_mode(self.density, build.n), n_build=build.n,
                             n_samples=self.density_samples, progress=progress)
        pen = np.concatenate([np.asarray(self.penalty, np.float32),
                              added_penalty(dens, build.low, build.high, self.beta)])
        n = len(self.X)
        if self.mode == "exact":
            k, sim_min, sim_max = max(n - 1, 1), 0.0, 1.0
        else:
            k, sim_min, sim_max = self.k, self.sim_min, self.sim_max
        self.graph = extend_gain_graph(self.graph, self.X, start, pen, k, sim_min, sim_max, progress=progress)
        self.penalty = pen

    def save(self, directory: Path) -> None:
        arrays = self.graph.arrays()
        if self.penalty is not None and self.density_build is not None:
            arrays.update(penalty=np.asarray(self.penalty, np.float32), density_build=self.density_build.array())
        if self._chunk_names is not None and self._chunk_names.n_chunks == len(self.X):
            arrays.update(self._chunk_names.arrays())
        save_arrays(directory, arrays)

    def _load(self, directory: Path) -> None:
        """Open the saved graph memory-mapped (no refit). The penalty and build range (for
        :meth:`add`) are read when present: an index saved before they were kept has neither, and
        its first ``add`` refits. The passages' names (name links) are read when saved, else built
        from the shared extraction on the first query."""
        arrays = load_arrays(directory, ["indptr", "indices", "data"])
        self.graph = check_csr(arrays["indptr"], arrays["indices"], arrays["data"], len(self.X),
                               f"{directory} graph")
        self._chunk_names = None
        names = [f"{NAMES_PREFIX}{k}" for k in NAMES_FIELDS]
        if all((directory / f"{name}.npy").is_file() for name in names):
            self._chunk_names = ChunkNames.from_arrays(load_arrays(directory, names), len(self.X), str(directory))
        if (directory / "penalty.npy").is_file() and (directory / "density_build.npy").is_file():
            self.penalty = check_finite(load_array(directory, "penalty"), f"{directory} penalty", (len(self.X),))
            if len(self.penalty) and float(self.penalty.min()) < 0:
                raise IndexFormatError(f"{directory} penalty: holds negative values")
            self.density_build = DensityBuild.from_array(load_array(directory, "density_build", mmap=False),
                                                         f"{directory} density_build", len(self.X))

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """SPEC §1 query steps 1-4 (``scoring="mask"``) or the fused scoring, in chunks of
        :data:`QUERY_CHUNK` queries; every array is sized by the seeds' and candidates' edges,
        none by N (issue 14). ``allowed`` (bool [N]): the passages that may be returned."""
        Q = self._check_queries(Q, top_k, query_texts)
        has_bm25 = self.components.corpus is not None
        if self.seeds == "hybrid" and self.scoring == "mask":
            if not has_bm25:
                raise InputError("G3RAG: hybrid seeds need the corpus at fit time: fit(X, corpus)")
            if query_texts is None:
                raise InputError("G3RAG: hybrid seeds need query_texts, one per query")
        # lexical relevance (fused scoring) is used when both the corpus and the texts are known
        needs_text = has_bm25 and query_texts is not None
        list_k = self._list_k(top_k)
        ids = np.full((len(Q), list_k), PAD_ID, np.int64)
        scores = np.full((len(Q), list_k), PAD_SCORE, np.float32)
        run = self._search_masked if self.scoring == "mask" else self._search_fused
        timer = self._timer()
        for c0 in range(0, len(Q), QUERY_CHUNK):
            texts = list(query_texts[c0:c0 + QUERY_CHUNK]) if needs_text else None
            batch = self.components.batch(Q[c0:c0 + QUERY_CHUNK], texts, allowed)
            ids[c0:c0 + QUERY_CHUNK], scores[c0:c0 + QUERY_CHUNK] = run(batch, list_k, timer)
        return self._bridge(ids, scores, top_k, allowed, timer)

    def _relevance_ranking(self, batch: QueryBatch, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Seed ranking of the masked scoring: dense cosine, or dense+BM25 RRF (``seeds="hybrid"``)."""
        if self.seeds == "dense":
            return batch.dense_topk(depth)
        return hybrid_ranking(batch, depth, self.hybrid_depth)

    def _search_masked(self, batch: QueryBatch, top_k: int, timer: StageTimer) -> tuple[np.ndarray, np.ndarray]:
        """The published query (SPEC §1 query steps 1-4) on the passages the seeds reach:
        step 1 seeds, step 2 ``y = pᵀT`` over the seeds' CSR rows only, step 3 seeds masked (and
        passages with y = 0, and filtered ones: the walk may pass through them, they are never
        returned), step 4 seeds, then the top diffused passages, filled with the next most
        relevant."""
        n, B = len(self.X), len(batch)
        seed_k = min(self.seed_k, n)
        with timer("seeds"):
            rank_ids, rank_scores = self._relevance_ranking(batch, min(seed_k + top_k, n))
        seeds = rank_ids[:, :seed_k]
        with timer("diffusion"):
            y = diffusion_entries(self.graph, seeds, None)
        with timer("ranking"):
            _, is_seed = join(np.unique(pair_keys(seeds, n)), y.keys(n))  # step 3: seed masking
            keep = ~is_seed & (y.value > 0) & allowed_at(batch.allowed, y.column)
            diff_ids, diff_scores = topk_entries(y.query[keep], y.column[keep], y.value[keep], B, top_k)
            ids = np.full((B, top_k), PAD_ID, np.int64)
            scores = np.full((B, top_k), PAD_SCORE, np.float32)
            for b in range(B):
                chosen: list[int] = []
                tiers: list[float] = []
                for j, s in zip(seeds[b], rank_scores[b, :seed_k]):
                    if j >= 0:
                        chosen.append(int(j)); tiers.append(4.0 + float(s))
                for j, s in zip(diff_ids[b], diff_scores[b]):
                    if j >= 0 and len(chosen) < top_k:
                        chosen.append(int(j)); tiers.append(2.0 + float(s))
                for j, s in zip(rank_ids[b, seed_k:], rank_scores[b, seed_k:]):
                    if len(chosen) >= top_k:
                        break
                    if j >= 0 and j not in chosen:
                        chosen.append(int(j)); tiers.append(float(s))
                m = min(len(chosen), top_k)
                ids[b, :m], scores[b, :m] = chosen[:m], tiers[:m]
        return ids, scores

    def _relevance(self, batch: QueryBatch, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``depth`` passages by ``cos + lexical · bm25/max bm25`` (float32, best first)."""
        n = len(self.X)
        d_ids, d_scores = batch.dense_topk(min(max(depth, self.hybrid_depth), n))
        if self.lexical == 0 or batch.texts is None:
            return d_ids[:, :depth], d_scores[:, :depth]
        b_ids, b_scores = batch.bm25_topk(min(self.hybrid_depth, n))
        cand = np.concatenate([d_ids, b_ids], axis=1)
        # the cosine of the dense candidates is their dense score; only the BM25 ones' rows are read
        b_cos = np.einsum("bd,bkd->bk", batch.Q, self.components.dense.rows(np.maximum(b_ids, 0)))
        rel = np.concatenate([d_scores, b_cos], axis=1).astype(np.float32)
        top_bm25 = np.where(np.isfinite(b_scores[:, :1]) & (b_scores[:, :1] > 0), b_scores[:, :1], 1.0)
        # lexical score of every candidate: its BM25 score if it is in the BM25 list, else 0
        in_bm25 = (cand[:, :, None] == b_ids[:, None, :]) & (b_ids[:, None, :] >= 0)
        lex = np.where(in_bm25, (b_scores / top_bm25)[:, None, :], 0.0).max(axis=2, initial=0.0)
        rel = rel + self.lexical * lex
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

    def _names(self) -> ChunkNames | None:
        """The passages' names for the name links (:mod:`hopgraph.engine.pipelines.g3rag.name_links`), or None when
        they are off: ``name_links`` = 0 or no corpus (then there is no extraction)."""
        if self.name_links == 0 or self.components.corpus is None:
            return None
        if self._chunk_names is None or self._chunk_names.n_chunks != len(self.X):
            self._chunk_names = ChunkNames.from_extraction(self.components.extraction(who=self.name),
                                                           self.components.corpus.titles)
        return self._chunk_names

    def _search_fused(self, batch: QueryBatch, top_k: int, timer: StageTimer) -> tuple[np.ndarray, np.ndarray]:
        """Issue #6 scoring: ``relevance + γ · y / max y`` with ``y = pᵀT`` (SPEC §1 query step 2),
        ``p = softmax(relevance/τ)`` over the candidates, plus ``name_links · y_n / max y_n`` with
        ``y_n`` the same p diffused over the name links among the candidates (issue 15). Only the candidates are ranked, so y is
        computed at the candidates only (their CSR rows joined on their ids); with ``expand`` the
        passages the candidates' rows reach are ranked too, scored ``cos + γ · y / max y`` with
        the cosines of those pairs only. Passages outside both would be ranked by their cosine
        alone, which never exceeds the last candidate's relevance (the candidates are the
        ``max(n_candidates, top_k)`` most relevant), so they are left out (an exact tie with a
        candidate, e.g. a duplicate passage, goes to the candidate)."""
        n, B = len(self.X), len(batch)
        m = min(max(self.n_candidates, top_k), n)
        with timer("relevance"):
            cand, rel = self._relevance(batch, m)
            valid = cand >= 0
            b_of = np.broadcast_to(np.arange(B, dtype=np.int64)[:, None], cand.shape)
        score = np.where(valid, rel, -np.inf).astype(np.float32)
        extra: Entries | None = None  # expand: the reached passages that are not candidates
        chunk_names = self._names()
        if self.gamma > 0 or chunk_names is not None:
            with timer("diffusion"):
                top = np.where(valid[:, :1], rel[:, :1], 0.0)  # a row without candidates gets p = 0
                z = np.where(valid, np.exp((np.where(valid, rel, top) - top) / self.tau), 0.0)
                total = z.sum(axis=1, keepdims=True)
                p = np.divide(z, total, out=np.zeros_like(z), where=total > 0).astype(np.float32)
        if chunk_names is not None:
            with timer("name_links"):
                y_names = name_link_diffusion(chunk_names, cand, p, self.title_links)
                y_names_max = y_names.max(axis=1, keepdims=True, initial=np.float32(0.0))
                score += self.name_links * np.divide(y_names, y_names_max, out=np.zeros_like(y_names),
                                                     where=y_names_max > 0)
        if self.gamma > 0:
            with timer("diffusion"):
                if self.expand:
                    reached = diffusion_entries(self.graph, cand, p)
                    y_cand = lookup(reached, n, pair_keys(cand, n))
                    y_max = np.zeros(B, np.float32)  # max y over every passage, as normalisation
                    np.maximum.at(y_max, reached.query, reached.value)
                    y_max = y_max[:, None]
                else:
                    y_cand = diffusion_at(self.graph, cand, p, cand)
                    y_max = y_cand.max(axis=1, keepdims=True, initial=np.float32(0.0))
            with timer("ranking"):
                score += self.gamma * np.divide(y_cand, y_max, out=np.zeros_like(y_cand), where=y_max > 0)
                if self.expand:
                    _, in_cand = join(np.unique(pair_keys(cand, n)), reached.keys(n))
                    out = ~in_cand & allowed_at(batch.allowed, reached.column)
                    extra = Entries(reached.query[out], reached.column[out], reached.value[out])
        if extra is not None:
            with timer("cosine"):
                cos = pair_cosines(batch.Q, self.components.dense.rows, extra.query, extra.column)
            with timer("ranking"):
                y = extra.value
                scale = y_max[extra.query, 0]
                cos += self.gamma * np.divide(y, scale, out=np.zeros_like(y), where=scale > 0)
                return topk_entries(np.concatenate([b_of[valid], extra.query]),
                                    np.concatenate([cand[valid], extra.column]),
                                    np.concatenate([score[valid], cos]), B, top_k)
        with timer("ranking"):
            return topk_entries(b_of[valid], cand[valid], score[valid], B, top_k)
