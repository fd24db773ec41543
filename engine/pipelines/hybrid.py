"""Hybrid baseline: dense + BM25 fused by reciprocal rank (k = 60).

:func:`hybrid_ranking` is also the "hybrid seeds / recall" option shared by the
graph pipelines (issue #6): any pipeline can ask it for a fused candidate list.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..corpus import Corpus
from ..embedders import Embedder
from ..ranking import reciprocal_rank_fusion, topk_rows
from .base import Pipeline
from .bm25 import BM25
from .dense import Dense

RRF_K = 60


def hybrid_ranking(dense: Dense, bm25: BM25, Q: np.ndarray, query_texts: Sequence[str], top_k: int,
                   depth: int = 100, rrf_k: int = RRF_K) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top_k`` rows by reciprocal rank fusion of the dense and BM25 top-``depth`` lists.

    Scores are the RRF sums ``Σ 1/(rrf_k + rank)``; ties break toward the lower row
    (:func:`~hopgraph.engine.ranking.topk_rows`); rows in neither list are padding.
    """
    n = len(dense.X)
    depth = max(depth, top_k)
    d_ids, _ = dense.search(Q, top_k=depth)
    b_ids, _ = bm25.scores(query_texts, depth)
    fused = reciprocal_rank_fusion([d_ids, b_ids], n, k=rrf_k)
    fused[fused == 0] = -np.inf
    return topk_rows(fused, top_k)


class Hybrid(Pipeline):
    """Dense + BM25 fused by reciprocal rank: the strongest non-graph baseline."""

    name = "hybrid"
    needs_corpus = True
    needs_query_texts = True
    query_params = frozenset({"rrf_k", "depth"})

    def __init__(self, rrf_k: int = RRF_K, depth: int = 100) -> None:
        self.rrf_k, self.depth = int(rrf_k), int(depth)
        self.X = None
        self.dense = Dense()
        self.bm25 = BM25()

    def get_params(self) -> dict[str, Any]:
        return {"rrf_k": self.rrf_k, "depth": self.depth}

    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "Hybrid":
        self.X = self._check_fit_inputs(X, corpus, True, self.name)
        self.dense.fit(self.X)
        self.bm25.fit(self.X, corpus, progress=progress)
        return self

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        return hybrid_ranking(self.dense, self.bm25, Q, query_texts, top_k, self.depth, self.rrf_k)

    def save(self, directory: Path) -> None:
        self.bm25.save(directory)

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "Hybrid":
        self = cls(**params)
        self.X = X
        self.dense.fit(X)
        self.bm25 = BM25.load(directory, {}, X, corpus, embedder)
        return self
