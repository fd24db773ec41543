"""STITCH-RAG (SPEC §2): topic hypergraph, spatial/temporal influence, localised PPR.

Index (``fit``, SPEC §2 "Index"): the shared zero-token extraction
(:mod:`hopgraph.engine.extraction`, one per index and option pair, shared with
``ppr_binary`` and ``dmar``; or an ``extractions=`` JSON-lines file), the embeddings of
every distinct topic and description text, and the hypergraph arrays with the φ-induced
chunk graph (:mod:`hopgraph.engine.hypergraph`). BM25 (hybrid relevance) is the shared
component.

Query (``search``), batched; every step is array code and the three heavy steps are
kernels dispatched through :func:`hopgraph.kernels.call`:

1. Activation ``A(v) = sim(q, ψ(v))`` if ``≥ δ_q`` else 0; ``S(e) = max(0, sim(q, text(e)))``
   (SPEC §2 query step 1). **δ** (``delta_mode``): the paper's absolute δ = 0.5 is
   calibrated for a much stronger embedder; the scale of a question's description
   similarities depends on the embedder and the corpus, so with a small embedder an
   absolute δ leaves some questions with no activated state and floods others. hopgraph
   therefore uses a **relative** threshold by default, ``δ_q = delta · max_v sim(q, ψ(v))``
   with ``delta = 0.8``: every question activates its best-matching states, whatever the
   embedder's scale. ``delta_mode="absolute"`` gives the paper's rule.
2. Spatial channel (step 2): ``hyperedge_max_propagate`` (a_space).
3. Temporal channel (step 3): ``group_decay_propagate`` with
   ``w(v) = S(e_v) · max(0, sim(q, c_v))`` (a_time).
4. ``a(v)`` = mean of A and the enabled channels (step 4; ``spatial`` / ``temporal``).
5. Chunk prior ``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)``, ``p = I / ΣI`` (uniform if ΣI = 0)
   (step 5). **Prior mixing** (``prior_mix`` = μ = 0.5, issue 6): ``p ← (1 − μ) p + μ r``
   where ``r`` is the relevance distribution on the ``seed_k`` most relevant chunks
   (``relevance``: cosine ``"dense"`` or ``"hybrid"`` = dense+BM25 reciprocal-rank
   fusion, the default), so the walk always starts from the passages the question is
   about and PPR adds the passages linked to them by shared names (the second hop).
   ``seed_k`` plays the role of SPEC's k (not called ``k`` because
   ``Index.search(k=...)`` is the result count); its default is 2, not SPEC's 8 — one
   value for every corpus.
6. ``batched_ppr`` (step 6) on the chunk graph with damping ``d`` = 0.85, to tolerance
   ``tol``; ``localise=True`` restricts each query's walk to its activated region: the
   support of p and its ``region_hops``-hop neighbourhood (mass leaving it is dropped).
   The support is numerical: the chunks with ``p ≥ SUPPORT_RTOL · max p`` (1e-6). Entries
   below it are float noise (a similarity that is 0 in exact arithmetic comes out as ±1e-8
   depending on how BLAS blocks the batch, and the temporal channel turns it into a 1e-12
   prior); letting them decide the region made a question's results depend on its batch
   (issue 11).
7. Ranking (step 7): ``score = (1 − λ) π/max π + λ rel/max rel`` with ``λ = balance`` = 0.3
   (SPEC: "a balance λ = 0.3 with dense similarity is allowed") and rel the ``relevance``
   score (cosine clipped at 0, or the hybrid RRF score); ``fusion="rrf"`` fuses the two
   rankings by reciprocal rank instead.

Threads: on the CPU, ``search`` runs torch with ``threads`` intra-op threads (default 1):
the arrays of one batch are small and OpenMP threads spinning on a busy machine cost more
than they save (the sparse product is single-threaded scipy anyway).

Live indexes (issue 13): ``Index.add`` calls ``add``, which keeps the embeddings of the old
topic and description texts, embeds the new ones and rebuilds the hypergraph arrays from the
extended extraction (:meth:`STITCH._add`); equal to a fresh fit except for the extraction's one
documented approximation, which ``Index.compact()`` removes.

Index options (fit-time: they need a refit): ``title_entities`` (passage titles as
entities, issue 6, default on), ``numbers`` (3+-digit numbers as entities, default on),
``max_group_chunks`` (64: larger name groups do not link chunks), ``extractions``.

Published behaviour: ``STITCHParams.published()`` (= ``STITCH(published=True)``, a
constructor shortcut; = ``STITCH.ablations["published"]``): absolute δ = 0.5, ``seed_k`` = 8,
no prior mixing, dense relevance; the ranking keeps λ = 0.3. Ablations (``hopgraph eval
--ablations``) switch each option above off, and the spatial, temporal and PPR steps
(``ppr=False`` ranks by the prior p); ``no_graph`` (λ = 1) ranks by the relevance alone, without
the hypergraph influence and the PPR (issue 15: what the graph adds); the Recall measured for the defaults and each
ablation is in the README ("Defaults and the measurements behind them").

:class:`PPRBinary` (``"ppr_binary"``) is SPEC §2's binary-seed baseline (HippoRAG/LinearRAG)
on the same graph: p = 1 on chunks holding a state whose canonical name occurs in the
question (word n-gram match of φ(question) against the name vocabulary), else 0; questions
that match no name fall back to the ``seed_k`` (8) most relevant chunks. Steps 6–7 are shared.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ... import kernels
from ...kernels.dispatch import DEVICES
from ...kernels.tensors import as_tensor
from ...kernels.threads import torch_threads
from ..components import QueryBatch
from ..errors import IndexFormatError, InputError
from ..graph import CSR
from ..extraction import load_extractions, query_names
from ..hypergraph import TopicHypergraph, build_hypergraph, embed_texts, extend_text_embeddings, text_similarity
from ..params import PipelineParams, choice, flag, integer, path, real
from ..ranking import PAD_SCORE, reciprocal_rank_fusion, topk_rows
from .base import Pipeline
from .hybrid import RRF_K, hybrid_ranking

DELTA_MODES = ("relative", "absolute")
RELEVANCES = ("dense", "hybrid")
FUSIONS = ("linear", "rrf")
HYBRID_DEPTH = 100
#: chunks whose prior is below this fraction of the row's largest are not in the activated
#: region's support (float noise, see step 6 of the module docstring)
SUPPORT_RTOL = 1e-6


@dataclass(frozen=True)
class PPRBinaryParams(PipelineParams):
    """Parameters of the PPR walk on the STITCH chunk graph (SPEC §2 steps 6–7), shared by
    ``ppr_binary`` and ``stitch``. Fit-time: ``title_entities``, ``numbers``,
    ``max_group_chunks``, ``extractions``; the rest is query-time."""

    pipeline = "ppr_binary"
    title_entities: bool = flag(True)
    numbers: bool = flag(True)
    max_group_chunks: int = integer(64, low=1)
    extractions: str | None = path(None)
    d: float = real(0.85, low=0.0, high=1.0, low_open=True, high_open=True, query=True)
    seed_k: int = integer(8, low=1, query=True)
    balance: float = real(0.3, low=0.0, high=1.0, query=True)
    relevance: str = choice("dense", RELEVANCES, query=True)
    prior_mix: float = real(0.0, low=0.0, high=1.0, query=True)
    ppr: bool = flag(True, query=True)
    localise: bool = flag(True, query=True)
    region_hops: int = integer(1, low=0, query=True)
    tol: float = real(1e-6, low=0.0, low_open=True, query=True)
    max_iter: int = integer(100, low=1, query=True)
    batch_size: int = integer(64, low=1, query=True)
    fusion: str = choice("linear", FUSIONS, query=True)
    threads: int | None = integer(1, low=1, nullable=True, query=True)
    device: str = choice("auto", DEVICES, query=True)


@dataclass(frozen=True)
class STITCHParams(PPRBinaryParams):
    """STITCH-RAG parameters (SPEC §2): the walk's, plus the influence prior's (``delta``,
    ``delta_mode``, ``spatial``, ``temporal``), with hopgraph's defaults for the prior
    (``seed_k`` 2, hybrid relevance, ``prior_mix`` 0.5)."""

    pipeline = "stitch"
    seed_k: int = integer(2, low=1, query=True)
    relevance: str = choice("hybrid", RELEVANCES, query=True)
    prior_mix: float = real(0.5, low=0.0, high=1.0, query=True)
    delta: float = real(0.8, low=-1.0, high=1.0, query=True)
    delta_mode: str = choice("relative", DELTA_MODES, query=True)
    spatial: bool = flag(True, query=True)
    temporal: bool = flag(True, query=True)

    def check(self) -> None:
        if self.delta_mode == "relative" and not 0.0 < self.delta <= 1.0:
            raise self.invalid("delta", "must lie in (0, 1] when delta_mode is 'relative'")

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §2 as published: absolute δ = 0.5, k = 8, the pure influence prior, dense relevance."""
        return {"delta_mode": "absolute", "delta": 0.5, "prior_mix": 0.0, "relevance": "dense", "seed_k": 8}


