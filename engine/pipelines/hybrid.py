"""Hybrid baseline: dense + BM25 fused by reciprocal rank (k = 60).

:func:`hybrid_ranking` is also the "hybrid seeds / recall" option shared by the
graph pipelines: any pipeline can ask it for a fused candidate list of a query batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..components.shared import QueryBatch
from ..params import PipelineParams, integer
from ..ranking import rrf_topk
from ..timing import StageTimer
from .base import Pipeline

RRF_K = 60


def hybrid_ranking(batch: QueryBatch, top_k: int, depth: int = 100, rrf_k: int = RRF_K,
                   timer: StageTimer | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top_k`` rows by reciprocal rank fusion of the dense and BM25 top-``depth`` lists.

    Scores are the RRF sums ``Σ 1/(rrf_k + rank)``; ties break toward the lower row
    (:func:`~hopgraph.engine.ranking.topk_rows`); rows in neither list are padding. Only the
    rows of the two lists are scored (:func:`~hopgraph.engine.ranking.rrf_topk`): no ``[B, N]``
    array, O(B · depth) whatever the corpus size (issue 14). The lists are drawn under the
    batch's filter, so every returned row is allowed, and ``top_k`` come back whenever the two
    lists hold that many.
    """
    depth = max(depth, top_k)
    timer = timer or StageTimer()
    with timer("dense"):
        d_ids, _ = batch.dense_topk(depth)
    with timer("bm25"):
        b_ids, _ = batch.bm25_topk(depth)
    with timer("fusion"):
        return rrf_topk([d_ids, b_ids], top_k, k=rrf_k)


@dataclass(frozen=True)
class HybridParams(PipelineParams):
    """``rrf_k``: the RRF constant; ``depth``: how deep each list is read."""

    pipeline = "hybrid"
    rrf_k: int = integer(RRF_K, low=1, query=True)
    depth: int = integer(100, low=1, query=True)


class Hybrid(Pipeline):
    """Dense + BM25 fused by reciprocal rank: the strongest non-graph baseline."""

    name = "hybrid"
    Params = HybridParams
    components_used = ("dense", "bm25")
    needs_corpus = True
    needs_query_texts = True

    def _fit(self, progress: bool) -> None:
        self.components.bm25(who=self.name)

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        return hybrid_ranking(self.components.batch(Q, query_texts, allowed), top_k, self.depth, self.rrf_k, self._timer())
