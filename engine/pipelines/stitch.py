"""STITCH-RAG (SPEC §2): topic hypergraph, spatial/temporal influence, localised PPR.

Index (``fit``): the zero-token extractor (:mod:`hopgraph.engine.extraction`, or an
``extractions=`` JSON-lines file), the embeddings of every distinct topic and
description text, and the hypergraph arrays with the φ-induced chunk graph
(:mod:`hopgraph.engine.hypergraph`). A BM25 index is kept for hybrid relevance.

Query (``search``), batched; every step is array code and the three heavy steps are
kernels dispatched through :func:`hopgraph.kernels.call`:

1. Activation ``A(v) = sim(q, ψ(v))`` if ``≥ δ_q`` else 0; ``S(e) = max(0, sim(q, text(e)))``.
   **δ for a small embedder** (``delta_mode``): the paper's absolute δ = 0.5 is for a
   much stronger embedder. Measured with all-MiniLM-L6-v2 on the shared sets (100
   questions each): a question's best description similarity has median 0.70 / p10
   0.57 (hotpotqa) and median 0.60 / p10 0.50 (musique); δ = 0.5 leaves 2 % / 12 % of
   the questions with no activated state at all, δ = 0.4 activates a median of 58 /
   48 states and δ = 0.3 floods 230 / 273. The scale depends on the embedder and
   the corpus, so hopgraph uses a **relative** threshold by default,
   ``δ_q = delta · max_v sim(q, ψ(v))`` with ``delta = 0.8``: a median of 9 / 18
   activated states, at least 4 for nine questions in ten, on both sets. Recall@5
   is about the same as with δ = 0.5 where δ = 0.5 activates anything (0.880 vs
   0.875 hotpotqa, 0.685 vs 0.694 musique, current defaults otherwise); the gain
   is that no question is left without a prior whatever the embedder's scale.
   ``delta_mode="absolute"`` gives the paper's rule.
2. Spatial channel: ``hyperedge_max_propagate`` (a_space).
3. Temporal channel: ``group_decay_propagate`` with ``w(v) = S(e_v) · max(0, sim(q, c_v))``
   (a_time).
4. ``a(v)`` = mean of A and the enabled channels.
5. Chunk prior ``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)``, ``p = I / ΣI`` (uniform if ΣI = 0).
   **Prior mixing** (``prior_mix`` = μ = 0.5, issue 6): ``p ← (1 − μ) p + μ r`` where
   ``r`` is the relevance distribution on the ``seed_k`` most relevant chunks
   (``relevance``: cosine ``"dense"`` or ``"hybrid"`` = dense+BM25 reciprocal-rank
   fusion, the default), so the walk always starts from the passages the question
   is about and PPR adds the passages linked to them by shared names (the second
   hop). ``seed_k`` plays the role of SPEC's k (not called ``k`` because
   ``Index.search(k=...)`` is the result count); its default is 2, not 8: with
   the other defaults, Recall@5 is 0.685 / 0.880 (musique / hotpotqa) at 2, 0.679 /
   0.890 at 3, 0.661 / 0.865 at 4 and 0.592 / 0.850 at 16 — one value for both sets.
6. ``batched_ppr`` on the chunk graph with damping ``d``; ``localise=True`` restricts
   each query's walk to its activated region: the support of p and its
   ``region_hops``-hop neighbourhood (mass leaving it is dropped).
7. Ranking: ``score = (1 − λ) π/max π + λ rel/max rel`` with ``λ = balance`` = 0.3
   (SPEC: "a balance λ = 0.3 with dense similarity is allowed") and rel the
   ``relevance`` score (cosine clipped at 0, or the hybrid RRF score);
   ``fusion="rrf"`` fuses the two rankings by reciprocal rank instead.

Speed: on the CPU, ``search`` runs torch with ``threads`` intra-op threads (default 1).
The arrays of one batch are small (10⁵–10⁶ elements) and OpenMP threads spinning on
a busy 2-core machine made musique's 100 questions take 9.3 s instead of 1.0 s
with one thread (the sparse product is single-threaded scipy anyway).

Index options (they need a refit): ``title_entities`` (passage titles as entities,
issue 6; Recall@5 without them 0.648 / 0.865 instead of 0.685 / 0.880 on musique /
hotpotqa) and ``numbers`` (0.682 / 0.875 without).

Published behaviour: ``STITCH(**STITCH.ablations["published"])`` (absolute δ = 0.5, no
prior mixing, dense relevance, pure PPR ranking except λ). Ablations switch the
spatial, temporal and PPR steps off (``ppr=False`` ranks by the prior p).

:class:`PPRBinary` (``"ppr_binary"``) is the HippoRAG/LinearRAG baseline on the same
graph: p = 1 on chunks holding a state whose canonical name occurs in the question
(word n-gram match of φ(question) against the name vocabulary), else 0; questions
that match no name fall back to the ``seed_k`` most relevant chunks. Steps 6–7 are shared.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from ... import kernels
from ...kernels.threads import torch_threads
from ..corpus import Corpus
from ..embedders import Embedder
from ..errors import InputError
from ..extraction import extract, load_extractions, query_names
from ..hypergraph import TopicHypergraph, build_hypergraph, embed_texts
from ..ranking import PAD_SCORE, reciprocal_rank_fusion, topk_rows
from .base import Pipeline
from .bm25 import BM25
from .dense import Dense
from .hybrid import RRF_K, hybrid_ranking

DELTA_MODES = ("relative", "absolute")
RELEVANCES = ("dense", "hybrid")
FUSIONS = ("linear", "rrf")
HYBRID_DEPTH = 100


class STITCH(Pipeline):
    """STITCH-RAG retrieval (module docstring); ``hopgraph.STITCH(...).fit(X, corpus, embedder)``."""

    name = "stitch"
    needs_corpus = True
    needs_query_texts = True
    needs_embedder = True
    query_params = frozenset({"d", "seed_k", "balance", "delta", "delta_mode", "spatial", "temporal", "ppr",
                              "relevance", "prior_mix", "localise", "region_hops", "tol", "max_iter", "fusion", "threads",
                              "batch_size", "device"})
    ablations = {
        "published": {"delta_mode": "absolute", "delta": 0.5, "prior_mix": 0.0, "relevance": "dense", "seed_k": 8},
        "spatial=False": {"spatial": False},
        "temporal=False": {"temporal": False},
        "ppr=False": {"ppr": False},
        "delta_mode=absolute": {"delta_mode": "absolute", "delta": 0.5},
        "prior_mix=0": {"prior_mix": 0.0},
        "relevance=dense": {"relevance": "dense"},
        "localise=False": {"localise": False},
        "balance=0": {"balance": 0.0},
        "seed_k=8": {"seed_k": 8},
        "title_entities=False": {"title_entities": False},  # refits (about a minute here)
        "numbers=False": {"numbers": False},  # refits
    }

    def __init__(self, d: float = 0.85, seed_k: int = 2, balance: float = 0.3, delta: float = 0.8,
                 delta_mode: str = "relative", spatial: bool = True, temporal: bool = True, ppr: bool = True,
                 relevance: str = "hybrid", prior_mix: float = 0.5, localise: bool = True, region_hops: int = 1,
                 title_entities: bool = True, numbers: bool = True, max_group_chunks: int = 64,
                 extractions: str | None = None, tol: float = 1e-6, max_iter: int = 100, batch_size: int = 64,
                 fusion: str = "linear", threads: int | None = 1, device: str = "auto") -> None:
        self.fusion, self.threads = fusion, threads
        self.d, self.seed_k, self.balance, self.delta = float(d), int(seed_k), float(balance), float(delta)
        self.delta_mode, self.spatial, self.temporal, self.ppr = delta_mode, bool(spatial), bool(temporal), bool(ppr)
        self.relevance, self.prior_mix, self.localise = relevance, float(prior_mix), bool(localise)
        self.region_hops, self.title_entities, self.numbers = int(region_hops), bool(title_entities), bool(numbers)
        self.max_group_chunks, self.extractions = int(max_group_chunks), extractions
        self.tol, self.max_iter, self.batch_size, self.device = float(tol), int(max_iter), int(batch_size), device
        self._check_params()
        self.X = None
        self.corpus: Corpus | None = None
        self.H: TopicHypergraph | None = None
        self.dense = Dense()
        self.bm25 = BM25()
        self._cache: dict[str, Any] = {}

    def _check_params(self) -> None:
        if not 0.0 < self.d < 1.0:
            raise InputError(f"d (damping) must lie in (0, 1), got {self.d}")
        if self.seed_k < 1 or self.batch_size < 1 or self.max_iter < 1 or self.region_hops < 0:
            raise InputError("seed_k, batch_size and max_iter must be >= 1 and region_hops >= 0")
        for nm in ("balance", "prior_mix"):
            if not 0.0 <= getattr(self, nm) <= 1.0:
                raise InputError(f"{nm} must lie in [0, 1], got {getattr(self, nm)}")
        if self.delta_mode not in DELTA_MODES:
            raise InputError(f"delta_mode must be one of {DELTA_MODES}, got {self.delta_mode!r}")
        if self.delta_mode == "relative" and not 0.0 < self.delta <= 1.0:
            raise InputError(f"a relative delta must lie in (0, 1], got {self.delta}")
        if self.fusion not in FUSIONS:
            raise InputError(f"fusion must be one of {FUSIONS}, got {self.fusion!r}")
        if self.relevance not in RELEVANCES:
            raise InputError(f"relevance must be one of {RELEVANCES}, got {self.relevance!r}")

    def get_params(self) -> dict[str, Any]:
        keys = ("d", "seed_k", "balance", "delta", "delta_mode", "spatial", "temporal", "ppr", "relevance", "prior_mix",
                "localise", "region_hops", "title_entities", "numbers", "max_group_chunks", "extractions", "tol",
                "max_iter", "batch_size", "fusion", "threads", "device")
        return {key: getattr(self, key) for key in keys}

    def variant(self, **overrides: Any) -> "STITCH":
        other = super().variant(**overrides)
        other._check_params()
        return other

    # ------------------------------------------------------------------ index
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "STITCH":
        self.X = self._check_fit_inputs(X, corpus, True, self.name)
        if embedder is None and self.needs_embedder:
            raise InputError(f"pipeline {self.name!r} needs the embedder (topic and description embeddings)")
        self.corpus = corpus
        ex = load_extractions(self.extractions, corpus) if self.extractions else \
            extract(corpus, self.title_entities, self.numbers, progress=progress)
        if self.needs_embedder:
            text_emb = embed_texts(ex.texts, corpus, self.X, embedder, progress=progress)
        else:  # the binary prior never looks at topic/description embeddings
            text_emb = np.zeros((len(ex.texts), 0), np.float32)
        self.H = build_hypergraph(ex, text_emb, self.max_group_chunks)
        self.dense.fit(self.X)
        self.bm25.fit(self.X, corpus, progress=progress)
        self._cache = {}
        return self

    def save(self, directory: Path) -> None:
        self.H.save(directory / "hypergraph")
        self.bm25.save(directory)

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "STITCH":
        self = cls(**params)
        self.X, self.corpus = X, corpus
        self.H = TopicHypergraph.load(directory / "hypergraph", mmap=True)
        if self.H.n_chunks != len(X):
            raise InputError(f"{directory}: hypergraph has {self.H.n_chunks} chunks, the index {len(X)}")
        self.dense.fit(X)
        self.bm25 = BM25.load(directory, {}, X, corpus, embedder)
        return self

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        ids = np.full((len(Q), top_k), -1, np.int64)
        scores = np.full((len(Q), top_k), PAD_SCORE, np.float32)
        with torch_threads(self.threads if self._device() == "cpu" else None):
            for s in range(0, len(Q), self.batch_size):
                sl = slice(s, s + self.batch_size)
                ids[sl], scores[sl] = topk_rows(self.scores(Q[sl], list(query_texts[sl])), top_k)
        return ids, scores

    def scores(self, Q: np.ndarray, texts: list[str]) -> np.ndarray:
        """Final chunk scores [B, N] (step 7) for a batch of normalised queries."""
        rel = self.relevance_scores(Q, texts)
        p = self.prior(Q, texts, rel)
        if self.prior_mix > 0:
            p = (1.0 - self.prior_mix) * p + self.prior_mix * top_k_distribution(rel, self.seed_k)
        if self.ppr:
            region = self.region(p) if self.localise else None
            pi, _ = kernels.call("batched_ppr", self.transition, torch.from_numpy(p), d=self.d, tol=self.tol,
                                 max_iter=self.max_iter, region=None if region is None else torch.from_numpy(region),
                                 device=self._device())
            pi = pi.cpu().numpy()
        else:
            pi = p
        if self.fusion == "rrf":
            depth = min(HYBRID_DEPTH, pi.shape[1])
            rr = [reciprocal_rank_fusion([topk_rows(m, depth)[0]], pi.shape[1], k=RRF_K) for m in (pi, rel)]
            return ((1.0 - self.balance) * rr[0] + self.balance * rr[1]).astype(np.float32)
        return ((1.0 - self.balance) * normalise_max(pi) + self.balance * normalise_max(rel)).astype(np.float32)

    def relevance_scores(self, Q: np.ndarray, texts: list[str]) -> np.ndarray:
        """Query relevance of every chunk [B, N] ≥ 0: clipped cosine, or hybrid RRF scores."""
        if self.relevance == "dense":
            return np.maximum(Q @ np.asarray(self.X).T, 0.0)
        ids, sc = hybrid_ranking(self.dense, self.bm25, Q, texts, HYBRID_DEPTH, depth=HYBRID_DEPTH)
        rel = np.zeros((len(Q), len(self.X)), np.float32)
        rows = np.broadcast_to(np.arange(len(Q))[:, None], ids.shape)
        ok = ids >= 0
        rel[rows[ok], ids[ok]] = sc[ok]
        return rel

    def prior(self, Q: np.ndarray, texts: list[str], rel: np.ndarray) -> np.ndarray:
        """STITCH chunk prior p [B, N] (steps 1–5), float64 rows summing to 1."""
        H, dev = self.H, self._device_t()
        t = self._tensors(dev)
        text_sim = torch.from_numpy(Q @ np.asarray(H.text_emb).T).to(dev)  # [B, U]
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
            chunk_sim = torch.from_numpy(np.maximum(Q @ np.asarray(self.X).T, 0.0)).to(dev)
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
        """Activated region [B, N] bool: support of p and its ``region_hops``-hop neighbourhood."""
        reg = p > 0
        adj = self._cache.get("adjacency")
        if adj is None:
            P = self.transition
            adj = self._cache["adjacency"] = sp.csr_matrix(
                ((P + P.T) != 0).astype(np.float32))
        for _ in range(self.region_hops):
            reg = reg | (np.asarray(adj @ reg.T.astype(np.float32)).T > 0)
        return reg

    # ------------------------------------------------------------------ cached views
    @property
    def transition(self) -> sp.csr_matrix:
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
            as_t = lambda a, dt=torch.int64: torch.from_numpy(np.array(a)).to(dev, dt)  # noqa: E731 (copies mmaps)
            inc_edge = np.repeat(np.arange(H.n_edges), np.diff(np.asarray(H.edge_indptr)))
            self._cache[key] = {
                "node_text": as_t(H.node_text), "edge_text": as_t(H.edge_text),
                "edge_indptr": as_t(H.edge_indptr), "edge_nodes": as_t(H.edge_nodes, torch.int32),
                "node_indptr": as_t(H.node_indptr), "node_incidence": as_t(H.node_incidence, torch.int32),
                "inc_node": as_t(H.edge_nodes), "inc_edge": as_t(inc_edge),
                "node_chunk": as_t(H.node_chunk), "node_group": as_t(H.node_group),
                "node_t": as_t(np.asarray(H.chunk_t)[np.asarray(H.node_chunk)]),
                "group_indptr": as_t(H.group_indptr), "group_nodes": as_t(H.group_nodes, torch.int32),
                "alpha": as_t(H.group_alpha(), torch.float32),
                "log_group": as_t(np.log1p(np.asarray(H.group_size)[np.asarray(H.node_group)]), torch.float32),
            }
        return self._cache[key]


class PPRBinary(STITCH):
    """Binary entity-match prior + PPR on the STITCH chunk graph (HippoRAG/LinearRAG baseline;
    published behaviour: no prior mixing, dense relevance, seed_k = 8 for the fallback)."""

    name = "ppr_binary"
    needs_embedder = False
    query_params = STITCH.query_params
    ablations = {"ppr=False": {"ppr": False}, "localise=False": {"localise": False}, "balance=0": {"balance": 0.0}}

    def __init__(self, d: float = 0.85, seed_k: int = 8, balance: float = 0.3, relevance: str = "dense",
                 prior_mix: float = 0.0, localise: bool = True, region_hops: int = 1, ppr: bool = True,
                 title_entities: bool = True, numbers: bool = True, max_group_chunks: int = 64,
                 extractions: str | None = None, tol: float = 1e-6, max_iter: int = 100, batch_size: int = 64,
                 fusion: str = "linear", threads: int | None = 1, device: str = "auto") -> None:
        super().__init__(d=d, seed_k=seed_k, balance=balance, relevance=relevance, prior_mix=prior_mix, localise=localise,
                         region_hops=region_hops, ppr=ppr, title_entities=title_entities, numbers=numbers,
                         max_group_chunks=max_group_chunks, extractions=extractions, tol=tol, max_iter=max_iter,
                         batch_size=batch_size, fusion=fusion, threads=threads, device=device)

    def get_params(self) -> dict[str, Any]:
        params = super().get_params()
        for key in ("delta", "delta_mode", "spatial", "temporal"):
            params.pop(key)
        return params

    def prior(self, Q: np.ndarray, texts: list[str], rel: np.ndarray) -> np.ndarray:
        """p = 1 on chunks holding a state of a name the question mentions (normalised);
        questions with no match fall back to the ``seed_k`` most relevant chunks."""
        H = self.H
        if "name_ids" not in self._cache:
            self._cache["name_ids"] = {n: i for i, n in enumerate(H.names())}
            M = sp.csr_matrix((np.ones(H.n_nodes, np.float32), (np.asarray(H.node_group), np.asarray(H.node_chunk))),
                              shape=(H.n_groups, H.n_chunks))
            self._cache["group_chunks"] = M
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