class STITCH(Pipeline):
    """STITCH-RAG retrieval (module docstring); ``hopgraph.STITCH(...).fit(X, corpus, embedder)``."""

    name = "stitch"
    Params = STITCHParams
    components_used = ("dense", "bm25", "extraction")
    needs_corpus = True
    needs_query_texts = True
    needs_embedder = True
    ablations = {
        "published": STITCHParams.published_values(),
        "spatial=False": {"spatial": False},
        "temporal=False": {"temporal": False},
        "ppr=False": {"ppr": False},
        "delta_mode=absolute": {"delta_mode": "absolute", "delta": 0.5},
        "prior_mix=0": {"prior_mix": 0.0},
        "relevance=dense": {"relevance": "dense"},
        "localise=False": {"localise": False},
        "balance=0": {"balance": 0.0},
        "no_graph": {"balance": 1.0},  # issue 15: the relevance alone (no influence prior, no PPR)
        "seed_k=8": {"seed_k": 8},
        "title_entities=False": {"title_entities": False},  # refits
        "numbers=False": {"numbers": False},  # refits
    }

    def __init__(self, params: PipelineParams | dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(params, **overrides)
        self.H: TopicHypergraph | None = None
        self._cache: dict[str, Any] = {}

    # ------------------------------------------------------------------ index
    def _fit(self, progress: bool) -> None:
        comp = self.components
        corpus = comp.require_corpus(self.name)
        ex = load_extractions(self.extractions, corpus) if self.extractions else \
            comp.extraction(self.title_entities, self.numbers, who=self.name)
        if self.needs_embedder:
            text_emb = embed_texts(ex.texts, corpus, self.X, comp.embedder, progress=progress)
        else:  # the binary prior never looks at topic/description embeddings
            text_emb = np.zeros((len(ex.texts), 0), np.float16)
        self.H = build_hypergraph(ex, text_emb, self.max_group_chunks)
        comp.bm25(who=self.name)
        self._cache = {}

    def _add(self, start: int, progress: bool) -> None:
        """Passages ``[start, N)`` were appended (issue 13; the SPEC §2 "Index" steps on the grown
        corpus): the shared extraction was extended by
        :func:`~hopgraph.engine.extraction.extend_extraction` (old text ids kept), so the old topic
        and description embeddings are kept and only the new texts are embedded
        (:func:`~hopgraph.engine.hypergraph.extend_text_embeddings`); the hypergraph and its chunk
        graph are rebuilt from the extraction (:func:`build_hypergraph`, arithmetic only) and the
        query caches reset. The result is a fresh fit's whenever the extension equals a fresh
        extraction (its one approximation, a sentence-initial span of an old passage, lasts until
        ``Index.compact()``). With an ``extractions=`` file the file is read again and the pipeline
        refitted (its entries for the new passages, if any, come from the file)."""
        comp = self.components
        if self.extractions:
            self._fit(progress)
            return
        corpus = comp.require_corpus(self.name)
        ex = comp.extraction(self.title_entities, self.numbers, who=self.name)
        if ex.n_chunks != len(self.X) or len(ex.texts) < len(self.H.text_emb):
            raise InputError(f"{self.name}: the extraction covers {ex.n_chunks} passages and {len(ex.texts)} texts, "
                             f"the index {len(self.X)} passages and {len(self.H.text_emb)} embedded texts")
        text_emb = extend_text_embeddings(self.H.text_emb, ex.texts, corpus, self.X, comp.embedder, progress)
        self.H = build_hypergraph(ex, text_emb, self.max_group_chunks)
        comp.bm25(who=self.name)
        self._cache = {}

    def save(self, directory: Path) -> None:
        self.H.save(directory / "hypergraph")

    def _load(self, directory: Path) -> None:
        self.H = TopicHypergraph.load(directory / "hypergraph", mmap=True, n_chunks=len(self.X))
        if self.H.text_emb.shape[1] != (self.X.shape[1] if self.needs_embedder else 0):
            raise IndexFormatError(f"{directory / 'hypergraph' / 'text_emb.npy'}: dimension "
                                   f"{self.H.text_emb.shape[1]}, the index {self.X.shape[1]}")
        self._cache = {}

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        ids = np.full((len(Q), top_k), -1, np.int64)
        scores = np.full((len(Q), top_k), PAD_SCORE, np.float32)
        timer = self._timer()
        with torch_threads(self.threads if self._device() == "cpu" else None):
            for s in range(0, len(Q), self.batch_size):
                sl = slice(s, s + self.batch_size)
                batch = self.components.batch(Q[sl], list(query_texts[sl]), allowed)
                final = self.batch_scores(batch, timer)
                with timer("ranking"):
                    ids[sl], scores[sl] = topk_rows(batch.mask_scores(final), top_k)
        return ids, scores

    def scores(self, Q: np.ndarray, texts: list[str], timer=None) -> np.ndarray:
        """Final chunk scores [B, N] (step 7) for a batch of normalised queries."""
        return self.batch_scores(self.components.batch(Q, texts), timer)

    def batch_scores(self, batch: QueryBatch, timer=None) -> np.ndarray:
        """:meth:`scores` of a :class:`QueryBatch`: its filter zeroes the relevance and the prior
        of the passages it excludes; the walk may pass through them; the caller masks the ranking."""
        timer = timer or self._timer()
        with timer("relevance"):
            rel = batch.mask_prior(self.relevance_scores(batch))
        with timer("prior"):
            p = self.prior(batch, rel)
            if self.prior_mix > 0:
                p = (1.0 - self.prior_mix) * p + self.prior_mix * top_k_distribution(rel, self.seed_k)
            p = masked_distribution(p, batch.allowed)
        if self.ppr:
            with timer("ppr"):
                region = self.region(p) if self.localise else None
                pi, _ = kernels.call("batched_ppr", self.transition, p, d=self.d, tol=self.tol,
                                     max_iter=self.max_iter, region=region, device=self._device())
                pi = pi.cpu().numpy()
        else:
            pi = p
        with timer("ranking"):
            if self.fusion == "rrf":
                depth = min(HYBRID_DEPTH, pi.shape[1])
                rr = [reciprocal_rank_fusion([topk_rows(m, depth)[0]], pi.shape[1], k=RRF_K) for m in (pi, rel)]
                return ((1.0 - self.balance) * rr[0] + self.balance * rr[1]).astype(np.float32)
            return ((1.0 - self.balance) * normalise_max(pi) + self.balance * normalise_max(rel)).astype(np.float32)

    def relevance_scores(self, batch: QueryBatch) -> np.ndarray:
        """Query relevance of every chunk [B, N] ≥ 0: clipped cosine, or hybrid RRF scores."""
        if self.relevance == "dense":
            return np.maximum(batch.cosine(), 0.0)
        ids, sc = hybrid_ranking(batch, HYBRID_DEPTH, depth=HYBRID_DEPTH)
        rel = np.zeros((len(batch), len(self.X)), np.float32)
        rows = np.broadcast_to(np.arange(len(batch))[:, None], ids.shape)
        ok = ids >= 0
        rel[rows[ok], ids[ok]] = sc[ok]
        return rel

    def prior(self, batch: QueryBatch, rel: np.ndarray) -> np.ndarray:
        """STITCH chunk prior p [B, N] (steps 1–5), float64 rows summing to 1."""
        H, dev, Q = self.H, self._device_t(), batch.Q
        t = self._tensors(dev)
        text_sim = as_tensor(text_similarity(Q, H.text_emb), device=dev)  # [B, U]
        node_sim = text_sim[:, t["node_text"]]
        S = text_sim[:, t["edge_text"]].clamp_min(0.0)
        if self.delta_mode == "relative":
            thr = self.delta * node_sim.max(dim=1, keepdim=True).values.clamp_min(1e-6) if H.n_nodes else 0.0
        else:
            thr = self.delta
        A = torch.where((node_sim >= thr) & (node_sim > 0), node_sim, torch.zeros_like(node_sim))
        channels = [A]
        if self.spatial:
            channels.append(kernels.call("hyperedge_max_propagate", A, S, t["edge_indptr"], t["edge_nodes"],
                                         t["node_indptr"], t["node_incidence"], device=self._device()))
        if self.temporal:
            chunk_sim = as_tensor(np.maximum(batch.cosine(), 0.0), device=dev)
            best_edge = torch.zeros_like(A).scatter_reduce(
                1, t["inc_node"].expand(len(A), -1), S[:, t["inc_edge"]], "amax")
            w = best_edge * chunk_sim[:, t["node_chunk"]]
            channels.append(kernels.call("group_decay_propagate", A, w, t["node_group"], t["node_t"],
                                         t["group_indptr"], t["group_nodes"], t["alpha"], device=self._device()))
        a = torch.stack(channels).mean(0)
        I = torch.zeros((len(Q), H.n_chunks), dtype=torch.float64, device=dev)
        I.index_add_(1, t["node_chunk"], (a * t["log_group"]).to(torch.float64))
        return normalise_rows(I.cpu().numpy())

    def region(self, p: np.ndarray) -> np.ndarray:
        """Activated region [B, N] bool: the numerical support of p (``p ≥ SUPPORT_RTOL · max p``,
        per row, so a row's region depends on that row only) and its ``region_hops``-hop
        neighbourhood (SPEC §2 step 6, localised)."""
        p = np.asarray(p)
        top = p.max(axis=1, keepdims=True) if p.shape[1] else np.zeros((len(p), 1))
        reg = (p > 0) & (p >= SUPPORT_RTOL * top)
        adj = self._cache.get("adjacency")
        if adj is None:
            P = self.transition.to_scipy()
            adj = self._cache["adjacency"] = sp.csr_matrix(
                ((P + P.T) != 0).astype(np.float32))
        for _ in range(self.region_hops):
            reg = reg | (np.asarray(adj @ reg.T.astype(np.float32)).T > 0)
        return reg

    # ------------------------------------------------------------------ cached views
    @property
    def transition(self) -> CSR:
        if "P" not in self._cache:
            self._cache["P"] = self.H.transition()
        return self._cache["P"]

    def _device(self) -> str:
        return kernels.resolve_device(self.device)

    def _device_t(self) -> torch.device:
        return torch.device(self._device())

    def _tensors(self, dev: torch.device) -> dict[str, torch.Tensor]:
        key = f"tensors:{dev}"
        if key not in self._cache:
            H = self.H
            as_t = lambda a, dt=torch.int64: as_tensor(np.array(a), dt, dev)  # noqa: E731 (copies mmaps)
            inc_edge = np.repeat(np.arange(H.n_edges), np.diff(np.asarray(H.edge_indptr)))
            self._cache[key] = {
                "node_text": as_t(H.node_text), "edge_text": as_t(H.edge_text),
                "edge_indptr": as_t(H.edge_indptr), "edge_nodes": as_t(H.edge_nodes, torch.int32),
                "node_indptr": as_t(H.node_indptr), "node_incidence": as_t(H.node_incidence, torch.int32),
                "inc_node": as_t(H.edge_nodes), "inc_edge": as_t(inc_edge),
                "node_chunk": as_t(H.node_chunk), "node_group": as_t(H.node_group),
                "node_t": as_t(H.node_chunk),  # t(c) = corpus order (SPEC §2 "Index")
                "group_indptr": as_t(H.group_indptr), "group_nodes": as_t(H.group_nodes, torch.int32),
                "alpha": as_t(H.group_alpha(), torch.float32),
                "log_group": as_t(np.log1p(np.asarray(H.group_size)[np.asarray(H.node_group)]), torch.float32),
            }
        return self._cache[key]


class PPRBinary(STITCH):
    """Binary entity-match prior + PPR on the STITCH chunk graph (HippoRAG/LinearRAG baseline;
    published behaviour: no prior mixing, dense relevance, seed_k = 8 for the fallback)."""

    name = "ppr_binary"
    Params = PPRBinaryParams
    needs_embedder = False
    ablations = {"ppr=False": {"ppr": False}, "localise=False": {"localise": False}, "balance=0": {"balance": 0.0}}

    def prior(self, batch: QueryBatch, rel: np.ndarray) -> np.ndarray:
        """p = 1 on chunks holding a state of a name the question mentions (normalised);
        questions with no match fall back to the ``seed_k`` most relevant chunks."""
        H = self.H
        if "name_ids" not in self._cache:
            self._cache["name_ids"] = {n: i for i, n in enumerate(H.names())}
            M = sp.csr_matrix((np.ones(H.n_nodes, np.float32), (np.asarray(H.node_group), np.asarray(H.node_chunk))),
                              shape=(H.n_groups, H.n_chunks))
            self._cache["group_chunks"] = M
        texts = batch.texts
        matched = query_names(texts, self._cache["name_ids"])
        rows = np.repeat(np.arange(len(texts)), [len(m) for m in matched])
        cols = np.concatenate(matched) if matched else np.zeros(0, np.int32)
        hits = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), H.n_groups))
        p = ((hits @ self._cache["group_chunks"]).toarray() > 0).astype(np.float64)
        none = p.sum(1) == 0
        if none.any():
            p[none] = top_k_distribution(rel[none], self.seed_k)
        return normalise_rows(p)


