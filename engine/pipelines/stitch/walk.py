"""The personalised-PageRank walk on STITCH's chunk graph (SPEC §2 steps 6–7), shared by ``stitch`` and
``ppr_binary``; the two differ only in their chunk prior (steps 1–5).

Per batch: the relevance (step 7: clipped cosine on the dense top list, or the dense + BM25 RRF
scores), the prior p (the subclass's :meth:`ChunkGraphWalk.prior_rows`), mixed with the relevance on
the ``n_seeds`` most relevant chunks (``prior_mix``) and restricted to the filter; ``batched_ppr``
with damping ``damping`` to tolerance ``tol`` (``localise=True``: each row's walk confined to its
activated region, the numerical support of p and its ``region_hops``-hop neighbourhood, mass leaving
it dropped); the ranking ``(1 − balance) π / max π + balance · rel / max rel`` (``fusion="rrf"``: the
reciprocal-rank fusion of the two lists). Per-question vectors are
:class:`~hopgraph.engine.pipelines.stitch.local_rows.LocalRows` on the chunks where they can be
non-zero: nothing of size [B, N] is made, except for rows whose prior is uniform over the corpus
(Σ I = 0, SPEC §2.5, or no mass left after the filter), which are walked apart on every chunk.
When fewer than k chunks score above 0, the lowest allowed ids follow with score 0.
Where the index's graph store holds the prior's arrays (STITCH's influence, ``ppr_binary``'s name
groups) and P on the device (:meth:`ChunkGraphWalk.resident_prior`), steps 5–7 run there for the
rows walked locally (:mod:`.device_walk`): the relevance is read from the batch's top lists on the
device, and only the top-k ids and scores come back.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy, as_tensor
from ...components.extraction import Extraction, load_extractions
from ...components.hybrid_ranking import RRF_K, hybrid_ranking, hybrid_ranking_tensors
from ...components.query_batch import QueryBatch
from ...graphs.store import device_arrays, kernel_graph
from ...cost import PASSAGE_ARRAYS, Cost, IndexShape
from ...errors import IndexFormatError, InputError
from ....kernels.csr import CSR
from ...params import FitParams, choice, flag, integer, path, real
from ...ranking import reciprocal_rank_fusion, topk_rows
from ...sparse import allowed_at
from ...ranking import fill_lowest, topk_entries
from ...timing import StageTimer
from ..base import Needs, Pipeline
from ..title_bridge import BridgeSearch, TitleBridge
from ...storage import check_unit_rows, load_array, save_arrays
from .hypergraph import TEXT_EMB_DTYPE, TopicHypergraph, build_hypergraph
from .device_walk import (DeviceRows, cosine_rows, finished_prior, fused, local_walk, on_device, ranked,
                          resident_search, whole_walk)
from .local_graph import local_transition, neighbour_entries
from .local_rows import LocalRows

RELEVANCES = ("dense", "hybrid")
FUSIONS = ("linear", "rrf")
#: how deep the relevance lists are read (dense top list, hybrid fusion)
HYBRID_DEPTH = 100
#: chunks whose prior is below this fraction of the row's largest are not in the activated region's
#: support: float noise (a similarity that is 0 in exact arithmetic comes out as ±1e-8 depending on how
#: BLAS blocks the batch), which must not make a question's results depend on its batch
SUPPORT_RTOL = 1e-6
#: :func:`union_entries` marks a [B, n] bitmap instead of sorting keys from this share of its cells
DENSE_ENTRIES_SHARE = 1 / 8
#: chunks the cost model assumes reached per chunk per hop of the walk region (the real fan-out is smaller)
REGION_FANOUT = 64


@dataclass(frozen=True)
class ChunkGraphFit(FitParams):
    """Fit parameters of the chunk graph (SPEC §2 "Index"): passage titles as entities
    (``title_entities``), 3+-digit numbers as entities (``numbers``), name groups larger than
    ``max_group_chunks`` link no chunks, an ``extractions`` JSON-lines file instead of the zero-token
    extraction."""

    pipeline = "ppr_binary"
    title_entities: bool = flag(True)
    numbers: bool = flag(True)
    max_group_chunks: int = integer(64, low=1)
    extractions: str | None = path(None)


@dataclass(frozen=True)
class WalkSearch(BridgeSearch):
    """Search parameters of the walk and the ranking (SPEC §2 steps 5–7)."""

    pipeline = "ppr_binary"
    renamed = {"d": "damping", "seed_k": "n_seeds"}
    damping: float = real(0.85, low=0.0, high=1.0, low_open=True, high_open=True)
    n_seeds: int = integer(8, low=1, serving_bound=256)
    balance: float = real(0.3, low=0.0, high=1.0)
    relevance: str = choice("dense", RELEVANCES)
    prior_mix: float = real(0.0, low=0.0, high=1.0)
    ppr: bool = flag(True)
    localise: bool = flag(True)
    region_hops: int = integer(1, low=0, serving_bound=3)
    tol: float = real(1e-6, low=0.0, low_open=True)
    max_iter: int = integer(100, low=1, serving_bound=1_000)
    fusion: str = choice("linear", FUSIONS)
    bridge: float = real(0.0, low=0.0)


F = TypeVar("F", bound=ChunkGraphFit)
S = TypeVar("S", bound=WalkSearch)


def union_entries(qs: tuple[np.ndarray, ...], cs: tuple[np.ndarray, ...], B: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (row, column) pairs of the given entry lists, ordered by row then column (int64):
    the activated regions of SPEC §2 step 6 grown by a hop. Sorted keys while the entries are few, a
    bool [B, n] bitmap from :data:`DENSE_ENTRIES_SHARE` of its cells; both give the same pairs in the
    same order."""

    total = sum(len(q) for q in qs)
    if total >= DENSE_ENTRIES_SHARE * B * n:
        mask = np.zeros((B, n), bool)
        for q, c in zip(qs, cs):
            mask[q, c] = True
        rows, cols = np.nonzero(mask)
        return rows.astype(np.int64), cols.astype(np.int64)
    key = np.unique(np.concatenate([np.asarray(q, np.int64) * np.int64(n) + c for q, c in zip(qs, cs)]))
    return key // max(n, 1), key % max(n, 1)


