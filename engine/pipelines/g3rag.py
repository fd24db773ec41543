"""G3RAG: geometric gain graph retrieval, zero-token (SPEC §1).

Index (``fit``): density of every passage (SPEC §1 step 1, op ``density``), hub penalty
(step 2), the gain graph W (steps 3-5, op ``gain_knn``: top-``k`` in the similarity band
for ``mode="knn"``; every pair with similarity in [0, 1] for ``mode="exact"``). T is W
row-normalised (step 6), applied on the fly by op ``sparse_diffusion``. At scale (issue 5)
``mode="auto"`` (default) builds W with ``"ann"`` — faiss IVF candidates rescored exactly
by the same epilogue, :mod:`hopgraph.engine.ann_graph` — on the CPU from ``ANN_MIN_N`` =
50,000 passages up (``"knn"`` below, and on CUDA); ``density="auto"`` (default) uses the
sampled density estimate from ``SAMPLED_DENSITY_MIN_N`` = 50,000 passages up.

Query (``search``), two scorings:

* ``scoring="mask"`` — the published algorithm (SPEC §1 query steps 1-4): seeds = the
  ``seed_k`` passages most similar to q (or, with ``seeds="hybrid"``, the top of the
  dense+BM25 reciprocal-rank fusion), p uniform over the seeds, ``y = pᵀT``, seeds
  masked, result = seeds, then the top diffused passages, filled with the next most
  relevant. Scores are tiered so that they decrease down the list: seeds ``4 + cos``,
  diffused ``2 + y``, fill ``cos`` (or the fused rank score with hybrid seeds).
* ``scoring="fused"`` (issue #6) — the diffused score is combined with query relevance
  instead of masking: relevance ``r = cos(q, ·) + lexical · bm25(q, ·)/max bm25`` (the
  lexical term when the corpus was given to ``fit`` and the texts to ``search``) over the
  ``n_candidates`` most relevant passages; seed vector ``p = softmax(r/τ)`` over them;
  ``y = pᵀT``; final score ``r + γ · y / max y`` (γ in cosine units: a passage with the
  most graph support gains γ). Only the candidates are ranked; ``expand=True`` lets
  diffusion bring passages from outside them (scored by cosine + graph support).

``G3RAG(published=True)`` selects the published behaviour; every option can still be
set on its own. Search is batched: one sparse product per chunk of queries.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ..corpus import Corpus
from ..embedders import Embedder
from ..ann_graph import ann_gain_knn, density_mode, graph_mode
from ..errors import InputError
from ..graph import CSR, check_csr, hub_penalty
from ..ranking import PAD_ID, PAD_SCORE, topk_rows
from ..storage import load_arrays, save_arrays
from .base import Pipeline
from .bm25 import BM25
from .dense import Dense, faiss_topk, gather_rows
from .hybrid import hybrid_ranking

#: "ann" / "auto" (issue 5): IVF candidates rescored exactly, see hopgraph.engine.ann_graph
MODES = ("knn", "exact", "ann", "auto")
SEEDS = ("dense", "hybrid")
SCORINGS = ("mask", "fused")
#: the published algorithm's query options (SPEC §1)
PUBLISHED: dict[str, Any] = {"scoring": "mask", "seeds": "dense", "seed_k": 3}
#: the improved defaults (issue #6), one set for every corpus
IMPROVED: dict[str, Any] = {"scoring": "fused", "seeds": "dense", "seed_k": 3}
#: queries per sparse product (bounds the dense [chunk, N] diffusion output)
QUERY_CHUNK = 256
#: and at most this many entries per dense [chunk, N] array, so that a query process over a
#: 10⁶-passage index stays small (issue 5: 16 queries per chunk at N = 10⁶)
DENSE_SCORE_BUDGET = 1 << 24


class G3RAG(Pipeline):
    """Geometric-gain graph retrieval (SPEC §1); see the module docstring for the options."""

    name = "g3rag"
    query_params: ClassVar[frozenset[str]] = frozenset(
        {"seed_k", "seeds", "scoring", "gamma", "tau", "lexical", "n_candidates", "expand", "hybrid_depth"})
    ablations: ClassVar[dict[str, dict[str, Any]]] = {
        "published": dict(PUBLISHED),
        "published_exact": {**PUBLISHED, "mode": "exact"},
        "published_hybrid_seeds": {**PUBLISHED, "seeds": "hybrid"},
        "no_graph": {"gamma": 0.0},
        "no_lexical": {"lexical": 0.0},
        "expand": {"expand": True},
    }

    def __init__(self, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, beta: float = 1.0,
                 seed_k: int | None = None, mode: str = "auto", device: str = "auto",
                 published: bool = False, seeds: str | None = None, scoring: str | None = None,
                 gamma: float = 0.02, tau: float = 0.05, lexical: float = 0.15, n_candidates: int = 20,
                 expand: bool = False, hybrid_depth: int = 100, density: str = "auto",
                 density_samples: int = 4096) -> None:
        preset = PUBLISHED if published else IMPROVED
        self.k, self.sim_min, self.sim_max, self.beta = int(k), float(sim_min), float(sim_max), float(beta)
        self.mode, self.device, self.published = mode, device, bool(published)
        self.seed_k = int(preset["seed_k"] if seed_k is None else seed_k)
        self.seeds = preset["seeds"] if seeds is None else seeds
        self.scoring = preset["scoring"] if scoring is None else scoring
        self.gamma, self.tau, self.lexical = float(gamma), float(tau), float(lexical)
        self.n_candidates, self.expand, self.hybrid_depth = int(n_candidates), bool(expand), int(hybrid_depth)
        self.density, self.density_samples = density, int(density_samples)
        self._check_params()
        self.X = None
        self.graph: CSR | None = None
        self.node_density: np.ndarray | None = None
        self.dense = Dense()
        self.bm25: BM25 | None = None

    def _check_params(self) -> None:
        for value, name, allowed in ((self.mode, "mode", MODES), (self.seeds, "seeds", SEEDS),
                                     (self.scoring, "scoring", SCORINGS), (self.density, "density", ("exact", "sampled", "auto"))):
            if value not in allowed:
                raise InputError(f"G3RAG: {name} must be one of {allowed}, got {value!r}")
        if self.k < 1 or self.seed_k < 1 or self.n_candidates < 1:
            raise InputError("G3RAG: k, seed_k and n_candidates must be positive")
        if self.gamma < 0 or self.tau <= 0 or self.lexical < 0:
            raise InputError(f"G3RAG: need gamma >= 0, tau > 0, lexical >= 0; got {self.gamma}, "
                             f"{self.tau}, {self.lexical}")

    def get_params(self) -> dict[str, Any]:
        return {"k": self.k, "sim_min": self.sim_min, "sim_max": self.sim_max, "beta": self.beta,
                "seed_k": self.seed_k, "mode": self.mode, "device": self.device, "published": self.published,
                "seeds": self.seeds, "scoring": self.scoring, "gamma": self.gamma, "tau": self.tau,
                "lexical": self.lexical, "n_candidates": self.n_candidates, "expand": self.expand,
                "hybrid_depth": self.hybrid_depth, "density": self.density,
                "density_samples": self.density_samples}

    # ------------------------------------------------------------------ index
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "G3RAG":
        """SPEC §1 index steps 1-6 (T is applied row-normalised at query time).

        With ``corpus`` a BM25 index is also fitted (for hybrid seeds / lexical relevance).
        """
        from ...kernels import call

        self.X = self._check_fit_inputs(X, corpus, False, self.name)
        n = len(self.X)
        self.node_density = call("density", self.X, mode=density_mode(self.density, n),
                                 n_samples=self.density_samples, device=self.device)
        pen = hub_penalty(self.node_density, self.beta)
        mode = graph_mode(self.mode, n, self.device)
        if mode == "ann":
            self.graph = ann_gain_knn(self.X, self.k, self.sim_min, self.sim_max, pen, progress=progress)
        elif mode == "exact":
            self.graph = call("gain_knn", self.X, k=max(n - 1, 1), sim_min=0.0, sim_max=1.0, penalty=pen,
                              progress=progress, device=self.device)
        else:
            self.graph = call("gain_knn", self.X, k=self.k, sim_min=self.sim_min, sim_max=self.sim_max,
                              penalty=pen, progress=progress, device=self.device)
        self.dense.fit(self.X)
        self.bm25 = BM25().fit(self.X, corpus, progress=progress) if corpus is not None else None
        return self

    def save(self, directory: Path) -> None:
        save_arrays(directory, {**self.graph.arrays(), "density": self.node_density})
        if self.bm25 is not None:
            self.bm25.save(directory)

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "G3RAG":
        """Open the saved graph memory-mapped (no refit)."""
        self = cls(**params)
        self.X = X
        arrays = load_arrays(directory, ["indptr", "indices", "data", "density"])
        self.graph = check_csr(arrays["indptr"], arrays["indices"], arrays["data"], len(X), f"{directory} graph")
        self.node_density = arrays["density"]
        self.dense = Dense.load(directory, {}, X, corpus, embedder)  # no copy of X (issue 5)
        if (directory / "bm25s").is_dir():
            self.bm25 = BM25.load(directory, {}, X, corpus, embedder)
        return self

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """SPEC §1 query steps 1-4 (``scoring="mask"``) or the fused scoring; batched."""
        Q = self._check_queries(Q, top_k, query_texts)
        if query_texts is not None and len(query_texts) != len(Q):
            raise InputError(f"{len(query_texts)} query texts for {len(Q)} query embeddings")
        if self.seeds == "hybrid" and self.scoring == "mask":
            if self.bm25 is None:
                raise InputError("G3RAG: hybrid seeds need the corpus at fit time: fit(X, corpus)")
            if query_texts is None:
                raise InputError("G3RAG: hybrid seeds need query_texts, one per query")
        # lexical relevance (fused scoring) is used when both the corpus and the texts are known
        needs_text = self.bm25 is not None and query_texts is not None
        ids = np.full((len(Q), top_k), PAD_ID, np.int64)
        scores = np.full((len(Q), top_k), PAD_SCORE, np.float32)
        chunk = max(1, min(QUERY_CHUNK, DENSE_SCORE_BUDGET // max(len(self.X), 1)))
        for c0 in range(0, len(Q), chunk):
            texts = list(query_texts[c0:c0 + chunk]) if needs_text else None
            run = self._search_masked if self.scoring == "mask" else self._search_fused
            ids[c0:c0 + chunk], scores[c0:c0 + chunk] = run(Q[c0:c0 + chunk], top_k, texts)
        return ids, scores

    def _diffuse(self, seed_ids: np.ndarray, seed_weights: np.ndarray | None) -> np.ndarray:
        from ...kernels import call

        g = self.graph
        return call("sparse_diffusion", seed_ids, seed_weights, g.indptr, g.indices, g.data, g.n_cols,
                    device=self.device)

    def _relevance_ranking(self, Q: np.ndarray, depth: int, texts: list[str] | None
                           ) -> tuple[np.ndarray, np.ndarray]:
        """Seed ranking of the masked scoring: dense cosine, or dense+BM25 RRF (``seeds="hybrid"``)."""
        if self.seeds == "dense":
            return faiss_topk(self.dense._index, Q, depth)
        return hybrid_ranking(self.dense, self.bm25, Q, texts, depth, self.hybrid_depth)

    def _search_masked(self, Q: np.ndarray, top_k: int, texts: list[str] | None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The published query (SPEC §1 query steps 1-4)."""
        n = len(self.X)
        seed_k = min(self.seed_k, n)
        rank_ids, rank_scores = self._relevance_ranking(Q, min(seed_k + top_k, n), texts)
        seeds = rank_ids[:, :seed_k]
        y = self._diffuse(seeds, None)
        np.put_along_axis(y, np.where(seeds >= 0, seeds, 0), -np.inf, axis=1)  # step 3: seed masking
        y[~(y > 0)] = -np.inf  # only passages diffusion reached
        diff_ids, diff_scores = topk_rows(y, top_k)
        ids = np.full((len(Q), top_k), PAD_ID, np.int64)
        scores = np.full((len(Q), top_k), PAD_SCORE, np.float32)
        for b in range(len(Q)):
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

    def _relevance(self, Q: np.ndarray, texts: list[str] | None, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``depth`` passages by ``cos + lexical · bm25/max bm25`` (float32, best first)."""
        n = len(self.X)
        d_ids, d_scores = faiss_topk(self.dense._index, Q, min(max(depth, self.hybrid_depth), n))
        if self.lexical == 0 or texts is None:
            return d_ids[:, :depth], d_scores[:, :depth]
        b_ids, b_scores = self.bm25.scores(texts, min(self.hybrid_depth, n))
        cand = np.concatenate([d_ids, b_ids], axis=1)
        rel = np.einsum("bd,bkd->bk", Q, gather_rows(self.X, np.maximum(cand, 0)))
        top_bm25 = np.where(np.isfinite(b_scores[:, :1]) & (b_scores[:, :1] > 0), b_scores[:, :1], 1.0)
        lex = np.zeros_like(rel)
        for b in range(len(Q)):
            lookup = {int(j): s / top_bm25[b, 0] for j, s in zip(b_ids[b], b_scores[b]) if j >= 0}
            lex[b] = [lookup.get(int(j), 0.0) for j in cand[b]]
        rel = rel + self.lexical * lex
        rel[cand < 0] = -np.inf
        # drop duplicate candidates (in both lists) before taking the top
        out_ids = np.full((len(Q), depth), PAD_ID, np.int64)
        out = np.full((len(Q), depth), PAD_SCORE, np.float32)
        for b in range(len(Q)):
            uniq, first = np.unique(cand[b], return_index=True)
            keep = uniq >= 0
            u, r = uniq[keep], rel[b, first[keep]]
            order = np.lexsort((u, -r))[:depth]
            out_ids[b, :len(order)], out[b, :len(order)] = u[order], r[order]
        return out_ids, out

    def _search_fused(self, Q: np.ndarray, top_k: int, texts: list[str] | None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Issue #6 scoring: ``relevance + γ · y / max y`` with ``y = pᵀT``, ``p = softmax(relevance/τ)``
        over the candidates; only candidates are ranked unless ``expand``."""
        n = len(self.X)
        m = min(max(self.n_candidates, top_k), n)
        cand, rel = self._relevance(Q, texts, m)
        valid = cand >= 0
        rows = np.broadcast_to(np.arange(len(Q))[:, None], cand.shape)
        if self.expand:
            score = (Q @ np.asarray(self.X).T).astype(np.float32)  # outside the candidates: cosine
        else:
            score = np.full((len(Q), n), -np.inf, np.float32)
        score[rows[valid], cand[valid]] = rel[valid]
        if self.gamma > 0:
            z = np.where(valid, np.exp((rel - rel[:, :1]) / self.tau), 0.0)
            p = (z / z.sum(axis=1, keepdims=True)).astype(np.float32)
            y = self._diffuse(cand, p)
            if not self.expand:
                y[~np.isfinite(score)] = 0.0
            top = y.max(axis=1, keepdims=True)
            score += self.gamma * np.divide(y, top, out=np.zeros_like(y), where=top > 0)
        return topk_rows(score, top_k)