# ---------------------------------------------------------------------- helpers
def normalise_rows(M: np.ndarray) -> np.ndarray:
    """Rows divided by their sum; all-zero rows become uniform (SPEC §2.5)."""
    M = np.asarray(M, np.float64)
    s = M.sum(1, keepdims=True)
    out = np.divide(M, s, out=np.zeros_like(M), where=s > 0)
    if M.shape[1]:
        out[(s[:, 0] <= 0)] = 1.0 / M.shape[1]
    return out


def masked_distribution(p: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """Rows of ``p`` restricted to the ``allowed`` columns and renormalised; a row left with no
    mass becomes uniform over the allowed columns (``p`` itself when nothing is filtered)."""
    if allowed is None:
        return p
    p = np.where(allowed[None, :], p, 0.0)
    s = p.sum(1, keepdims=True)
    n_allowed = int(allowed.sum())
    fallback = np.where(allowed, 1.0 / max(n_allowed, 1), 0.0)[None, :]
    return np.where(s > 0, np.divide(p, s, out=np.zeros_like(p), where=s > 0), fallback)


def normalise_max(M: np.ndarray) -> np.ndarray:
    """Rows divided by their maximum (rows with max ≤ 0 stay 0)."""
    m = M.max(1, keepdims=True) if M.shape[1] else np.zeros((len(M), 1))
    return np.divide(M, m, out=np.zeros(M.shape, np.float64), where=m > 0)


def top_k_distribution(rel: np.ndarray, k: int) -> np.ndarray:
    """Relevance restricted to each row's ``k`` best chunks, normalised to sum 1."""
    rel = np.asarray(rel, np.float64)
    out = np.zeros_like(rel)
    if rel.size == 0:
        return out
    kk = min(k, rel.shape[1])
    top = np.argpartition(-rel, kk - 1, axis=1)[:, :kk]
    np.put_along_axis(out, top, np.take_along_axis(rel, top, axis=1), axis=1)
    return normalise_rows(np.maximum(out, 0.0))
