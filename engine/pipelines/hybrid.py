"""Hybrid baseline: dense + BM25 fused by reciprocal rank (k = 60).

:func:`hybrid_ranking` is also the "hybrid seeds / candidates" option of the graph pipelines: any
pipeline can ask it for a fused candidate list of a query batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..components.query_batch import QueryBatch
from ..cost import LIST_ENTRY, PASSAGE_ARRAYS, Cost, IndexShape
from ..params import FitParams, SearchParams, integer
from ..ranking import rrf_topk
from ..timing import StageTimer
from .base import Needs, Pipeline

RRF_K = 60


def hybrid_ranking(batch: QueryBatch, k: int, depth: int = 100, rrf_k: int = RRF_K,
                   timer: StageTimer | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows by reciprocal rank fusion of the dense and BM25 top-``depth`` lists.

    Scores are the RRF sums ``Σ 1/(rrf_k + rank)``; ties break toward the lower row
    (:func:`~hopgraph.engine.ranking.topk_rows`); rows in neither list are padding. Only the
    rows of the two lists are scored (:func:`~hopgraph.engine.ranking.rrf_topk`): no ``[B, N]``
    array, O(B · depth) whatever the corpus size. The lists are drawn under the
    batch's filter, so every returned row is allowed, and ``k`` come back whenever the two
    lists hold that many.
    """
    depth = max(depth, k)
    timer = timer or StageTimer()
    with timer("dense"):
        d_ids, _ = batch.dense_topk(depth)
    with timer("bm25"):
        b_ids, _ = batch.bm25_topk(depth)
    with timer("fusion"):
        return rrf_topk([d_ids, b_ids], k, k=rrf_k)


#: no fit parameters: its BM25 is the index's
HybridFit = FitParams.none_for("hybrid", "HybridFit", __name__)


@dataclass(frozen=True)
class HybridSearch(SearchParams):
    """``rrf_k``: the RRF constant; ``fusion_depth``: how deep each list is read."""

    pipeline = "hybrid"
    renamed = {"depth": "fusion_depth"}
    rrf_k: int = integer(RRF_K, low=1, serving_bound=10_000)
    fusion_depth: int = integer(100, low=1, serving_bound=1_000)


class Hybrid(Pipeline):
    """Dense + BM25 fused by reciprocal rank: the strongest non-graph baseline."""

    name = "hybrid"
    FitParams = HybridFit
    SearchParams = HybridSearch
    needs = Needs(corpus=True, query_texts=True)
    components_used = ("dense", "bm25")
    stages = ("dense", "bm25", "fusion")

    def _fit(self, progress: bool) -> None:
        self.components.bm25(who=self.name)

    @classmethod
    def cost(cls, shape: IndexShape, params: HybridSearch, batch: int, k: int, grouped: bool = False) -> Cost:
        """:meth:`Pipeline.cost` plus the BM25 postings and the two ``fusion_depth`` lists fused."""
        n, depth = max(shape.n, 1), cls.cost_depth(shape, params, k, grouped)
        D = max(params.fusion_depth, depth)
        own = Cost(batch * (n + D), PASSAGE_ARRAYS * n + batch * 2 * D * LIST_ENTRY)
        return super().cost(shape, params, batch, k, grouped) + own

    def _search_batch(self, batch: QueryBatch, k: int, params: HybridSearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        return hybrid_ranking(batch, k, params.fusion_depth, params.rrf_k, timer)
