"""Hybrid baseline: dense + BM25 fused by reciprocal rank (k = 60), the shared
:func:`~hopgraph.engine.components.hybrid_ranking.hybrid_ranking` with its depths as search
parameters."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...kernels.tensors import as_numpy
from ..components.hybrid_ranking import RRF_K, hybrid_ranking, hybrid_ranking_tensors
from ..components.query_batch import QueryBatch
from ..cost import LIST_ENTRY, PASSAGE_ARRAYS, Cost, IndexShape
from ..params import FitParams, SearchParams, integer
from ..timing import StageTimer
from .base import Needs, Pipeline

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
        """The fused top-``k``; on a batch whose lists are searched on the device, fused there and only
        the top-``k`` ids and scores brought back."""
        if batch.lists_on_device():
            ids, scores = hybrid_ranking_tensors(batch, k, params.fusion_depth, params.rrf_k, timer)
            return as_numpy(ids), as_numpy(scores)
        return hybrid_ranking(batch, k, params.fusion_depth, params.rrf_k, timer)