class ChunkGraphWalk(Pipeline[F, S]):
    """Base of ``stitch`` and ``ppr_binary``: the chunk graph, the walk and the ranking (module
    docstring). Subclasses give the chunk prior (:meth:`prior_rows`) and the topic/description text
    embeddings (:meth:`_text_embeddings`). Fitted state: ``hypergraph_``."""

    FitParams = ChunkGraphFit
    SearchParams = WalkSearch
    needs = Needs(corpus=True, query_texts=True)
    components_used = ("dense", "bm25", "extraction")
    runs_kernels = True
    rerank = (TitleBridge(),)
    default_batch_size = 64
    default_threads = 1
    stages = ("relevance", "prior", "ppr", "ranking")

    def __init__(self, params: dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.hypergraph_: TopicHypergraph | None = None
        self._cache: dict[str, Any] = {}

    # ------------------------------------------------------------------ cost
    @classmethod
    def cost(cls, shape: IndexShape, params: S, batch: int, k: int, grouped: bool = False) -> Cost:
        """:meth:`Pipeline.cost` plus the walk: a region of ``reach · REGION_FANOUT ^ region_hops``
        chunks (at most N; all N without ``localise``) grown from the :meth:`cost_reach` chunks and the
        ranked list, iterated ``max_iter`` times (once without ``ppr``), 6 float64 vectors over it."""
        n, depth = max(shape.n, 1), cls.cost_depth(shape, params, k, grouped)
        reach = cls.cost_reach(params) + depth
        region = min(n, reach * REGION_FANOUT ** params.region_hops) if params.localise else n
        iterations = params.max_iter if params.ppr else 1
        own = Cost(batch * (n + region * iterations * 8), PASSAGE_ARRAYS * n + batch * region * 6 * 8)
        return super().cost(shape, params, batch, k, grouped) + own

    @classmethod
    def cost_reach(cls, params: S) -> int:
        """The chunks a question's walk region grows from besides its ranked list: its seeds."""
        return params.n_seeds

    # ------------------------------------------------------------------ fit
    def _extraction(self) -> Extraction:
        corpus = self.components.require_corpus(self.name)
        fp = self.fit_params
        return load_extractions(fp.extractions, corpus) if fp.extractions else \
            self.components.extraction(fp.title_entities, fp.numbers, who=self.name)

    def _fit(self, progress: bool) -> None:
        ex = self._extraction()
        self.hypergraph_ = build_hypergraph(ex, self._text_embeddings(ex, progress), self.fit_params.max_group_chunks)
        self.components.bm25(who=self.name)
        self._reset_caches()

    @abstractmethod
    def _text_embeddings(self, ex: Extraction, progress: bool, old: np.ndarray | None = None,
                         first_row: int = 0) -> np.ndarray:
        """The embeddings of ``ex.texts`` (``old``: those of its first texts, kept; the texts after
        them are first used by the passages from ``first_row`` on)."""

    def _add(self, start: int, progress: bool) -> None:
        """Passages ``[start, N)`` were appended: the shared extraction was extended (old text ids
        kept), so the old text embeddings are kept and only the new texts are embedded; the
        hypergraph and its chunk graph are rebuilt from the extraction (arithmetic only). Equal to a
        fresh fit except for the extraction's one approximation (a sentence-initial span of an old
        passage), which ``Index.compact()`` removes. With an ``extractions`` file: refitted."""
        if self.fit_params.extractions:
            self._fit(progress)
            return
        ex = self._extraction()
        n, old = len(self.components.X), self.hypergraph_.text_emb
        if ex.n_chunks != n or len(ex.texts) < len(old):
            raise InputError(f"{self.name}: the extraction covers {ex.n_chunks} passages and {len(ex.texts)} texts, "
                             f"the index {n} passages and {len(old)} embedded texts")
        new = build_hypergraph(ex, self._text_embeddings(ex, progress, old, start),
                               self.fit_params.max_group_chunks)
        self.hypergraph_ = new.with_stored_rows(self.hypergraph_, self.components.graphs)
        self.components.bm25(who=self.name)
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._cache = {}

    def _save(self, directory: Path) -> None:
        self.hypergraph_.save(directory / "hypergraph", self.components.graphs)

    def _snapshot(self) -> TopicHypergraph:
        return self.hypergraph_

    def _save_delta(self, directory: Path, since: TopicHypergraph, start: int, stop: int) -> str | None:
        """The embeddings of the texts added since ``since`` (``text_emb_tail.npy``): the hypergraph
        is arithmetic on the extraction and rebuilt when the index is opened. None (stored whole)
        with an ``extractions`` file."""
        if self.fit_params.extractions:
            return None
        save_arrays(directory, {"text_emb_tail": self.hypergraph_.text_emb[len(since.text_emb):]})
        return "delta"

    def _load_deltas(self, parts: list[tuple[Path, int]]) -> None:
        """The stored text embeddings with the segments' new ones appended, and the hypergraph built
        from the index's (extended) extraction over them."""
        dim = self.hypergraph_.text_emb.shape[1]
        tails = [self.hypergraph_.text_emb]
        for d, _ in parts:
            tail = load_array(d, "text_emb_tail")
            if tail.ndim != 2 or tail.shape[1] != dim:
                raise IndexFormatError(f"{d / 'text_emb_tail.npy'}: shape {list(tail.shape)}, expected [*, {dim}]")
            if dim:
                check_unit_rows(tail, str(d / "text_emb_tail.npy"))
            tails.append(tail)
        ex = self._extraction()
        text_emb = np.concatenate([np.asarray(t, TEXT_EMB_DTYPE) if dim else np.asarray(t) for t in tails])
        if len(text_emb) != len(ex.texts) or ex.n_chunks != parts[-1][1]:
            raise IndexFormatError(f"{parts[-1][0]}: {len(text_emb)} text embeddings for {len(ex.texts)} "
                                   f"extraction texts over {ex.n_chunks} passages")
        self.hypergraph_ = build_hypergraph(ex, text_emb, self.fit_params.max_group_chunks)
        self._reset_caches()

    def _load(self, directory: Path) -> None:
        X = self.components.X
        self.hypergraph_ = TopicHypergraph.load(directory / "hypergraph", mmap=True, n_chunks=self._stored_rows,
                                                store=self.components.graphs)
        dim = self.hypergraph_.text_emb.shape[1]
        if dim != self._text_dim():
            raise IndexFormatError(f"{directory / 'hypergraph' / 'text_emb.npy'}: dimension {dim}, "
                                   f"the index {X.shape[1]}")
        self._reset_caches()

    def _text_dim(self) -> int:
        """The dimension of the text embeddings this pipeline keeps."""
        return int(self.components.X.shape[1])

    # ------------------------------------------------------------------ search
    def _search_batch(self, batch: QueryBatch, k: int, params: S, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        if batch.device is not None and self.resident_prior():
            return resident_search(self, batch, k, params, timer)
        return self._ranking(self.batch_scores(batch, timer, k, params), k, batch, timer)

    def _ranking(self, final: LocalRows | DeviceRows, k: int, batch: QueryBatch, timer: StageTimer
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The top-``k`` of the final scores (on the device when they are there: :func:`~.device_walk.ranked`;
        :func:`~.device_walk.resident_search` runs steps 5–7 there in one pass)."""
        with timer("ranking"):
            if isinstance(final, DeviceRows):
                return ranked(final, k, batch.allowed_tensor())
            return rank_local(final, k, batch.allowed)

    def scores(self, Q: np.ndarray, texts: list[str], timer: StageTimer | None = None,
               params: S | None = None) -> np.ndarray:
        """Final chunk scores [B, N] (step 7) of a batch of normalised queries, as a dense array
        (for inspection and tests: ``search`` never makes it)."""
        return on_host(self.batch_scores(self.components.batch(Q, texts), timer, params=params)).dense()

    def batch_scores(self, batch: QueryBatch, timer: StageTimer | None = None, top_k: int = 1,
                     params: S | None = None) -> LocalRows | DeviceRows:
        """Final scores of a :class:`QueryBatch` (step 7) on the chunks where they can be non-zero
        (on local columns, module docstring): its filter zeroes the relevance and the prior of the
        passages it excludes; the walk may pass through them; the caller masks the ranking. Left on
        the device (:class:`~.device_walk.DeviceRows`) when every row was walked there."""
        timer, params = timer or StageTimer(), params or self.search_defaults
        resident = batch.device is not None and self.resident_prior()
        with timer("relevance"):
            rel = self.relevance_rows(batch, top_k, params, resident=resident)
        with timer("prior"):
            p, uniform = self.prior_rows(batch, rel, params)
        return self.scores_of(batch, rel, p, uniform, params, timer)

    def scores_of(self, batch: QueryBatch, rel: LocalRows | DeviceRows, p: LocalRows | DeviceRows,
                  uniform: np.ndarray | torch.Tensor, params: S, timer: StageTimer) -> LocalRows | DeviceRows:
        """:meth:`batch_scores` from the batch's relevance ``rel`` and prior ``p`` (steps 5–7), ``uniform``
        the rows whose prior is uniform over the corpus."""
        uniform = as_numpy(uniform)
        # rows whose prior is uniform over the corpus (Σ I = 0, SPEC §2.5), or left without mass by
        # the filter, need every chunk: they are done apart (on the host), so the other rows stay
        # local (on the device where the graph store holds the prior there: DeviceRows)
        parts, out = [], None
        local = np.flatnonzero(~uniform)
        with timer("prior"):
            allowed = batch.allowed_tensor() if isinstance(p, DeviceRows) else batch.allowed
            p_loc, empty = self.finish_prior(p.rows(local), rel.rows(local), allowed, params)
        glob = np.union1d(np.flatnonzero(uniform), local[empty])
        keep = np.flatnonzero(~empty)
        if len(keep) or not len(glob):
            parts.append((local[keep], p_loc.rows(keep), rel.rows(local[keep])))
        if len(glob):
            with timer("prior"):
                full = on_host(p.rows(glob)).on(np.arange(p.n, dtype=np.int64))
                values = full.values
                values[uniform[glob]] = 1.0 / max(p.n, 1)
                rel_glob = on_host(rel.rows(glob))
                p_glob, _ = self.finish_prior(full, rel_glob, batch.allowed, params)
            parts.append((glob, p_glob, rel_glob))
        for rows, pr, rl in parts:
            if params.ppr:
                with timer("ppr"):
                    pi = self.walk(pr, params) if isinstance(pr, LocalRows) else self.resident_walk(pr, params)
            else:
                pi = pr
            final = self.final_scores(batch, rows, pi, rl, params, timer)
            if len(parts) == 1:
                return final
            out = on_host(final) if out is None else merge_rows(out, on_host(final))
        order = np.concatenate([r for r, _, _ in parts])
        return out.rows(np.argsort(order, kind="stable"))

    def final_scores(self, batch: QueryBatch, rows: np.ndarray, pi: LocalRows | DeviceRows,
                     rel: LocalRows | DeviceRows, params: S, timer: StageTimer) -> LocalRows | DeviceRows:
        """Step 7 for the batch rows ``rows``: π fused with their relevance ``rel`` (``relevance="dense"``:
        the cosine of every chunk π reaches, exactly); on the device when π is there
        (:func:`~.device_walk.fused`, the cosine from the held passage embeddings)."""
        with timer("ranking"):
            if isinstance(pi, DeviceRows):
                dev = pi.values.device
                rel = on_device(rel, dev)
                if params.relevance == "dense":
                    Q = batch.question_tensor()
                    if len(rows) != len(batch) or not np.array_equal(rows, np.arange(len(batch))):
                        Q = Q[as_tensor(np.asarray(rows, np.int64), device=dev, name="batch rows")]
                    rel = cosine_rows(Q, self._held_passages(), torch.unique(torch.cat([pi.cols, rel.cols])),
                                      batch.allowed_tensor(), pi.n)
                return fused(pi, rel, params.balance, params.fusion, HYBRID_DEPTH, RRF_K)
            rel = on_host(rel)
            if params.relevance == "dense":
                rel = self.cosine_on(batch, rows, np.union1d(pi.cols, rel.cols))
            return self.fuse(pi, rel, params)

    def walk_held(self) -> bool:
        """Whether the graph store holds the walk's arrays (P and its column sums) on the device
        (:func:`~hopgraph.engine.graphs.store.device_arrays`, each copied once)."""
        return device_arrays(self.transition) is not None and device_arrays(self._column_sums()) is not None

    def resident_prior(self) -> bool:
        """Whether a batch's prior is made on the device (so are its relevance, walk and ranking): the
        graph store holds the walk's arrays, the passage embeddings and the prior's arrays there."""
        return self.walk_held() and self._held_passages() is not None

    def _held_passages(self) -> Any:
        """X as a tensor where the graph store holds it on the device (step 7's cosine), else None."""
        if "X" not in self._cache:
            self._cache["X"] = self.components.graphs.hold(self.components.X, f"{self.name} X")
        return device_arrays(self._cache["X"])

    def finish_prior(self, p: LocalRows | DeviceRows, rel: LocalRows, allowed: np.ndarray | None, params: S
                     ) -> tuple[LocalRows | DeviceRows, np.ndarray]:
        """Prior mixing (step 5, ``prior_mix``) and the filter (:func:`masked_distribution`);
        returns the prior and which rows have no mass left (only possible on local columns). A
        prior held on the device is finished there (:func:`~.device_walk.finished_prior`)."""
        if isinstance(p, DeviceRows):
            p, empty = finished_prior(p, rel, params.prior_mix, params.n_seeds, allowed)
            return p, np.zeros(len(p), bool) if empty is None else as_numpy(empty)
        rel = on_host(rel)
        if params.prior_mix > 0:
            cols = np.union1d(p.cols, rel.cols)
            p, r = p.on(cols), rel.on(cols)
            p = p.with_values((1.0 - params.prior_mix) * p.values
                              + params.prior_mix * top_k_distribution(r.values, params.n_seeds, p.n))
        return masked_distribution(p, allowed)

    def relevance_rows(self, batch: QueryBatch, top_k: int = 1, params: S | None = None, resident: bool = False
                       ) -> LocalRows | DeviceRows:
        """Query relevance (step 7) ≥ 0 on the chunks where it matters: clipped cosine on the dense
        top ``max(HYBRID_DEPTH, top_k, seed_k)`` (every other chunk scores below all of them, so it
        can enter the top ``top_k`` only with π > 0, where it is scored exactly), or the hybrid RRF
        scores of the fused top ``HYBRID_DEPTH`` (0 elsewhere). Drawn under the batch's filter.
        ``resident``: from the batch's top lists on the device, left there (:class:`DeviceRows`)."""
        n, params = len(self.components.X), params or self.search_defaults
        if resident:
            if params.relevance == "dense":
                ids, sc = batch.dense_topk_tensors(max(HYBRID_DEPTH, top_k, params.n_seeds))
                return DeviceRows.from_ids(ids, sc.clamp_min(0.0), n)
            ids, sc = hybrid_ranking_tensors(batch, HYBRID_DEPTH, depth=HYBRID_DEPTH)
            return DeviceRows.from_ids(ids, sc, n)
        if params.relevance == "dense":
            ids, sc = batch.dense_topk(max(HYBRID_DEPTH, top_k, params.n_seeds))
            return LocalRows.from_ids(ids, np.maximum(sc, 0.0), n, np.float32)
        ids, sc = hybrid_ranking(batch, HYBRID_DEPTH, depth=HYBRID_DEPTH)
        return LocalRows.from_ids(ids, sc, n, np.float32)

    def cosine_on(self, batch: QueryBatch, rows: np.ndarray, cols: np.ndarray) -> LocalRows:
        """Dense relevance ``max(0, cos)`` of the batch rows ``rows`` at chunks ``cols`` (0 at the
        passages the filter excludes): step 7's relevance term on π's support, where the dense
        top list alone would leave it 0."""
        sims = np.maximum(batch.Q[rows] @ np.asarray(self.components.dense.rows(cols), np.float32).T, 0.0)
        if batch.allowed is not None:
            sims[:, ~np.asarray(batch.allowed)[cols]] = 0.0
        return LocalRows(np.asarray(cols, np.int64), sims.astype(np.float32), len(self.components.X))

    @abstractmethod
    def prior_rows(self, batch: QueryBatch, rel: LocalRows, params: S) -> tuple[LocalRows | DeviceRows, np.ndarray]:
        """The chunk prior (SPEC §2 steps 1–5) on its support (or held on the device,
        :class:`~.device_walk.DeviceRows`, finished and walked there: :meth:`finish_prior`,
        :meth:`walk`), and the rows whose prior is uniform."""

    def prior(self, batch: QueryBatch, rel: LocalRows | None = None, params: S | None = None) -> np.ndarray:
        """STITCH chunk prior p [B, N] (steps 1–5), float64 rows summing to 1, dense (for inspection and tests; search never makes it)."""
        params = params or self.search_defaults
        p, uniform = self.prior_rows(batch, rel if rel is not None else self.relevance_rows(batch, 1, params), params)
        out = on_host(p).dense()
        out[as_numpy(uniform)] = 1.0 / max(p.n, 1)
        return out

    def region(self, p: LocalRows, params: S | None = None) -> LocalRows:
        """Activated region (bool LocalRows): the numerical support of p (``p ≥ SUPPORT_RTOL · max p``,
        per row, so a row's region depends on that row only) and its ``region_hops``-hop
        neighbourhood (SPEC §2 step 6, localised; default one hop)."""
        params = params or self.search_defaults
        v = np.asarray(p.values)
        top = v.max(axis=1, keepdims=True) if v.shape[1] else np.zeros((len(v), 1))
        q, j = np.nonzero((v > 0) & (v >= SUPPORT_RTOL * top))
        cols = p.cols[j]
        if params.region_hops:
            adj = self._adjacency()
            for _ in range(params.region_hops):
                nq, nc = neighbour_entries(adj.indptr, adj.indices, q, cols)
                q, cols = union_entries((q, nq), (cols, nc), len(v), p.n)
        return LocalRows.from_entries(q, cols, True, len(v), p.n, bool)

    def walk(self, p: LocalRows | DeviceRows, params: S | None = None) -> LocalRows:
        """π of each row (step 6): ``batched_ppr`` on the chunk graph restricted to the union of the
        batch's regions plus a sink (:func:`local_transition`), each row's walk confined to its own
        region; ``localise=False``: the global walk (every chunk, as the SPEC's unlocalised PPR). A prior
        held on the device is walked there (:meth:`resident_walk`)."""
        params = params or self.search_defaults
        if isinstance(p, DeviceRows):
            return self.resident_walk(p, params).host()
        if not params.localise:
            full = p.on(np.arange(p.n, dtype=np.int64))
            pi, _ = kernels.call("batched_ppr", self.whole_transition(), full.values, d=params.damping, tol=params.tol,
                                 max_iter=params.max_iter, device=self.device)
            return full.with_values(as_numpy(pi))
        reg = self.region(p, params)
        if not len(reg.cols):
            return LocalRows.empty(len(p), p.n)
        P = self.transition
        sub = local_transition(P, self._column_sums(), reg.cols)
        pr = np.zeros((len(p), len(reg.cols) + 1), np.float64)
        pr[:, :-1] = p.on(reg.cols).values
        region = np.zeros(pr.shape, bool)
        region[:, :-1] = reg.values
        pi, _ = kernels.call("batched_ppr", sub, pr, d=params.damping, tol=params.tol, max_iter=params.max_iter,
                             region=region, device=self.device)
        return LocalRows(reg.cols, as_numpy(pi)[:, :-1], p.n)

    def resident_walk(self, p: DeviceRows, params: S) -> DeviceRows:
        """:meth:`walk` of a prior held on the device, on P's tensors there (:mod:`.device_walk`:
        the regions grown and P cut there); π stays there."""
        P = device_arrays(self.transition)
        walk = dict(damping=params.damping, tol=params.tol, max_iter=params.max_iter, device=self.device)
        if not params.localise:
            return whole_walk(p, P, **walk)
        return local_walk(p, P, device_arrays(self._column_sums()), params.region_hops, SUPPORT_RTOL, **walk)

    def fuse(self, pi: LocalRows, rel: LocalRows, params: S | None = None) -> LocalRows:
        """Step 7 on the union of π's and the relevance's columns (0 elsewhere):
        ``(1 − λ) π/max π + λ rel/max rel``, or the weighted RRF of the two top-``HYBRID_DEPTH``
        lists (``fusion="rrf"``; positive entries only are ranked)."""
        params = params or self.search_defaults
        cols = np.union1d(pi.cols, rel.cols)
        pv, rv = pi.on(cols).values, rel.on(cols).values
        if params.fusion == "rrf":
            rr = []
            for m in (pv, rv):
                m = np.where(m > 0, m, -np.inf)
                top, _ = topk_rows(m, min(HYBRID_DEPTH, m.shape[1]))
                rr.append(reciprocal_rank_fusion([top], len(cols), k=RRF_K))
            return LocalRows(cols, ((1.0 - params.balance) * rr[0] + params.balance * rr[1]).astype(np.float32), pi.n)
        return LocalRows(cols, ((1.0 - params.balance) * normalise_max(pv) + params.balance * normalise_max(rv)
                                ).astype(np.float32), pi.n)

    @property
    def transition(self) -> CSR:
        """The chunk graph's column-stochastic matrix P (SPEC §2 step 6), read once and held by the
        index's graph store (:meth:`~hopgraph.engine.graphs.store.GraphStore.hold`)."""
        if "P" not in self._cache:
            self._cache["P"] = self.components.graphs.hold(self.hypergraph_.transition(), f"{self.name} chunk graph")
        return self._cache["P"]

    def whole_transition(self) -> Any:
        """P as the unlocalised walk (``localise=False``) hands it to ``batched_ppr``
        (:func:`~hopgraph.engine.graphs.store.kernel_graph`): its tensors where the graph store
        holds it on the device; else every row in memory (a P read by rows, loaded by reference,
        has every row gathered for this call: all of P, O(links) bytes; its row cache keeps at most
        its bound of them)."""
        return kernel_graph(self.transition)

    def _column_sums(self) -> Any:
        """Out-mass of every chunk in P (1, or 0 for a dangling chunk), float64 [N], held by the
        index's graph store beside P."""
        if "sums" not in self._cache:
            self._cache["sums"] = self.components.graphs.hold(self.hypergraph_.column_sums(),
                                                              f"{self.name} chunk graph column sums")
        return self._cache["sums"]

    def _adjacency(self) -> CSR:
        """The chunk graph's symmetric adjacency (for ``region_hops``): P's own pattern. Two chunks
        are linked when they share a name group (SPEC §2 step 6), a symmetric relation, so the
        pattern of P (``Bᵀ D B`` column-normalised, :func:`~hopgraph.engine.pipelines.stitch.hypergraph.chunk_links`)
        is that of ``P + Pᵀ`` (``tests/engine/pipelines/stitch/test_hypergraph.py`` checks it), and
        the sum is never formed."""
        return self.transition


# ---------------------------------------------------------------------- helpers
def normalise_rows(M: np.ndarray) -> np.ndarray:
    """Rows divided by their sum; all-zero rows become uniform (SPEC §2.5)."""
    M = np.asarray(M, np.float64)
    s = M.sum(1, keepdims=True)
    out = np.divide(M, s, out=np.zeros_like(M), where=s > 0)
    if M.shape[1]:
        out[(s[:, 0] <= 0)] = 1.0 / M.shape[1]
    return out


def masked_distribution(p: LocalRows, allowed: np.ndarray | None) -> tuple[LocalRows, np.ndarray]:
    """Rows of ``p`` restricted to the ``allowed`` columns and renormalised; returns them and the
    rows left with no mass. On every column (``p.is_full``) such a row becomes uniform over the
    allowed columns (and is not reported); on local columns the caller redoes it on every column."""
    if allowed is None:
        return p, np.zeros(len(p), bool)
    ok = np.asarray(allowed)[p.cols]
    v = np.where(ok[None, :], p.values, 0.0)
    s = v.sum(1, keepdims=True)
    out = np.divide(v, s, out=np.zeros_like(v), where=s > 0)
    empty = s[:, 0] <= 0
    if p.is_full and empty.any():
        out[empty] = np.where(ok, 1.0 / max(int(ok.sum()), 1), 0.0)[None, :]
        empty = np.zeros(len(p), bool)
    return p.with_values(out), empty


def normalise_max(M: np.ndarray) -> np.ndarray:
    """Rows divided by their maximum (rows with max ≤ 0 stay 0)."""
    m = M.max(1, keepdims=True) if M.shape[1] else np.zeros((len(M), 1))
    return np.divide(M, m, out=np.zeros(M.shape, np.float64), where=m > 0)


def top_k_distribution(rel: np.ndarray, k: int, n: int | None = None) -> np.ndarray:
    """Relevance restricted to each row's ``k`` best chunks (ties toward the lower column, as
    :func:`~hopgraph.engine.ranking.topk_rows`: on local columns, which are sorted, the lower id,
    so the choice does not depend on the other columns of the batch), normalised to sum 1. A row
    with no positive relevance is uniform over ``n`` chunks — the row's columns when ``n`` is None;
    on local columns (``n`` > their count) it is all zero, and the prior's other term decides."""
    rel = np.asarray(rel, np.float64)
    out = np.zeros_like(rel)
    if rel.size == 0:
        return out
    top, _ = topk_rows(rel, min(k, rel.shape[1]))
    rows = np.broadcast_to(np.arange(len(rel))[:, None], top.shape)
    ok = top >= 0
    out[rows[ok], top[ok]] = rel[rows[ok], top[ok]]
    out = np.maximum(out, 0.0)
    if n is None or n == rel.shape[1]:
        return normalise_rows(out)
    s = out.sum(1, keepdims=True)
    return np.divide(out, s, out=np.zeros_like(out), where=s > 0)


def on_host(rows: LocalRows | DeviceRows) -> LocalRows:
    """``rows`` as :class:`LocalRows` (brought to the host when held on the device)."""
    return rows.host() if isinstance(rows, DeviceRows) else rows


def merge_rows(a: LocalRows, b: LocalRows) -> LocalRows:
    """The rows of ``a`` then those of ``b``, over the union of their columns."""
    cols = np.union1d(a.cols, b.cols)
    return LocalRows(cols, np.concatenate([a.on(cols).values, b.on(cols).values]), a.n)


def rank_local(final: LocalRows, top_k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top_k`` of the full score rows (0 outside ``final.cols``), filtered rows excluded:
    the positive local entries best first, then — as ``topk_rows`` on the dense rows ranks the
    zero scores, ties toward the lower id — the lowest allowed ids not already listed, score 0, so
    ``top_k`` results come back whenever that many passages pass the filter."""
    v = np.asarray(final.values, np.float32)
    q, j = np.nonzero(v > 0)
    col = final.cols[j]
    ok = allowed_at(allowed, col)
    ids, scores = topk_entries(q[ok], col[ok], v[q[ok], j[ok]], len(final), top_k)
    return fill_lowest(ids, scores, allowed, final.n)
